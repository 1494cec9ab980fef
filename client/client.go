package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/internal/redial"
)

// Client is a connection to the replicas of a Correctables store. It routes
// each operation to the nearest healthy replica, measured by round-trip time,
// except an update that asks for its final view only, which goes to the raft
// leader when the replicas have reported one (leaderFirst), and fails over
// to the next on Unavailable. It is safe for concurrent use.
//
// Client implements correctable.Binding[Op, Result] with the levels
// correctable.Eventual (the preliminary view, from one replica's tentative
// state) and correctable.Strong (the final view, after consensus).
type Client struct {
	cfg       config
	endpoints []*endpoint
	stats     counters
	// mon is the monitor SLA reads use (Pileus §4.5), fed by the probes.
	mon *Monitor
	// pin is the cluster id the Client is pinned to (clusterid.go).
	pin clusterPin

	// stop ends the prober; wg waits for it.
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu     sync.Mutex
	closed bool
}

// endpoint is one replica's address, connection and health.
type endpoint struct {
	addr  string
	index int // position in Dial's list: the tie-breaker
	conn  *grpc.ClientConn
	store api.StoreClient
	// noCall is set once the endpoint answered Call with Unimplemented (a
	// replica older than Call): single-view operations take Invoke there.
	noCall atomic.Bool
	// noBatch is set once the endpoint answered CallBatch with
	// Unimplemented: calls go one by one there.
	noBatch atomic.Bool
	// batchers queue single-view calls by kind (batch.go).
	batchers [batchKinds]batcher
	// pipe carries single-view operations (pipe.go); noPipe is set once
	// the endpoint answered Pipe with Unimplemented (a replica older than
	// Pipe): they take Call and CallBatch there.
	pipeMu sync.Mutex // held to open a pipe
	pipe   atomic.Pointer[pipe]
	noPipe atomic.Bool

	mu      sync.Mutex
	samples []time.Duration // the last round-trip times, a ring of cfg.probeWindow
	next    int             // ring position of the next sample
	rtt     time.Duration   // the median of samples, kept with them: route reads it per operation
	healthy bool
	replica uint64 // replica id from the last Status
	lastErr error
}

// EndpointInfo describes an endpoint as the Client sees it.
type EndpointInfo struct {
	// Address is the endpoint as given to Dial.
	Address string
	// Replica is the replica id its last Status reported (0 if none yet).
	Replica uint64
	// RTT is the median of the recent round-trip samples (0 if none yet).
	RTT time.Duration
	// Healthy reports that the last probe answered and no operation has
	// found the endpoint unavailable since.
	Healthy bool
	// Err is the error that marked the endpoint down, if it is down.
	Err error
}

// MaxReplyBytes bounds a reply the client accepts. Replies are as large as
// the servers' limits make them: a scan returns up to MaxScan items of a
// key and a value each, about 1 GB at the default limits, far over gRPC's
// default of 4 MiB (a scan of five maximal values failed as if the replica
// were overloaded). The client trusts its servers; WithDialOptions with
// grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(n)) lowers it.
const MaxReplyBytes = math.MaxInt32

// reconnect bounds gRPC's reconnection backoff to a second. With gRPC's
// default (1 s, growing 1.6 times per failed attempt, up to 2 minutes) an
// endpoint that was down a while was dialed again only seconds to minutes
// after it came back, and every operation and probe sent to it meanwhile
// failed at once with the last dial error: a Client of a one-replica
// cluster restarted under it failed its next operation "connection refused"
// although the replica was serving (e2e TestSoakSingleReplicaRestart).
var reconnect = redial.Params

