// Package cluster starts a whole cluster of replicas in one process: the
// embedded default behind `correctables up`, the latency-gap benchmark and
// the tests. Each replica has its own Pebble store in a directory of its
// own and talks to the others over real gRPC on loopback, optionally
// through an emulated WAN (internal/netem).
package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/correctables/correctables/internal/netem"
	"github.com/correctables/correctables/internal/server"
	"github.com/correctables/correctables/internal/storage"
)

// Options configures a cluster. Zero fields get defaults.
type Options struct {
	// Dir holds one sub-directory per replica (r1, r2, ...). Required.
	Dir string
	// Replicas is the number of replicas. Default 3.
	Replicas int
	// Host is the address replicas listen on. Default 127.0.0.1.
	Host string
	// BasePort: replica i serves on BasePort+i (clients and peers share
	// the port). 0 picks free ports.
	BasePort int
	// WAN names a netem preset (ec2-2016, pileus-2013); empty means no
	// emulated latency. Replica i is placed in the preset's i-th region.
	WAN string
	// ClientRegion is the region clients dial from (with WAN). Default: the
	// first replica's region.
	ClientRegion string
	// Placement, with WAN, is the region of each replica (len Replicas);
	// default: replica i in the preset's i-th region. Several replicas may
	// share a region (for example a primary site of three replicas).
	Placement []string
	// ReplicationDelay adds a one-way delay to every message other replicas
	// send to the listed replicas (by id): raft, gossip and anti-entropy
	// reach them late, as Pileus's secondaries that pull from the primary
	// periodically (SOSP'13 §5.1). Clients are not delayed. Each delay is
	// at most netem.MaxLatency less the link's own; SetReplicationDelay
	// changes it while the cluster runs. Empty: no delay (the default).
	ReplicationDelay map[uint64]time.Duration
	// ReplicationLoss and ReplicationLossStall emulate packet loss on the
	// delayed links (netem.Config.Loss, LossStall): each burst of messages
	// towards a delayed replica is held LossStall longer with probability
	// ReplicationLoss, and what follows on the link waits behind it, as
	// TCP shows a lost segment. Zero: no loss.
	ReplicationLoss      float64
	ReplicationLossStall time.Duration
	// Jitter, with WAN, spreads the one-way delay of every link between
	// two distinct regions uniformly over [RTT/2-Jitter, RTT/2+Jitter]
	// (netem.Config.Jitter; bytes are never reordered), as the delay of a
	// real WAN path varies. Links within a region and the replication
	// delay keep fixed delays. Zero: every delay is fixed (the default).
	Jitter time.Duration
	// Tick and ElectionTicks tune the replicas (see server.Config).
	Tick          time.Duration
	ElectionTicks int
	// NoSync disables fsync (tests and benchmarks only).
	NoSync bool
	Logger *slog.Logger
	// TLS, if set, returns replica id's TLS configuration (see
	// server.TLS); Insecure allows plaintext off loopback (see
	// server.Config).
	TLS      func(id uint64) (*server.TLS, error)
	Insecure bool
	// ClusterToken goes into the cluster id (server.Config.ClusterToken).
	// The id is computed from the replicas' listen addresses, whatever
	// addresses (emulated WAN, delay proxies) they reach each other at.
	ClusterToken string
}

// Cluster is a running in-process cluster.
type Cluster struct {
	Servers []*server.Server
	// Endpoints are what a client in ClientRegion dials, one per replica.
	Endpoints []string
	// Regions[i] is replica i+1's region (with WAN).
	Regions []string
	// ClientRegion is the region Endpoints are seen from (with WAN).
	ClientRegion string
	Net          *netem.Network
	opts         Options
	// delayed holds, per delayed replica id, the proxies its peers send
	// through.
	delayed map[uint64][]delayLink
}

// delayLink is one peer's link to a delayed replica: a proxy whose latency
// is the link's own one-way latency plus the replication delay.
type delayLink struct {
	base time.Duration
	p    *netem.Proxy
}

