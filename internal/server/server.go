package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/internal/driver"
	"github.com/correctables/correctables/internal/replica"
	"github.com/correctables/correctables/internal/state"
)

// Storage is a replica's durable storage (see driver.Storage);
// internal/storage implements it on Pebble.
type Storage = driver.Storage

// Config configures a Server. validate fills defaults.
type Config struct {
	// ID is this replica's id; Peers maps every replica's id (this one
	// included) to the address its peer service listens on.
	ID    uint64
	Peers map[uint64]string
	// ClientAddr and PeerAddr are where this replica listens for clients and
	// for peers ("127.0.0.1:0" picks a port). They may be the same address:
	// both services are then served on one listener.
	ClientAddr, PeerAddr string
	// ClientListener, if set, is the listener for ClientAddr, opened by the
	// caller (who closes it only if Start fails; Stop closes it otherwise).
	// A caller that must know every replica's address before starting any
	// keeps the ports it picked this way instead of closing them and
	// listening again, when another process could take them in between.
	ClientListener net.Listener
	// Storage is the durable storage; the Server closes it on Stop.
	Storage Storage
	// Tick is the period of the replica's logical clock. Default 10ms.
	Tick time.Duration
	// ElectionTicks, HeartbeatTicks, GossipTicks, NoopTicks, RetryTicks:
	// see replica.Config. Defaults 30, 3, 2, 5, 50.
	ElectionTicks, HeartbeatTicks, GossipTicks, NoopTicks, RetryTicks int
	// SnapshotEntries, SnapshotBytes, SnapshotTicks: see replica.Config.
	// Defaults 10,000 entries, 16 MiB, 30,000 ticks.
	SnapshotEntries, SnapshotBytes, SnapshotTicks int
	// CompactMargin is how many entries stay in the log behind a snapshot,
	// so that a follower a little behind catches up from the log rather
	// than from a snapshot. Default 1,000.
	CompactMargin int
	// Limits bound keys, values and scans.
	Limits state.Limits
	// MaxInflight bounds client requests in flight. Default 10,000.
	MaxInflight int
	// MaxBatch bounds the inputs (client requests, peer messages, ticks)
	// the loop takes before it handles a Ready: one fsync covers them all
	// (group commit). Default 512.
	MaxBatch int
	// PeerQueue and PeerQueueBytes bound the messages queued for one
	// peer; past them messages are dropped (raft and anti-entropy recover).
	// Defaults 4,096 and 64 MiB.
	PeerQueue      int
	PeerQueueBytes int
	// Logger receives the server's logs. Default: slog.Default().
	Logger *slog.Logger
	// Metrics, if set, receives the server's metrics.
	Metrics *Metrics
	// Seed seeds the election timer; default: random.
	Seed uint64
	// Join starts a replica that the cluster added with a membership
	// change (`member add`): with an empty data directory it bootstraps
	// nothing and learns the configuration and the data from the leader.
	// Peers then lists the cluster's replicas it can reach first (and this
	// one).
	Join bool
	// TLS secures clients' and peers' connections (see TLS). Without it
	// the server speaks plaintext, which validate accepts only when every
	// address (listeners and peers) is on loopback, or with Insecure.
	TLS *TLS
	// Insecure allows plaintext on addresses that are not on loopback.
	Insecure bool
	// ClusterToken, InitialCluster and ClusterID fix the cluster id when
	// the storage has none (see clusterid.go): ClusterID if set, else
	// ComputeClusterID(InitialCluster, ClusterToken), InitialCluster
	// defaulting to Peers (give it when Peers names some replicas at other
	// addresses than the other replicas use, e.g. through proxies). A
	// replica with Join and none of them learns it from the cluster.
	ClusterToken   string
	InitialCluster map[uint64]string
	ClusterID      uint64
	// BusyWait is how long a request waits for room when the replica
	// cannot take it yet (it holds MaxTentative uncommitted operations of
	// its own, or MaxPending strong ones: replica.ErrBusy) before it is
	// refused with ResourceExhausted: back-pressure, so that a burst of
	// weak writes faster than commits waits rather than fails. Waiting
	// requests are taken in arrival order as commits make room. Default
	// 1s; negative refuses at once.
	BusyWait time.Duration
	// MinVVWait bounds how long a weak read with a min_vv (api.InvokeRequest)
	// waits for this replica to receive the operations it counts before it
	// is refused (ErrBehind). Default 5s.
	MinVVWait time.Duration
	// DrainTimeout bounds how long member remove and member replace wait
	// for the replica they remove to confirm its drain before they go
	// ahead without it (a request may set its own bound). Default 10s.
	DrainTimeout time.Duration

	// maxTentative, if set (tests), is the replica's MaxTentative.
	maxTentative int
	// dropPeerMsg, if set (tests), drops the peer messages it selects
	// before they are queued: a network fault between replicas.
	dropPeerMsg func(replica.Message) bool
}

func (c *Config) validate() error {
	if c.ID == 0 {
		return errors.New("server: config: ID must be non-zero")
	}
	if _, ok := c.Peers[c.ID]; !ok {
		return fmt.Errorf("server: config: Peers has no address for this replica (%d)", c.ID)
	}
	if c.Storage == nil {
		return errors.New("server: config: Storage is required")
	}
	if c.ClientAddr == "" {
		return errors.New("server: config: ClientAddr is required")
	}
	if c.ClientListener != nil && c.ClientListener.Addr().String() != c.ClientAddr {
		return fmt.Errorf("server: config: ClientListener listens on %s, not on ClientAddr %s", c.ClientListener.Addr(), c.ClientAddr)
	}
	if c.PeerAddr == "" {
		c.PeerAddr = c.Peers[c.ID]
	}
	if c.TLS != nil {
		if err := c.TLS.validate(c.ID); err != nil {
			return err
		}
	}
	if err := c.checkPlaintext(); err != nil {
		return err
	}
	if c.Tick <= 0 {
		c.Tick = 10 * time.Millisecond
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.ElectionTicks, 30)
	def(&c.HeartbeatTicks, 3)
	def(&c.GossipTicks, 2)
	def(&c.NoopTicks, 5)
	def(&c.RetryTicks, 50)
	def(&c.MaxInflight, 10_000)
	def(&c.MaxBatch, 512)
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = defaultDrainTimeout
	}
	if c.BusyWait == 0 {
		c.BusyWait = time.Second
	}
	if c.MinVVWait <= 0 {
		c.MinVVWait = 5 * time.Second
	}
	def(&c.CompactMargin, 1000)
	def(&c.PeerQueue, 4096)
	def(&c.PeerQueueBytes, 64<<20)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Seed == 0 {
		c.Seed = rand.Uint64()
	}
	c.Limits.EnsureDefaults()
	return c.Limits.Validate()
}