// Dial connects to the replicas at endpoints (host:port) and measures the
// round-trip time to each with a few Status probes, within the dial timeout.
// It fails with ErrUnavailable if no endpoint answers, and with
// ErrInvalidArgument on a bad configuration. ctx bounds Dial only, not the
// Client.
//
// The Client re-probes every endpoint periodically on a goroutine it owns;
// Close stops it and closes the connections.
func Dial(ctx context.Context, endpoints []string, opts ...Option) (*Client, error) {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(endpoints); err != nil {
		return nil, fmt.Errorf("client: dial: %w", err)
	}
	c := &Client{cfg: cfg, mon: newMonitor()}
	c.pin.id.Store(cfg.clusterID)
	creds := cfg.creds
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	dialOpts := append([]grpc.DialOption{
		grpc.WithConnectParams(reconnect),
		grpc.WithTransportCredentials(creds),
		grpc.WithStatsHandler(wireCounter{&c.stats}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxReplyBytes)),
		// Fixed flow-control windows turn off gRPC's bandwidth-delay
		// estimator, whose PING per round trip cost both ends two more
		// syscalls for nearly every reply; 16 MiB is the estimator's own
		// limit, so no reply that it would have sped up is slower.
		grpc.WithInitialWindowSize(16 << 20), grpc.WithInitialConnWindowSize(32 << 20),
	}, cfg.dialOpts...)
	for i, addr := range endpoints {
		conn, err := grpc.NewClient(addr, append(c.pin.dialOptions(addr), dialOpts...)...)
		if err != nil {
			c.closeConns()
			return nil, fmt.Errorf("client: dial %s: %w: %w", addr, ErrInvalidArgument, err)
		}
		c.endpoints = append(c.endpoints, &endpoint{
			addr:    addr,
			index:   i,
			conn:    conn,
			store:   api.NewStoreClient(conn),
			samples: make([]time.Duration, 0, cfg.probeWindow),
		})
	}

	dctx, cancel := context.WithTimeout(ctx, cfg.dialTimeout)
	defer cancel()
	c.probeAll(dctx, cfg.initialProbes)
	if !slices.ContainsFunc(c.Endpoints(), func(e EndpointInfo) bool { return e.Healthy }) {
		var errs []error
		for _, e := range c.Endpoints() {
			if e.Err == nil {
				e.Err = errors.New("no answer within the dial timeout")
			}
			errs = append(errs, fmt.Errorf("%s: %w", e.Address, e.Err))
		}
		c.closeConns()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("client: dial: %w", context.Cause(ctx))
		}
		return nil, fmt.Errorf("client: dial: no endpoint answered: %w: %w", ErrUnavailable, errors.Join(errs...))
	}

	pctx, stop := context.WithCancel(context.Background())
	c.stop = stop
	c.wg.Go(func() { c.probeLoop(pctx) })
	return c, nil
}

// Close stops the prober and closes the connections. Invocations in flight
// fail (with ErrClosed), and so do later ones. Close is idempotent.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	c.stop()
	c.wg.Wait()
	return c.closeConns()
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

func (c *Client) closeConns() error {
	var errs []error
	for _, e := range c.endpoints {
		e.closePipe()
		if err := e.conn.Close(); err != nil {
			errs = append(errs, fmt.Errorf("client: close %s: %w", e.addr, err))
		}
	}
	return errors.Join(errs...)
}

// Endpoints reports the endpoints in the order operations try them: healthy
// ones first, nearest first.
func (c *Client) Endpoints() []EndpointInfo {
	eps := c.route()
	out := make([]EndpointInfo, len(eps))
	for i, e := range eps {
		out[i] = e.info()
	}
	return out
}

func (e *endpoint) info() EndpointInfo {
	e.mu.Lock()
	defer e.mu.Unlock()
	info := EndpointInfo{Address: e.addr, Replica: e.replica, RTT: e.rttLocked(), Healthy: e.healthy}
	if !e.healthy {
		info.Err = e.lastErr
	}
	return info
}

// rttLocked is the median of the samples; 0 without samples.
func (e *endpoint) rttLocked() time.Duration { return e.rtt }

// addSampleLocked records a round-trip time, dropping the oldest of a full
// window, and updates the median.
func (e *endpoint) addSampleLocked(rtt time.Duration, window int) {
	if len(e.samples) < window {
		e.samples = append(e.samples, rtt)
	} else {
		e.samples[e.next] = rtt
	}
	e.next = (e.next + 1) % window
	s := slices.Clone(e.samples)
	slices.Sort(s)
	e.rtt = s[len(s)/2]
}