// Start starts the cluster, recovering each replica from its directory.
func Start(opts Options) (*Cluster, error) {
	if opts.Dir == "" {
		return nil, errors.New("cluster: Dir is required")
	}
	if opts.Replicas == 0 {
		opts.Replicas = 3
	}
	if opts.Replicas < 1 || opts.Replicas > 9 {
		return nil, fmt.Errorf("cluster: %d replicas; want 1 to 9", opts.Replicas)
	}
	if opts.Jitter < 0 || (opts.Jitter > 0 && opts.WAN == "") {
		return nil, fmt.Errorf("cluster: jitter %v: want a WAN and a jitter not negative", opts.Jitter)
	}
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	c := &Cluster{opts: opts}
	n := opts.Replicas
	// The real listen addresses. Free ports are picked by listening on
	// port 0, and the listeners are handed to the servers as they are:
	// closing them and listening again would let another process on the
	// machine take a port in between (seen in CI as "address already in
	// use").
	listen := make([]string, n)
	lns := make([]net.Listener, n)
	closeUnused := func() {
		for i, l := range lns {
			if l != nil && i >= len(c.Servers) {
				l.Close()
			}
		}
	}
	for i := range n {
		if opts.BasePort > 0 {
			listen[i] = net.JoinHostPort(opts.Host, strconv.Itoa(opts.BasePort+i+1))
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort(opts.Host, "0"))
		if err != nil {
			closeUnused()
			return nil, fmt.Errorf("cluster: finding a free port: %w", err)
		}
		lns[i], listen[i] = l, l.Addr().String()
	}
	started := false
	defer func() {
		if !started {
			closeUnused()
		}
	}()
	// Who dials what: with a WAN, replica i reaches replica j through the
	// proxy for (region i -> j), and clients through (client region -> j).
	peersOf := func(int) map[uint64]string {
		m := map[uint64]string{}
		for j := range n {
			m[uint64(j+1)] = listen[j]
		}
		return m
	}
	c.Endpoints = listen
	if opts.WAN != "" {
		topo, err := netem.Preset(opts.WAN)
		if err != nil {
			return nil, err
		}
		regions := topo.Regions()
		if len(regions) < n && len(opts.Placement) == 0 {
			return nil, fmt.Errorf("cluster: preset %s has %d regions for %d replicas (give a Placement)", opts.WAN, len(regions), n)
		}
		c.Regions = regions[:min(n, len(regions))]
		if len(opts.Placement) > 0 {
			if len(opts.Placement) != n {
				return nil, fmt.Errorf("cluster: placement lists %d regions for %d replicas", len(opts.Placement), n)
			}
			for _, r := range opts.Placement {
				if !topo.Has(r) {
					return nil, fmt.Errorf("cluster: placement region %q is not in preset %s (regions: %s)", r, opts.WAN, strings.Join(regions, ", "))
				}
			}
			c.Regions = append([]string(nil), opts.Placement...)
		}
		if opts.ClientRegion == "" {
			opts.ClientRegion = c.Regions[0]
		}
		if !topo.Has(opts.ClientRegion) {
			return nil, fmt.Errorf("cluster: client region %q is not in preset %s (regions: %s)", opts.ClientRegion, opts.WAN, strings.Join(regions, ", "))
		}
		var reps []netem.Replica
		for i := range n {
			reps = append(reps, netem.Replica{Name: name(i), Region: c.Regions[i], Addr: listen[i]})
		}
		// Every region is a source, so that clients may dial from any
		// (EndpointsFrom).
		nw, err := netem.NewNetwork(netem.NetworkConfig{Topology: topo, Replicas: reps, Sources: regions})
		if err != nil {
			return nil, err
		}
		c.Net = nw
		if opts.Jitter != 0 {
			for i, a := range regions {
				for _, b := range regions[i+1:] {
					if err := nw.SetJitter(a, b, opts.Jitter); err != nil {
						nw.Close()
						return nil, fmt.Errorf("cluster: %w", err)
					}
				}
			}
		}
		c.Endpoints = make([]string, n)
		for j := range n {
			if c.Endpoints[j], err = nw.Addr(opts.ClientRegion, name(j)); err != nil {
				nw.Close()
				return nil, err
			}
		}
		peersOf = func(i int) map[uint64]string {
			m := map[uint64]string{uint64(i + 1): listen[i]}
			for j := range n {
				if j != i {
					m[uint64(j+1)], _ = nw.Addr(c.Regions[i], name(j))
				}
			}
			return m
		}
	}
	c.opts = opts
	c.ClientRegion = opts.ClientRegion
	if err := c.delayPeers(listen); err != nil {
		c.Stop()
		return nil, err
	}
	basePeers := peersOf
	peersOf = func(i int) map[uint64]string {
		m := basePeers(i)
		for j, links := range c.delayed {
			if j != uint64(i+1) {
				m[j] = links[i].p.Addr()
			}
		}
		return m
	}
	founders := map[uint64]string{}
	for i := range n {
		founders[uint64(i+1)] = listen[i]
	}
	for i := range n {
		id := uint64(i + 1)
		dir := filepath.Join(opts.Dir, name(i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			c.Stop()
			return nil, fmt.Errorf("cluster: %w", err)
		}
		st, err := storage.Open(storage.Options{Dir: dir, NoSync: opts.NoSync, Logger: opts.Logger.With("replica", id), AsyncSnapshotReads: true})
		if err != nil {
			c.Stop()
			return nil, fmt.Errorf("cluster: replica %d: %w", id, err)
		}
		var tlsCfg *server.TLS
		if opts.TLS != nil {
			if tlsCfg, err = opts.TLS(id); err != nil {
				st.Close()
				c.Stop()
				return nil, fmt.Errorf("cluster: replica %d: %w", id, err)
			}
		}
		s, err := server.New(server.Config{
			ID: id, Peers: peersOf(i), ClientAddr: listen[i], PeerAddr: listen[i], ClientListener: lns[i], Storage: st,
			Tick: opts.Tick, ElectionTicks: opts.ElectionTicks, Logger: opts.Logger,
			TLS: tlsCfg, Insecure: opts.Insecure,
			InitialCluster: founders, ClusterToken: opts.ClusterToken,
		})
		if err != nil {
			st.Close()
			c.Stop()
			return nil, err
		}
		if err := s.Start(); err != nil {
			st.Close()
			c.Stop()
			return nil, err
		}
		c.Servers = append(c.Servers, s)
	}
	started = true
	return c, nil
}

// Stop stops every replica and the emulated network.
func (c *Cluster) Stop() error {
	var errs []error
	for _, s := range c.Servers {
		errs = append(errs, s.Stop())
	}
	if c.Net != nil {
		errs = append(errs, c.Net.Close())
	}
	for _, links := range c.delayed {
		for _, l := range links {
			if l.p != nil {
				errs = append(errs, l.p.Close())
			}
		}
	}
	return errors.Join(errs...)
}

// delayPeers starts, for every replica with a replication delay, one proxy
// per other replica through which that replica's messages reach it. A peer
// stream carries messages one way (the receiver answers on its own
// stream), so only messages towards the delayed replica are late.
func (c *Cluster) delayPeers(listen []string) error {
	n := len(listen)
	for id, d := range c.opts.ReplicationDelay {
		if id < 1 || id > uint64(n) {
			return fmt.Errorf("cluster: replication delay for replica %d of %d", id, n)
		}
		if c.delayed == nil {
			c.delayed = map[uint64][]delayLink{}
		}
		links := make([]delayLink, n)
		c.delayed[id] = links
		for i := range n {
			if uint64(i+1) == id {
				continue
			}
			base := c.RTT(uint64(i+1), id) / 2
			p, err := netem.NewProxy(listen[id-1], netem.Config{Latency: base, MaxChunksInFlight: 1 << 14,
				Loss: c.opts.ReplicationLoss, LossStall: c.opts.ReplicationLossStall, Seed: id<<8 | uint64(i+1)})
			if err != nil {
				return fmt.Errorf("cluster: delayed link %d -> %d: %w", i+1, id, err)
			}
			links[i] = delayLink{base: base, p: p}
		}
		if err := c.SetReplicationDelay(id, d); err != nil {
			return err
		}
	}
	return nil
}

// SetReplicationDelay changes the delay of messages towards replica id,
// which must have been given a delay (possibly zero) in
// Options.ReplicationDelay. It applies to bytes sent from now on.
func (c *Cluster) SetReplicationDelay(id uint64, d time.Duration) error {
	links, ok := c.delayed[id]
	if !ok {
		return fmt.Errorf("cluster: replica %d has no delayed links (set Options.ReplicationDelay)", id)
	}
	for _, l := range links {
		if l.p == nil {
			continue
		}
		if err := l.p.SetLatency(l.base + d); err != nil {
			return fmt.Errorf("cluster: replication delay %v towards replica %d: %w", d, id, err)
		}
	}
	return nil
}

// EndpointsFrom returns what a client in region dials, one endpoint per
// replica (with WAN; without, the replicas' own addresses).
func (c *Cluster) EndpointsFrom(region string) ([]string, error) {
	if c.Net == nil {
		return append([]string(nil), c.Endpoints...), nil
	}
	out := make([]string, len(c.Servers))
	for j := range out {
		a, err := c.Net.Addr(region, name(j))
		if err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
		out[j] = a
	}
	return out, nil
}

func name(i int) string { return "r" + strconv.Itoa(i+1) }

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

// WaitLeader waits until every replica knows the same leader and returns it.
func (c *Cluster) WaitLeader(ctx context.Context) (uint64, error) {
	for {
		var lead uint64
		agree := true
		for _, s := range c.Servers {
			l, err := s.Leader(ctx)
			if err != nil {
				return 0, err
			}
			if l == 0 || (lead != 0 && l != lead) {
				agree = false
			}
			lead = l
		}
		if agree {
			return lead, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("cluster: no leader: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// MoveLeader makes replica id the leader (raft leadership transfer) and
// waits until every replica knows it.
func (c *Cluster) MoveLeader(ctx context.Context, id uint64) error {
	for {
		lead, err := c.WaitLeader(ctx)
		if err != nil {
			return err
		}
		if lead == id {
			return nil
		}
		if err := c.Servers[lead-1].TransferLeadership(ctx, id); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: moving leadership to %d: %w", id, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// RTT returns the emulated round-trip time between two replicas' regions, or
// between the client region and a replica (from = 0); zero without a WAN.
func (c *Cluster) RTT(from, to uint64) time.Duration {
	if c.Net == nil {
		return 0
	}
	a := c.ClientRegion
	if from != 0 {
		a = c.Regions[from-1]
	}
	d, _ := c.Net.Topology().RTT(a, c.Regions[to-1])
	return d
}

// Nearest returns the replica with the smallest emulated round trip from
// the client region (replica 1 without a WAN).
func (c *Cluster) Nearest() uint64 {
	nearest := uint64(1)
	for id := uint64(1); id <= uint64(len(c.Servers)); id++ {
		if c.RTT(0, id) < c.RTT(0, nearest) {
			nearest = id
		}
	}
	return nearest
}