// request is a client request on its way to the loop.
type request struct {
	ctx context.Context
	cr  replica.ClientRequest
	// out carries what the loop has for the request: the replica's refusal
	// of it, or its views, the last of which closes out. One channel (not
	// one for the refusal and one for the views) so that the handler wakes
	// once for a single-view request. Buffered for all it can get: one
	// refusal, or one view per view it asks for (views).
	out chan outcome
	// parked is when the replica first refused it as busy (see BusyWait).
	parked time.Time
	// minVV, if set, is what the replica must have received before the
	// request runs (api.InvokeRequest.min_vv); behindSince is when it began
	// to wait for it (see behind).
	minVV       replica.VV
	behindSince time.Time
	// pipe, if set, is told of each outcome (an operation of a Pipe: no
	// goroutine waits on out).
	pipe *pipeOp
}

// put hands the request an outcome: out has room for it (see out).
func (req *request) put(o outcome) {
	req.out <- o
	req.told()
}

// told tells a Pipe's operation that out holds its outcome, or was closed.
func (req *request) told() {
	if req.pipe != nil {
		req.pipe.ready()
	}
}

// outcome is a refusal (err) or a view.
type outcome struct {
	v   replica.View
	err error
}

// Server runs one replica: the event loop that owns it, gRPC services for
// clients and peers, and the storage.
type Server struct {
	api.UnimplementedStoreServer
	api.UnimplementedPeerServer

	cfg Config
	log *slog.Logger
	rep *replica.Replica
	drv *driver.Driver
	// repMu is held by whoever works on rep: the loop, for all of a round
	// but its synced write and its wait for input, and readNow (weak reads
	// off the loop, readnow.go). repLocked: the loop holds it (the loop's
	// own field); repClosed: the loop has ended; saveDone: closed once the
	// write in progress has synced (nil when none is). The last two under
	// repMu.
	repMu     sync.Mutex
	repLocked bool
	// loopHolds mirrors repLocked for readers off the loop (tryRep): set
	// while the loop holds repMu.
	loopHolds   atomic.Bool
	repClosed   bool
	saveDone    chan struct{}
	readsNow    atomic.Int64 // weak reads run off the loop
	statusesNow atomic.Int64 // Status calls answered off the loop

	submit  chan *request
	inbound chan replica.Message
	status  chan chan *api.StatusReply
	do      chan func(*replica.Replica)
	stop    chan struct{}
	done    chan struct{}

	// Owned by the loop: the requests waiting for views, by seq.
	waiting map[uint64]*request
	nextSeq uint64
	// parked holds, oldest first, the requests the replica refused as busy
	// that wait for room (Config.BusyWait).
	parked      []*request
	parkedKinds [3]int // of parked, by busyKind
	// behind holds, oldest first, the weak reads with a min_vv this replica
	// does not cover yet, and statusBehind the Status calls with one
	// (runBehind).
	behind       []*request
	statusBehind []*statusWaiter
	// Catch-up logging (logCatchUp).
	catchUpLogged time.Time
	catchingUp    bool
	// lead and term: the leader and term logged last (logLeader);
	// slowLogged: when a slow loop round was logged last (logSlowRound).
	lead, term uint64
	slowLogged time.Time
	// published is the Status of the end of a recent loop round, for a
	// Status the loop is too busy to answer (Status, publishStatus).
	published atomic.Pointer[publishedStatus]

	inflight chan struct{}    // semaphore of client requests
	peers    map[uint64]*peer // owned by the loop once it runs
	// unreachable: peers a raft message could not be queued for in the
	// Ready being handled (send; the loop's).
	unreachable []uint64
	// links maps a peer's id to its current *peer, for the peer streams'
	// handlers (Stream kicks the link back to a peer that connected).
	links   sync.Map
	mem     *membership
	cluster clusterIdentity

	grpcClient, grpcPeer *grpc.Server
	lisClient, lisPeer   net.Listener
	wg                   sync.WaitGroup
	stopOnce             sync.Once
	started              atomic.Bool // the loop goroutine was launched
	loopErr              error
}