// route returns the endpoints in the order to try them: healthy before
// unhealthy, then by estimated round-trip time (unmeasured last), then in
// Dial's order. Unhealthy endpoints stay in the list, last: when every
// endpoint looks down, trying is still better than failing.
func (c *Client) route() []*endpoint {
	type entry struct {
		e       *endpoint
		healthy bool
		rtt     time.Duration
	}
	es := make([]entry, len(c.endpoints))
	for i, e := range c.endpoints {
		e.mu.Lock()
		es[i] = entry{e, e.healthy, e.rttLocked()}
		e.mu.Unlock()
	}
	slices.SortFunc(es, func(a, b entry) int {
		if a.healthy != b.healthy {
			if a.healthy {
				return -1
			}
			return 1
		}
		if (a.rtt == 0) != (b.rtt == 0) {
			if a.rtt == 0 {
				return 1
			}
			return -1
		}
		return cmp.Or(cmp.Compare(a.rtt, b.rtt), cmp.Compare(a.e.index, b.e.index))
	})
	out := make([]*endpoint, len(es))
	for i, x := range es {
		out[i] = x.e
	}
	return out
}

// leaderFirst moves the healthy endpoint of the leader the replicas last
// reported to the front of route, for an update that asks for its final
// view only. Submitted at a follower, such an update is written there
// before its proposal leaves for the leader, and its commit comes back from
// the leader: at the leader, its one write overlaps its followers' (one
// sync and one round trip on its path, as a proposal in etcd), and the
// client-leader round trip is no longer than the client-follower-leader
// path it replaces. An update that wants the preliminary view too still
// goes to the nearest replica, where that view is fastest. Without a known
// healthy leader, route is returned as it is.
func (c *Client) leaderFirst(route []*endpoint) []*endpoint {
	lead := c.mon.Leader()
	if lead == 0 {
		return route
	}
	for i, e := range route {
		e.mu.Lock()
		ok := e.replica == lead && e.healthy
		e.mu.Unlock()
		if !ok {
			continue
		}
		if i == 0 {
			return route
		}
		out := make([]*endpoint, 0, len(route))
		out = append(out, e)
		out = append(out, route[:i]...)
		return append(out, route[i+1:]...)
	}
	return route
}

// markDown records that an operation found e unavailable; the next probe
// that answers marks it up again.
func (c *Client) markDown(e *endpoint, err error) {
	e.mu.Lock()
	was := e.healthy
	e.healthy, e.lastErr = false, err
	e.mu.Unlock()
	if was {
		c.cfg.logger.Warn("client: endpoint down", "endpoint", e.addr, "err", err)
	}
}

// probeLoop re-probes every endpoint every probe interval until ctx ends.
func (c *Client) probeLoop(ctx context.Context) {
	t := time.NewTicker(c.cfg.probeInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.probeAll(ctx, 1)
		}
	}
}

// probeAll sends up to n probes to each endpoint, endpoints in parallel,
// one after the other per endpoint, stopping at an endpoint's first
// failure. It returns when every probe has.
func (c *Client) probeAll(ctx context.Context, n int) {
	var wg sync.WaitGroup
	for _, e := range c.endpoints {
		wg.Go(func() {
			for range n {
				if !c.probe(ctx, e) {
					return
				}
			}
		})
	}
	wg.Wait()
}

// probe measures one round trip to e with the Status RPC and records it. It
// reports whether e answered.
func (c *Client) probe(ctx context.Context, e *endpoint) bool {
	pctx, cancel := context.WithTimeout(ctx, c.cfg.probeTimeout)
	defer cancel()
	start := time.Now()
	rep, err := e.store.Status(pctx, &api.StatusRequest{})
	rtt := time.Since(start)
	if ctx.Err() != nil {
		return false // stopping: a probe cut short says nothing about e
	}
	e.mu.Lock()
	was := e.healthy
	if err != nil {
		e.healthy, e.lastErr = false, errorFromStatus(pctx, err)
	} else {
		e.addSampleLocked(rtt, c.cfg.probeWindow)
		e.healthy, e.lastErr, e.replica = true, nil, rep.GetId()
	}
	now, lastErr := e.healthy, e.lastErr
	e.mu.Unlock()
	if err == nil {
		c.mon.observeStatus(rtt, rep)
	}
	switch {
	case was && !now:
		c.cfg.logger.Warn("client: endpoint down", "endpoint", e.addr, "err", lastErr)
	case !was && now:
		c.cfg.logger.Info("client: endpoint up", "endpoint", e.addr, "rtt", rtt)
	}
	return err == nil
}