// New builds a server and recovers its replica from storage. Start begins
// serving.
func New(cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := checkNotRemoved(cfg); err != nil {
		return nil, err
	}
	own, err := cfg.Storage.OwnOps()
	if err != nil {
		return nil, fmt.Errorf("server: reading own operations: %w", err)
	}
	ids := make([]uint64, 0, len(cfg.Peers))
	for id := range cfg.Peers {
		ids = append(ids, id)
	}
	rep, err := replica.New(replica.Config{
		ID: cfg.ID, Peers: ids, Join: cfg.Join, Storage: cfg.Storage, OwnOps: own,
		Clock:  func() int64 { return time.Now().UnixNano() },
		Rand:   rand.New(rand.NewPCG(cfg.Seed, cfg.ID)),
		Limits: cfg.Limits, ElectionTicks: cfg.ElectionTicks, HeartbeatTicks: cfg.HeartbeatTicks,
		GossipTicks: cfg.GossipTicks, NoopTicks: cfg.NoopTicks, RetryTicks: cfg.RetryTicks,
		SnapshotEntries: cfg.SnapshotEntries, SnapshotBytes: cfg.SnapshotBytes, SnapshotTicks: cfg.SnapshotTicks, Logger: cfg.Logger.With("replica", cfg.ID),
		MaxTentative: cfg.maxTentative,
	})
	if errors.Is(err, replica.ErrRemoved) {
		// Its log holds its removal: record it, so that the refusal does
		// not depend on the log, and refuse.
		why := "its log holds the configuration change that removed it"
		if rr, ok := cfg.Storage.(removalRecord); ok {
			if merr := rr.MarkRemoved(why); merr != nil {
				cfg.Logger.Error("could not record the removal in the data directory", "replica", cfg.ID, "err", merr)
			}
		}
		return nil, refuseRemoved(cfg.ID, why)
	}
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg: cfg, log: cfg.Logger.With("replica", cfg.ID), rep: rep,
		submit:   make(chan *request, 1024),
		inbound:  make(chan replica.Message, 4096),
		status:   make(chan chan *api.StatusReply),
		do:       make(chan func(*replica.Replica)),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
		waiting:  map[uint64]*request{},
		inflight: make(chan struct{}, cfg.MaxInflight),
		peers:    map[uint64]*peer{},
	}
	s.mem = newMembership(s)
	if err := s.initCluster(); err != nil {
		return nil, err
	}
	s.drv, err = driver.New(driver.Config{
		Replica: rep, Storage: loopStorage{Storage: cfg.Storage, s: s}, Send: s.send, Deliver: s.deliver,
		CompactMargin: uint64(cfg.CompactMargin), Logger: s.log, Observe: cfg.Metrics.observeRound,
		Post: s.post,
	})
	if err != nil {
		return nil, err
	}
	if applied, _, _ := rep.Progress(); cfg.Join && applied == 0 {
		s.log.Info("joining: waiting for the leader's log or snapshot (this replica must have been added with member add)")
	}
	return s, nil
}

// streamWorkers is how many goroutines of the client listener's gRPC server
// run one stream after another, keeping the stack an Invoke grew; streams
// beyond them get a goroutine of their own, whose stack grows by copying.
const streamWorkers = 128

// listenTCP opens the server's listeners. Tests replace it to hand over a
// listener they opened when they chose the address, so that no other
// process can take the port in between.
var listenTCP = func(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }

// Start listens and serves; it returns once the listeners are open.
func (s *Server) Start() error {
	var err error
	if s.cfg.ClientListener != nil {
		s.lisClient = s.cfg.ClientListener
	} else if s.lisClient, err = listenTCP(s.cfg.ClientAddr); err != nil {
		return fmt.Errorf("server: listen for clients: %w", err)
	}
	// The shared listener also carries peer messages (up to
	// maxPeerMessage); client requests are bounded by state.Limits.
	opts := append([]grpc.ServerOption{grpc.MaxRecvMsgSize(maxPeerMessage), grpc.NumStreamWorkers(streamWorkers)},
		s.clusterServerOptions()...)
	opts = append(opts, windowServerOptions()...)
	opts = append(opts, s.cfg.Metrics.serverOptions()...)
	var creds []grpc.ServerOption
	if s.cfg.TLS != nil {
		creds = append(creds, grpc.Creds(s.cfg.TLS.serverCreds()))
	}
	s.grpcClient = grpc.NewServer(append(opts, creds...)...)
	api.RegisterStoreServer(s.grpcClient, s)
	api.RegisterClusterServer(s.grpcClient, clusterService{s: s})
	if s.cfg.PeerAddr == s.cfg.ClientAddr {
		api.RegisterPeerServer(s.grpcClient, s)
	} else {
		if s.lisPeer, err = listenTCP(s.cfg.PeerAddr); err != nil {
			s.lisClient.Close()
			return fmt.Errorf("server: listen for peers: %w", err)
		}
		s.grpcPeer = grpc.NewServer(append(append(windowServerOptions(), grpc.MaxRecvMsgSize(maxPeerMessage)), creds...)...)
		api.RegisterPeerServer(s.grpcPeer, s)
	}
	s.publishStatus()
	s.started.Store(true)
	s.startPeers() // before the loop, which owns s.peers from then on
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.loop()
	}()
	serve := func(g *grpc.Server, l net.Listener) {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := g.Serve(l); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				s.log.Error("grpc serve", "err", err)
			}
		}()
	}
	serve(s.grpcClient, s.lisClient)
	if s.grpcPeer != nil {
		serve(s.grpcPeer, s.lisPeer)
	}
	s.log.Info("replica started", "clients", s.lisClient.Addr().String(), "peers", s.PeerAddr())
	return nil
}

// ClientAddr returns the address clients dial.
func (s *Server) ClientAddr() string { return s.lisClient.Addr().String() }

// PeerAddr returns the address peers dial.
func (s *Server) PeerAddr() string {
	if s.lisPeer != nil {
		return s.lisPeer.Addr().String()
	}
	return s.lisClient.Addr().String()
}

// Stop shuts the server down: no new requests, streams end, the loop stops,
// storage is closed. Safe to call more than once.
func (s *Server) Stop() error {
	var err error
	s.stopOnce.Do(func() {
		close(s.stop)
		// Streams see the loop's end and return; then gRPC can stop.
		<-s.loopDone()
		if s.grpcClient != nil {
			s.grpcClient.Stop()
		}
		if s.grpcPeer != nil {
			s.grpcPeer.Stop()
		}
		s.wg.Wait()
		s.drv.Wait() // a snapshot being written in the background
		err = errors.Join(s.loopErr, s.cfg.Storage.Close())
	})
	return err
}

// post runs f on the loop, as the driver asks when it has written a
// snapshot in the background (driver.Config.Post); once the loop has ended
// it drops f and reports false.
func (s *Server) post(f func()) bool {
	select {
	case s.do <- func(*replica.Replica) { f() }:
		return true
	case <-s.done:
		return false
	}
}

func (s *Server) loopDone() <-chan struct{} {
	if !s.started.Load() { // the loop never ran
		close(s.done)
	}
	return s.done
}

// loop owns the replica. It waits for an input, takes every other input
// already queued (up to MaxBatch), and then handles the Ready once: one
// fsync and one round of messages for the whole batch (group commit).
func (s *Server) loop() {
	defer close(s.done)
	s.lockRep()
	defer func() {
		// Readers off the loop see the end before done closes.
		if !s.repLocked {
			s.lockRep() // a panic during a write, which runs unlocked
		}
		s.repClosed = true
		s.unlockRep()
	}()
	defer func() {
		// A panic in the core (raft panics on messages that contradict its
		// log, e.g. forged by someone who reached the peer port) stops this
		// replica, fail-stop, instead of the whole process.
		if p := recover(); p != nil {
			s.loopErr = fmt.Errorf("server: replica %d panicked: %v", s.cfg.ID, p)
			s.log.Error("replica failed; stopped", "err", s.loopErr)
			s.failWaiting()
		}
	}()
	ticker := time.NewTicker(s.cfg.Tick)
	defer ticker.Stop()
	for {
		var start time.Time
		s.unlockRep() // while it waits for input (readNow)
		select {
		case <-s.stop:
			s.lockRep()
			s.failWaiting()
			return
		case <-ticker.C:
			s.lockRep()
			start = time.Now()
			s.rep.Tick()
		case m := <-s.inbound:
			s.lockRep()
			start = time.Now()
			s.step(m)
		case req := <-s.submit:
			s.lockRep()
			start = time.Now()
			s.submitOne(req)
		case reply := <-s.status:
			s.lockRep()
			start = time.Now()
			reply <- s.statusReply()
		case f := <-s.do:
			s.lockRep()
			start = time.Now()
			f(s.rep)
		}
	drain:
		for n := 1; n < s.cfg.MaxBatch; n++ {
			// A round's inputs may cost much more than usual (a leader
			// stepping the append responses of a follower it brings up
			// reads megabytes of log for each); past drainLimit the rest
			// waits for the next round, so that this Ready's heartbeats
			// go out first.
			if time.Since(start) > s.drainLimit() {
				break drain
			}
			select {
			case m := <-s.inbound:
				s.step(m)
			case req := <-s.submit:
				s.submitOne(req)
			case <-ticker.C:
				s.rep.Tick()
			default:
				break drain
			}
		}
		// The inputs may have brought what a waiting read's min_vv counts:
		// it runs now, and its view goes out with this round's Ready.
		s.runBehind()
		readyAt := time.Now()
		if err := s.drv.HandleReady(); err != nil {
			// Fail-stop: the loop ends (done closes, so every request and
			// stream gets Unavailable at once); Stop still cleans up.
			s.loopErr = err
			s.log.Error("replica failed; stopped", "err", err)
			s.failWaiting()
			return
		}
		s.reportUnreachable()
		s.unpark()
		s.answerStatusBehind()
		s.logLeader()
		s.logSlowRound(start, readyAt)
		s.logCatchUp()
		s.publishStatus()
		s.cfg.Metrics.observeReplica(s.rep.Stats())
		if err := s.syncMembers(); err != nil {
			// Removed from the cluster (syncMembers logged it).
			s.loopErr = err
			s.failWaiting()
			return
		}
	}
}

// logLeader logs a change of leader or term as this replica sees it:
// elections are rare in a healthy cluster, and frequent ones (a loaded
// leader whose heartbeats come late) are what an operator looks for first.
func (s *Server) logLeader() {
	lead, term := s.rep.Leader(), s.rep.Term()
	if lead == s.lead && term == s.term {
		return
	}
	s.lead, s.term = lead, term
	if lead == 0 {
		s.log.Info("no leader", "term", term)
		return
	}
	s.log.Info("leader", "leader", lead, "term", term)
}

// slowRound is how long one round of the loop (a batch of inputs and its
// Ready) may take before it is logged: a third of the shortest election
// timeout (100 ms by default, over three heartbeat periods). A leader's
// round that long sends no heartbeat; three in a row and its followers
// campaign.
func (s *Server) slowRound() time.Duration {
	return time.Duration(s.cfg.ElectionTicks) * s.cfg.Tick / 3
}

// drainLimit is how long one round of the loop takes inputs before it
// handles its Ready: a quarter of slowRound (25 ms by default), against
// the round trip of the busiest input a round usually sees, a fraction of
// a millisecond. Without it a leader bringing a restarted follower up had
// rounds of 0.9 s, nearly all inputs, and was deposed (the kill soak).
func (s *Server) drainLimit() time.Duration { return s.slowRound() / 4 }

// logSlowRound warns, at most once a second, of a loop round that took
// longer than slowRound (as etcd warns of a leader that failed to send out
// heartbeats on time).
func (s *Server) logSlowRound(start, readyAt time.Time) {
	took := time.Since(start)
	if took < s.slowRound() || time.Since(s.slowLogged) < time.Second {
		return
	}
	s.slowLogged = time.Now()
	s.log.Warn("slow loop round: heartbeats, votes and clients of this replica waited", "took", took.Round(time.Microsecond),
		"inputs", readyAt.Sub(start).Round(time.Microsecond), "ready", time.Since(readyAt).Round(time.Microsecond), "leader", s.rep.IsLeader())
}

// catchUpLag is how far behind the commit index a replica must be for its
// catch-up to be logged; catchUpLogEvery spaces the lines.
const (
	catchUpLag      = 1000
	catchUpLogEvery = time.Second
)

// logCatchUp reports, at most once a second, a replica that applies
// entries far behind the commit index (after a restart or a partition), and
// the moment it has caught up.
func (s *Server) logCatchUp() {
	applied, commit, _ := s.rep.Progress()
	behind := commit > applied+catchUpLag
	switch {
	case behind && time.Since(s.catchUpLogged) >= catchUpLogEvery:
		s.catchUpLogged = time.Now()
		s.catchingUp = true
		s.log.Info("catching up", "applied", applied, "commit", commit)
	case !behind && s.catchingUp:
		s.catchingUp = false
		s.log.Info("caught up", "applied", applied, "commit", commit)
	}
}

func (s *Server) step(m replica.Message) {
	if err := s.rep.Step(m); err != nil {
		s.log.Debug("peer message refused", "from", m.From, "type", m.Type, "err", err)
	}
}

func (s *Server) submitOne(req *request) {
	if req.minVV != nil && !s.rep.Covers(req.minVV) {
		req.behindSince = time.Now()
		s.behind = append(s.behind, req)
		return
	}
	// Behind the waiting requests of its kind, if any, so that each kind is
	// taken in arrival order; else at once.
	k := busyKind(req)
	if s.parkedKinds[k] > 0 || !s.trySubmit(req) {
		req.parked = time.Now()
		s.parked = append(s.parked, req)
		s.parkedKinds[k]++
	}
}

// busyKind classes the requests the replica refuses as busy for different
// reasons: weak updates and strong ones (too many uncommitted operations
// of its own, or too many strong operations pending) and strong reads (too
// many pending); weak reads are never refused.
func busyKind(req *request) int {
	switch {
	case req.cr.Op.ReadOnly():
		return 0
	case req.cr.Strong:
		return 1
	default:
		return 2
	}
}

// trySubmit submits req to the replica and answers it, unless the replica
// is busy and req may still wait for room (BusyWait): it returns false then,
// and req has had no answer.
func (s *Server) trySubmit(req *request) bool {
	s.nextSeq++
	req.cr.Seq = s.nextSeq
	err := s.rep.Submit(req.cr)
	if errors.Is(err, replica.ErrBusy) && s.cfg.BusyWait > 0 && (req.parked.IsZero() || time.Since(req.parked) < s.cfg.BusyWait) && !s.goElsewhere(err) {
		return false
	}
	s.answer(req, err)
	return true
}

// goElsewhere reports whether a request the replica refused with err had
// better be refused at once than wait for room: an update at a replica
// fenced after its restart (replica.ErrFenced, whose status carries
// api.FencedMarker) in a cluster of several, where the other replicas take
// it now (they have not restarted, or caught up already). The client tries
// another replica on the refusal (ResourceExhausted: nothing ran), and
// when every one refuses so (the whole cluster restarted) it tries again
// shortly, as the fence lifts once a leader's first entry is applied.
func (s *Server) goElsewhere(err error) bool {
	return errors.Is(err, replica.ErrFenced) && len(s.rep.Members()) > 1
}

// answer tells req the replica's answer to its submission: a refusal now,
// or its views as they come (deliver).
func (s *Server) answer(req *request, err error) {
	if err != nil {
		req.put(outcome{err: err})
		return
	}
	s.waiting[req.cr.Seq] = req // invoke refuses requests that want no view
}

// unpark submits the requests waiting for room, oldest first, after a
// Ready whose commits may have made some. Once the replica refuses one,
// the later ones of its kind wait with it (busyKind); those of other kinds
// are still tried. Those that waited BusyWait are refused, and those whose
// clients went away are dropped.
func (s *Server) unpark() {
	if len(s.parked) == 0 {
		return
	}
	var blocked [3]bool
	keep := s.parked[:0]
	for _, req := range s.parked {
		k := busyKind(req)
		switch {
		case req.ctx.Err() != nil:
			req.put(outcome{err: req.ctx.Err()}) // its invoke has returned; the channel has room
		case time.Since(req.parked) >= s.cfg.BusyWait:
			s.answer(req, replica.ErrBusy)
		case blocked[k] || !s.trySubmit(req):
			blocked[k] = true
			keep = append(keep, req)
			continue
		}
		s.parkedKinds[k]--
	}
	clear(s.parked[len(keep):])
	s.parked = keep
}

// runBehind runs the weak reads of behind whose min_vv the replica now
// covers, refuses those that waited Config.MinVVWait (ErrBehind: nothing
// ran, the client may ask again or elsewhere), and drops those whose
// caller has gone. Operations arrive by gossip, anti-entropy or the log, in
// the inputs of a round, so the loop looks before each round's Ready (a
// read runs in the Ready of the round whose inputs covered it; one covered
// by entries applied in a Ready runs in the next round). Rounds come at
// least every tick, so a refusal is at most a tick late.
func (s *Server) runBehind() {
	s.behind = slices.DeleteFunc(s.behind, func(req *request) bool {
		switch {
		case req.ctx.Err() != nil:
			req.put(outcome{err: req.ctx.Err()}) // its invoke has returned; the channel has room
		case s.rep.Covers(req.minVV):
			s.trySubmit(req) // a weak read: never refused as busy
		case time.Since(req.behindSince) >= s.cfg.MinVVWait:
			s.answer(req, fmt.Errorf("%w (waited %v)", ErrBehind, s.cfg.MinVVWait.Round(time.Millisecond)))
		default:
			return false
		}
		return true
	})
}

// statusWaiter is a Status call with a min_vv the replica did not cover
// when the call came.
type statusWaiter struct {
	ctx   context.Context
	minVV replica.VV
	since time.Time
	reply chan *api.StatusReply // buffered: one reply
}

// answerStatusBehind answers the Status calls of statusBehind whose min_vv
// the replica now covers, or that waited Config.MinVVWait (with the
// Status as it is: its vv says what is missing), and drops those whose
// caller has gone. The loop looks after each round's Ready.
func (s *Server) answerStatusBehind() {
	s.statusBehind = slices.DeleteFunc(s.statusBehind, func(w *statusWaiter) bool {
		switch {
		case w.ctx.Err() != nil:
		case s.rep.Covers(w.minVV) || time.Since(w.since) >= s.cfg.MinVVWait:
			w.reply <- s.statusReply()
		default:
			return false
		}
		return true
	})
}

// statusCovering answers a Status call with a min_vv (api.StatusRequest)
// once the replica covers it, or at the end of Config.MinVVWait.
func (s *Server) statusCovering(ctx context.Context, minVV replica.VV) (*api.StatusReply, error) {
	// It may wait as long as a read: it takes an inflight slot as one does,
	// so that Config.MaxInflight bounds the waiting calls too.
	select {
	case s.inflight <- struct{}{}:
		defer func() { <-s.inflight }()
	default:
		return nil, toStatus(ErrOverloaded)
	}
	w := &statusWaiter{ctx: ctx, minVV: minVV, since: time.Now(), reply: make(chan *api.StatusReply, 1)}
	f := func(*replica.Replica) {
		if s.rep.Covers(minVV) {
			w.reply <- s.statusReply()
			return
		}
		s.statusBehind = append(s.statusBehind, w)
	}
	select {
	case s.do <- f:
	case <-s.done:
		return nil, toStatus(ErrStopped)
	case <-ctx.Done():
		return nil, toStatus(ctx.Err())
	}
	select {
	case r := <-w.reply:
		return r, nil
	case <-s.done:
		return nil, toStatus(ErrStopped)
	case <-ctx.Done():
		return nil, toStatus(ctx.Err())
	}
}

// send hands a message to its peer's queue (never blocks).
func (s *Server) send(m replica.Message) {
	if s.cfg.dropPeerMsg != nil && s.cfg.dropPeerMsg(m) {
		return
	}
	if p := s.peers[m.To]; p != nil && !p.enqueue(m) && m.Type == replica.MsgRaft {
		// raft learns it after the Ready (reportUnreachable): it probes
		// the peer afresh instead of counting the message as on its way.
		s.unreachable = append(s.unreachable, m.To)
	}
}

// reportUnreachable tells raft of the peers a raft message could not be
// queued for in the last Ready (send).
func (s *Server) reportUnreachable() {
	if len(s.unreachable) == 0 {
		return
	}
	slices.Sort(s.unreachable)
	for _, id := range slices.Compact(s.unreachable) {
		s.rep.ReportUnreachable(id)
	}
	s.unreachable = s.unreachable[:0]
}

// deliver hands a view to its request. A request's channel has room for
// every view it can get (views); the core marks the last one, after which
// the request is gone. A full channel would block the loop for good, so it
// is a broken invariant, not back-pressure.
func (s *Server) deliver(v replica.View) error {
	req := s.waiting[v.Seq]
	if req == nil {
		return nil // its client went away and the request ended
	}
	select {
	case req.out <- outcome{v: v}:
	default:
		return fmt.Errorf("server: invariant: request %d got a view past its channel's room (%d)", v.Seq, cap(req.out))
	}
	if v.Last {
		delete(s.waiting, v.Seq)
		close(req.out)
	}
	req.told()
	return nil
}

// failWaiting ends every waiting request's stream.
func (s *Server) failWaiting() {
	for seq, req := range s.waiting {
		close(req.out)
		req.told()
		delete(s.waiting, seq)
	}
}

func (s *Server) statusReply() *api.StatusReply {
	st := s.rep.Stamp()
	_, commit, snap := s.rep.Progress()
	return &api.StatusReply{
		Id: s.cfg.ID, Leader: s.rep.Leader(), Term: s.rep.Term(), AppliedIndex: st.AppliedIndex,
		CommittedOps: uint64(st.CommittedCount), TentativeOps: uint64(s.rep.TentativeLen()),
		Vv: map[uint64]uint64(st.VV), CommitIndex: commit, SnapshotIndex: snap,
	}
}

// Invoke implements api.StoreServer.
func (s *Server) Invoke(in *api.InvokeRequest, stream grpc.ServerStreamingServer[api.ViewReply]) error {
	err := s.invoke(stream.Context(), in, stream.Send)
	return toStatus(err)
}

// Call implements api.StoreServer: Invoke for an operation that asks for
// one view, returned as the reply of a unary call, which costs both ends
// less than a stream. It runs through invoke like Invoke does (the same
// checks, limits, overload refusal, errors and metrics); the cluster-id
// check is the unary interceptor's (clusterServerOptions).
func (s *Server) Call(ctx context.Context, in *api.InvokeRequest) (*api.ViewReply, error) {
	if in.GetPreliminary() == in.GetFinal() {
		return nil, toStatus(errOneView)
	}
	var c viewCapture
	if err := s.invoke(ctx, in, c.send); err != nil {
		return nil, toStatus(err)
	}
	if c.reply == nil {
		return nil, toStatus(fmt.Errorf("server: invariant: request ended without its view"))
	}
	return c.reply, nil
}

// errOneView refuses a Call, or a call in a CallBatch, that asks for both
// views or none.
var errOneView = fmt.Errorf("%w: Call returns one view: ask for the preliminary view or the final view, not both or neither (Invoke streams both)", ErrInvalidRequest)

// viewCapture keeps the view invoke sends, for Call.
type viewCapture struct{ reply *api.ViewReply }

func (c *viewCapture) send(r *api.ViewReply) error {
	c.reply = r
	return nil
}

func (s *Server) invoke(ctx context.Context, in *api.InvokeRequest, send func(*api.ViewReply) error) error {
	c, err := s.begin(ctx, in)
	if err != nil {
		return err
	}
	defer c.release()
	for {
		rep, last, err := c.next(ctx)
		if err != nil {
			return err
		}
		if err := send(rep); err != nil {
			return err
		}
		if last {
			return nil
		}
	}
}

// call is one client request submitted to the loop, as invoke and
// CallBatch wait for its views.
type call struct {
	s      *Server
	in     *api.InvokeRequest
	req    *request
	start  time.Time
	prelim replica.View // the preliminary view, once sent
	sent   bool         // prelim is set
	// now, if set, is the view of a weak read run off the loop (readNow),
	// to be sent once after (if not nil) is closed.
	now   *outcome
	after <-chan struct{}
}

// begin checks in, takes an inflight slot (or refuses with ErrOverloaded)
// and submits it to the loop. The caller releases the call once done with
// it.
func (s *Server) begin(ctx context.Context, in *api.InvokeRequest) (*call, error) {
	return s.beginOp(ctx, in, nil)
}

// beginOp is begin for an operation of a Pipe (po, if not nil), which the
// loop tells when it leaves an outcome in the request's channel; po.c is
// the call, set before the loop sees the request.
func (s *Server) beginOp(ctx context.Context, in *api.InvokeRequest, po *pipeOp) (*call, error) {
	op, err := opFromAPI(in.GetOp())
	if err != nil {
		return nil, err
	}
	var want replica.Want
	if in.GetPreliminary() {
		want |= replica.WantTentative
	}
	if in.GetFinal() {
		want |= replica.WantStable
	}
	if want == 0 {
		return nil, fmt.Errorf("%w: ask for the preliminary view, the final view, or both", ErrInvalidRequest)
	}
	if in.GetFinal() && !in.GetStrong() && op.ReadOnly() {
		return nil, fmt.Errorf("%w: a weak read has no final view; ask for a strong read", ErrInvalidRequest)
	}
	minVV, err := minVVFromAPI(in, op.ReadOnly())
	if err != nil {
		return nil, err
	}
	if in.GetReadVv() && (!op.ReadOnly() || !in.GetPreliminary()) {
		return nil, fmt.Errorf("%w: read_vv is for a read that asks for the preliminary view", ErrInvalidRequest)
	}
	select {
	case s.inflight <- struct{}{}:
	default:
		return nil, ErrOverloaded
	}
	cr := replica.ClientRequest{Client: 1, Op: op, Strong: in.GetStrong(), Want: want, ReadVV: in.GetReadVv()}
	if want == replica.WantTentative && !cr.Strong && op.ReadOnly() {
		o, after, ok, err := s.readNow(cr, minVV)
		if err != nil {
			<-s.inflight
			return nil, err
		}
		if ok {
			c := &call{s: s, in: in, start: time.Now(), now: &o, after: after, req: &request{ctx: ctx, cr: cr}}
			if po != nil {
				po.c = c
			}
			return c, nil
		}
	}
	c := &call{s: s, in: in, start: time.Now(), req: &request{
		ctx:   ctx,
		cr:    cr,
		out:   make(chan outcome, views(want)),
		minVV: minVV,
		pipe:  po,
	}}
	if po != nil {
		po.c = c
	}
	select {
	case s.submit <- c.req:
		return c, nil
	case <-s.stop:
		err = ErrStopped
	case <-s.done:
		err = ErrStopped
	case <-ctx.Done():
		err = ctx.Err()
	}
	c.release()
	return nil, err
}

// views is the number of views a request that wants w gets: the replica
// emits one per view asked for, the last marked (replica.View.Last).
func views(w replica.Want) int {
	if w == replica.WantTentative|replica.WantStable {
		return 2
	}
	return 1
}

// MaxMinVV bounds the entries of a request's min_vv.
const MaxMinVV = 1024

// minVVFromAPI checks a request's min_vv: only a weak read that asks for
// the preliminary view alone may carry one (see checkMinVV).
func minVVFromAPI(in *api.InvokeRequest, readOnly bool) (replica.VV, error) {
	m := in.GetMinVv()
	if len(m) == 0 {
		return nil, nil
	}
	if in.GetStrong() || in.GetFinal() || !readOnly {
		return nil, fmt.Errorf("%w: min_vv is for a weak read that asks for the preliminary view only", ErrInvalidRequest)
	}
	return checkMinVV(m)
}

// checkMinVV checks a min_vv of a request: at most MaxMinVV entries, none
// for origin 0. Entries of zero operations ask for nothing and are left
// out; nil if nothing is left.
func checkMinVV(m map[uint64]uint64) (replica.VV, error) {
	if len(m) > MaxMinVV {
		return nil, fmt.Errorf("%w: min_vv of %d entries, over %d", ErrInvalidRequest, len(m), MaxMinVV)
	}
	var vv replica.VV
	for o, n := range m {
		if o == 0 {
			return nil, fmt.Errorf("%w: min_vv names origin 0 (replica ids start at 1)", ErrInvalidRequest)
		}
		if n == 0 {
			continue
		}
		if vv == nil {
			vv = replica.VV{}
		}
		vv[o] = n
	}
	return vv, nil
}

// release frees the call's inflight slot.
func (c *call) release() { <-c.s.inflight }

// next waits for the call's next view and returns it as sent to the
// client, and whether it is the last one the client asked for.
func (c *call) next(ctx context.Context) (*api.ViewReply, bool, error) {
	if o := c.now; o != nil {
		// A weak read run off the loop: its view, once what it read is
		// durable.
		c.now = nil
		if err := c.s.awaitDurable(ctx, c.after); err != nil {
			return nil, false, err
		}
		return c.view(*o)
	}
	select {
	case o, ok := <-c.req.out:
		if !ok {
			return nil, false, ErrStopped
		}
		return c.view(o)
	case <-ctx.Done():
		// The client went away; the loop drops the request when its final
		// view comes (the channel is buffered for it).
		return nil, false, ctx.Err()
	case <-c.s.done:
		return nil, false, ErrStopped
	}
}

// view returns what the loop (or readNow) had for the call as sent to the
// client, and whether it is the last view the client asked for.
func (c *call) view(o outcome) (*api.ViewReply, bool, error) {
	if o.err != nil {
		return nil, false, o.err
	}
	v := o.v
	if v.Lost {
		return nil, false, ErrResultLost
	}
	var p *replica.View
	if c.sent {
		p = &c.prelim
	}
	c.s.cfg.Metrics.observeView(c.in.GetStrong(), v, p, time.Since(c.start))
	rep := viewToAPI(v, c.in.GetNoConfirmation())
	last := v.Stable || !c.in.GetFinal()
	c.prelim, c.sent = v, true
	return rep, last, nil
}

// MaxCallBatch bounds the calls of one CallBatch.
const MaxCallBatch = 4096

// CallBatch implements api.StoreServer: each call runs as Call runs it, all
// submitted to the loop before the first is waited for, so that they share
// its rounds; each gets its own view or error, in the request's order.
func (s *Server) CallBatch(ctx context.Context, in *api.CallBatchRequest) (*api.CallBatchReply, error) {
	n := len(in.GetCalls())
	if n == 0 || n > MaxCallBatch {
		return nil, toStatus(fmt.Errorf("%w: a batch holds 1 to %d calls, not %d", ErrInvalidRequest, MaxCallBatch, n))
	}
	out := &api.CallBatchReply{Results: make([]*api.CallResult, n)}
	calls := make([]*call, n)
	for i, r := range in.GetCalls() {
		if r.GetPreliminary() == r.GetFinal() {
			out.Results[i] = errorResult(errOneView)
			continue
		}
		c, err := s.begin(ctx, r)
		if err != nil {
			out.Results[i] = errorResult(err)
			continue
		}
		calls[i] = c
	}
	replyBytes := 0
	for i, c := range calls {
		if c == nil {
			continue
		}
		rep, _, err := c.next(ctx)
		c.release()
		if err != nil {
			out.Results[i] = errorResult(err)
			continue
		}
		n := proto.Size(rep)
		if replyBytes+n > api.MaxBatchReplyBytes && c.req.cr.Op.ReadOnly() {
			// A read's result is as good as never read: the client sends it
			// again alone, so that no call fails for its neighbours' size.
			out.Results[i] = errorResult(fmt.Errorf("%w (%d bytes after %d)", ErrBatchFull, n, replyBytes))
			continue
		}
		replyBytes += n
		out.Results[i] = &api.CallResult{Reply: rep}
	}
	return out, nil
}

// errorResult is a batched call's error as Call would have returned it.
func errorResult(err error) *api.CallResult {
	st := status.Convert(toStatus(err))
	return &api.CallResult{Code: uint32(st.Code()), Message: st.Message()}
}

// Status implements api.StoreServer.
//
// The loop answers it between two rounds, so the reply is current. A loop
// that is still busy after statusWait (a long write of large values, a
// catch-up that applies many entries, a stall of the disk) gets the Status
// it published at the end of its last round instead: a replica that is
// slow is not taken for a dead one by the clients' probes and by
// `correctables status`.
func (s *Server) Status(ctx context.Context, in *api.StatusRequest) (*api.StatusReply, error) {
	if m := in.GetMinVv(); len(m) > 0 {
		vv, err := checkMinVV(m)
		if err != nil {
			return nil, toStatus(err)
		}
		if vv != nil {
			if r := s.statusNow(vv); r != nil {
				return r, nil
			}
			return s.statusCovering(ctx, vv)
		}
	}
	if r := s.statusNow(nil); r != nil {
		return r, nil
	}
	reply := make(chan *api.StatusReply, 1)
	wait := time.NewTimer(statusWait)
	defer wait.Stop()
	for sent := false; ; {
		send := s.status
		if sent {
			send = nil
		}
		select {
		case send <- reply:
			sent = true
		case r := <-reply:
			return r, nil
		case <-s.done:
			return nil, toStatus(ErrStopped)
		case <-ctx.Done():
			return nil, toStatus(ctx.Err())
		case <-wait.C:
			if p := s.published.Load(); p != nil && time.Since(p.at) <= statusStale {
				return p.reply, nil
			}
		}
	}
}

// statusWait is how long Status waits for the loop before it answers with
// the Status published at the end of the loop's last round; statusStale is
// how old that may be. A loop stuck for longer (a disk that stopped
// answering) answers no Status at all, as before the loop publishes, so
// that clients' probes mark the replica down.
const (
	statusWait  = 200 * time.Millisecond
	statusStale = 5 * time.Second
)

// publishedStatus is a Status and when the loop published it.
type publishedStatus struct {
	reply *api.StatusReply
	at    time.Time
}

// publishStatus publishes the replica's current Status for Status calls
// the loop is too busy to answer. Only the loop calls it, once running.
func (s *Server) publishStatus() {
	s.published.Store(&publishedStatus{reply: s.statusReply(), at: time.Now()})
}

// exec runs f on the loop, with the replica.
func (s *Server) exec(ctx context.Context, f func(*replica.Replica)) error {
	done := make(chan struct{})
	select {
	case s.do <- func(r *replica.Replica) { f(r); close(done) }:
	case <-s.done:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-done:
		return nil
	case <-s.done:
		return ErrStopped
	}
}

// Leader returns the leader this replica knows of (0 if none).
func (s *Server) Leader(ctx context.Context) (uint64, error) {
	var lead uint64
	err := s.exec(ctx, func(r *replica.Replica) { lead = r.Leader() })
	return lead, err
}

// TransferLeadership asks this replica, if it leads, to hand leadership to
// id.
func (s *Server) TransferLeadership(ctx context.Context, id uint64) error {
	return s.exec(ctx, func(r *replica.Replica) { r.TransferLeadership(id) })
}
