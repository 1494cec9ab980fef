package sim

import (
	"container/heap"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/correctables/correctables/internal/driver"
	"github.com/correctables/correctables/internal/history"
	"github.com/correctables/correctables/internal/replica"
	"github.com/correctables/correctables/internal/state"
	"github.com/correctables/correctables/internal/storage"
)

// Faults sets what goes wrong during the workload phase.
type Faults struct {
	// Drop, Dup are per-message probabilities; Reorder adds up to this much
	// random extra delay to a message, so later messages may overtake it.
	Drop, Dup float64
	Reorder   time.Duration
	// Partitions enables random partitions (one node cut off, or a random
	// split) that heal in random order.
	Partitions bool
	// Crashes enables crashes and restarts; at most a minority is down at
	// once. A crash is a power loss (the node's filesystem keeps only what
	// was synced) or a process crash (it keeps everything written), drawn
	// from the seed.
	Crashes bool
	// MidWriteCrashes makes half the crashes happen inside the driver's
	// handling of a Ready: the node is killed at its next Save, after a
	// leader's early messages (replica.Ready.Early) have left and before
	// anything of that Ready is written.
	MidWriteCrashes bool
	// Skew is the largest clock offset of a replica from true time.
	Skew time.Duration
	// Members enables membership changes (members.go): learners added
	// and promoted, members removed, voters replaced through joint
	// consensus, at least three voters kept.
	Members bool
}

// Options configures a run. Zero fields get defaults.
type Options struct {
	Seed     uint64
	Replicas int // default 3
	Clients  int // default 4
	// OpsPerClient is how many operations each client issues. Default 15.
	OpsPerClient int
	// Keys is the number of distinct keys (fewer means more contention).
	// Default 4.
	Keys int
	// StrongFraction of operations are strong. Default 0.5.
	StrongFraction float64
	Faults         Faults
	// Tick is the virtual time between replica ticks. Default 10ms.
	Tick time.Duration
	// MinDelay, MaxDelay bound the base one-way delay of each link.
	// Defaults 1ms and 20ms.
	MinDelay, MaxDelay time.Duration
	// ClientTimeout is how long a client waits for a view before moving on.
	// Default 3s.
	ClientTimeout time.Duration
	// Quiet is how long the cluster runs fault-free after the workload,
	// before the convergence check. Default 5s.
	Quiet time.Duration
	// Liveness bounds how long after the heal (the end of the workload
	// phase: partitions healed, crashed replicas restarted) every pending
	// operation may take to get the view it waits for. Default 2s; it must
	// not exceed Quiet.
	Liveness time.Duration
	// Workload picks each operation; default Mixed.
	Workload func(r *rand.Rand, keys int) state.Op
	// GroupCommit, if set, defers the handling of a replica's Ready after
	// a step, tick or submission by a random delay up to this much, so
	// that the inputs arriving meanwhile share one Ready and one sync, as
	// in the server's loop (which takes every queued input before one
	// Ready). Zero handles the Ready after every input.
	GroupCommit time.Duration
	// SnapshotEntries is passed to the replicas (see replica.Config);
	// small values exercise snapshots and catch-up. Default: off (-1).
	SnapshotEntries int
	// Hook, if set, is called once the cluster is built, to schedule extra
	// events (used by the hazard tests).
	Hook func(c *Cluster)

	// noSync opens the stores with storage.Options.NoSync and makes every
	// crash a power loss: Save then returns before its write is durable,
	// the mutation "acknowledge before syncing" (mutation_test.go). Tests
	// only.
	noSync bool
}

func (o *Options) defaults() {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.Replicas, 3)
	def(&o.Clients, 4)
	def(&o.OpsPerClient, 15)
	def(&o.Keys, 4)
	if o.StrongFraction == 0 {
		o.StrongFraction = 0.5
	}
	defd := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	defd(&o.Tick, 10*time.Millisecond)
	defd(&o.MinDelay, time.Millisecond)
	defd(&o.MaxDelay, 20*time.Millisecond)
	defd(&o.ClientTimeout, 3*time.Second)
	defd(&o.Quiet, 5*time.Second)
	defd(&o.Liveness, 2*time.Second)
	if o.SnapshotEntries == 0 {
		o.SnapshotEntries = -1
	}
	if o.Workload == nil {
		o.Workload = Mixed
	}
}

// event is something that happens at a virtual time; seq breaks ties in
// scheduling order, which keeps the run deterministic.
type event struct {
	at  int64
	seq uint64
	fn  func()
}

type eventQueue []*event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// Node is one simulated replica: the replica, the production driver that
// handles its Ready, and its storage (internal/storage on Pebble) on a
// crashable in-memory filesystem.
type Node struct {
	ID  uint64
	Rep *replica.Replica // nil while crashed
	// fs is the node's filesystem; a crash replaces it by a crash clone.
	fs      *vfs.MemFS
	store   *storage.Store // nil while crashed
	drv     *driver.Driver // nil while crashed
	skew    int64
	crashes int
	// powerLosses counts the crashes that kept only synced data.
	powerLosses int
	// kicked: a deferred handling of the Ready is scheduled (GroupCommit).
	kicked bool
	// crashAtSave: the node dies at its next Save (Faults.MidWriteCrashes).
	crashAtSave bool
	midWrites   int

	// joined: the node was added by a membership change and started
	// empty with Join; peers are the ids it was started with (default:
	// the initial replicas).
	joined bool
	peers  []uint64
	// retired: the node was removed from the cluster and stopped for
	// good. removedKnown are the ids its replica knows as removed, as of
	// memberGen.
	retired      bool
	removedKnown map[uint64]bool
	memberGen    uint64
}

// errMidWrite is what a node's storage returns when the node dies inside a
// Save (Faults.MidWriteCrashes): nothing of the Save is written.
var errMidWrite = errors.New("sim: crashed inside a write")

// crashingStore is a node's storage as its driver sees it: Save dies instead
// of writing once the node is marked to crash there.
type crashingStore struct {
	*storage.Store
	n *Node
}

func (s crashingStore) Save(hs *raftpb.HardState, ents []*raftpb.Entry, snap *raftpb.Snapshot, own []*replica.Req) error {
	if s.n.crashAtSave {
		return errMidWrite
	}
	return s.Store.Save(hs, ents, snap, own)
}

// Cluster is one simulation run.
type Cluster struct {
	opt   Options
	rng   *rand.Rand
	now   int64
	seq   uint64
	queue eventQueue

	Nodes   []*Node
	ids     []uint64
	delay   map[[2]uint64]int64
	cut     map[[2]uint64]bool
	faulty  bool // faults apply (workload phase)
	clients []*client
	calls   []*call
	rec     *history.Recorder
	err     error

	// Filter, if set, drops every message for which it returns true (the
	// hazard tests use it to cut gossip but not raft, for example).
	Filter func(m replica.Message) bool

	// healAt is the virtual time the faults healed, -1 before. lastFault
	// is the last time the network or a node changed (a partition or its
	// heal, a crash, a restart, a message dropped by Filter): hooks may
	// inject faults after healAt, and liveness counts from the later.
	healAt, lastFault int64
	// tailCache is the storage's tail cache size (entries), drawn per run:
	// with it off, every log read goes to Pebble.
	tailCache int

	// Counters for reports.
	Messages, Dropped, Snapshots int
	// MemberChanges counts the membership changes proposed, Removals the
	// nodes that stopped because they were removed.
	MemberChanges, Removals int
	// tentativeSeen holds the operations nodes held tentatively when they
	// went down (Faults.Members; see noteTentative).
	tentativeSeen map[history.OpID]history.Submitted
	// lostWithRemoved is Result.LostWithRemoved.
	lostWithRemoved int
	// removal is the removal in progress: its replica drains first
	// (members.go). undrained holds the ids removed without a confirmed
	// drain (past drainBound): only their weak writes may be lost.
	removal   *removal
	undrained map[uint64]bool
}

const epoch = int64(1_700_000_000) * int64(time.Second) // virtual time 0

// New builds a cluster for a run.
func New(opt Options) (*Cluster, error) {
	opt.defaults()
	if opt.Replicas < 1 || opt.Replicas > 9 {
		return nil, fmt.Errorf("sim: %d replicas; want 1 to 9", opt.Replicas)
	}
	if opt.Liveness > opt.Quiet {
		return nil, fmt.Errorf("sim: Liveness %v exceeds Quiet %v", opt.Liveness, opt.Quiet)
	}
	c := &Cluster{
		opt:    opt,
		rng:    rand.New(rand.NewPCG(opt.Seed, 0x5eed)),
		delay:  map[[2]uint64]int64{},
		cut:    map[[2]uint64]bool{},
		healAt: -1,
	}
	c.rec = history.NewRecorder(func() int64 { return c.now })
	for i := 1; i <= opt.Replicas; i++ {
		c.ids = append(c.ids, uint64(i))
	}
	for _, a := range c.ids {
		for _, b := range c.ids {
			if a < b {
				d := int64(opt.MinDelay) + c.rng.Int64N(int64(opt.MaxDelay-opt.MinDelay)+1)
				c.delay[[2]uint64{a, b}], c.delay[[2]uint64{b, a}] = d, d
			}
		}
	}
	// The tail cache serves most log reads from memory; a third of the runs
	// turn it off and a third keep only a few entries, so that Pebble's
	// read path runs too.
	c.tailCache = [3]int{-1, 4, 0}[c.rng.IntN(3)]
	for _, id := range c.ids {
		n := &Node{ID: id, fs: vfs.NewCrashableMem()}
		if opt.Faults.Skew > 0 {
			n.skew = c.rng.Int64N(2*int64(opt.Faults.Skew)+1) - int64(opt.Faults.Skew)
		}
		c.Nodes = append(c.Nodes, n)
		if err := c.start(n); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// discard is the logger of the simulated stores and drivers.
var discard = slog.New(slog.DiscardHandler)

// dataDir is where each node's store lives on its own filesystem.
const dataDir = "/data"

// start opens the node's store on its filesystem, recovers the replica
// from it and wires the replica to the production driver, exactly as the
// server does (internal/server.New), but with the simulated network and
// clients.
func (c *Cluster) start(n *Node) error {
	st, err := storage.Open(storage.Options{
		Dir: dataDir, FS: n.fs, NoSync: c.opt.noSync, Logger: discard,
		TailCacheEntries: c.tailCache, CacheSize: 1 << 20,
	})
	if err != nil {
		return fmt.Errorf("sim: open the store of replica %d: %w", n.ID, err)
	}
	own, err := st.OwnOps()
	if err != nil {
		st.Close()
		return fmt.Errorf("sim: replica %d: reading own operations: %w", n.ID, err)
	}
	peers := n.peers
	if peers == nil {
		peers = c.ids
	}
	rep, err := replica.New(replica.Config{
		ID:      n.ID,
		Peers:   peers,
		Join:    n.joined,
		Storage: st,
		OwnOps:  own,
		Clock:   func() int64 { return epoch + c.now + n.skew },
		// Checkers need every committed id, also across snapshots.
		TrackHistory:    true,
		SnapshotEntries: c.opt.SnapshotEntries,
		Rand:            rand.New(rand.NewPCG(c.rng.Uint64(), uint64(n.ID))),
	})
	if err != nil {
		st.Close()
		return fmt.Errorf("sim: start replica %d: %w", n.ID, err)
	}
	if n.peers == nil {
		n.peers = slices.Clone(c.ids)
	}
	drv, err := driver.New(driver.Config{
		Replica: rep, Storage: crashingStore{st, n}, Send: c.send,
		Deliver:       func(v replica.View) error { c.deliverView(v); return nil },
		CompactMargin: compactMargin, Logger: discard,
		Observe: func(r driver.Round) {
			if r.Snapshot {
				c.Snapshots++
			}
		},
	})
	if err != nil {
		st.Close()
		return err
	}
	n.Rep, n.store, n.drv = rep, st, drv
	c.pump(n)
	return nil
}

// compactMargin is how many entries stay in the log behind a snapshot, so
// that a follower slightly behind catches up from the log.
const compactMargin = 5

// Close closes every store; Run calls it when the run ends.
func (c *Cluster) Close() {
	for _, n := range c.Nodes {
		if n.store != nil {
			_ = n.store.Close()
			n.store = nil
		}
	}
}

// Now is the virtual time since the start of the run.
func (c *Cluster) Now() time.Duration { return time.Duration(c.now) }

// At schedules fn after d of virtual time.
func (c *Cluster) At(d time.Duration, fn func()) {
	c.seq++
	heap.Push(&c.queue, &event{at: c.now + int64(d), seq: c.seq, fn: fn})
}

// Node returns the node with id.
func (c *Cluster) Node(id uint64) *Node { return c.Nodes[id-1] }

// fail records the first internal error; the run stops at once.
func (c *Cluster) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// pump has the production driver handle the replica's Ready: persist,
// then snapshot, then send, then deliver, then advance.
func (c *Cluster) pump(n *Node) {
	if n.drv == nil || c.err != nil {
		return
	}
	if err := n.drv.HandleReady(); err != nil {
		if errors.Is(err, errMidWrite) {
			n.midWrites++
			c.Crash(n.ID)
			return
		}
		c.fail(fmt.Errorf("replica %d: %w", n.ID, err))
		return
	}
	// The execution stack's invariants (bookkeeping and conflicting pairs
	// in order), after every handled batch.
	if err := n.Rep.CheckInvariants(); err != nil {
		c.fail(err)
	}
	c.observeMembers(n)
}

// kick has the node's Ready handled after an input: at once, or with
// Options.GroupCommit after a random short delay, together with whatever
// inputs arrive meanwhile.
func (c *Cluster) kick(n *Node) {
	if c.opt.GroupCommit <= 0 {
		c.pump(n)
		return
	}
	if n.kicked || n.drv == nil {
		return
	}
	n.kicked = true
	drv := n.drv
	c.At(time.Duration(1+c.rng.Int64N(int64(c.opt.GroupCommit))), func() {
		if n.drv != drv {
			return // crashed meanwhile; the inputs are lost with it
		}
		n.kicked = false
		c.pump(n)
	})
}

// send puts a message on the simulated network. It is encoded and decoded
// as on a real wire, so no memory is shared between replicas.
func (c *Cluster) send(m replica.Message) {
	c.Messages++
	link := [2]uint64{m.From, m.To}
	if c.cut[link] || (c.Filter != nil && c.Filter(m)) {
		c.lastFault = c.now
		c.Dropped++
		return
	}
	f := c.opt.Faults
	copies := 1
	if c.faulty {
		if f.Drop > 0 && c.rng.Float64() < f.Drop {
			c.Dropped++
			return
		}
		if f.Dup > 0 && c.rng.Float64() < f.Dup {
			copies = 2
		}
	}
	wire, err := replica.EncodeMessage(m)
	if err != nil {
		c.fail(err)
		return
	}
	for i := 0; i < copies; i++ {
		d := c.delay[link]
		if c.faulty && f.Reorder > 0 {
			d += c.rng.Int64N(int64(f.Reorder))
		}
		c.At(time.Duration(d), func() {
			dst := c.Node(m.To)
			if dst.Rep == nil || c.cut[link] {
				c.Dropped++
				return
			}
			if dst.removedKnown[m.From] {
				// A replica that applied the sender's removal refuses
				// its messages (the server refuses its stream), and
				// the sender stops.
				c.Dropped++
				if src := c.Node(m.From); src.Rep != nil {
					c.retire(src)
				}
				return
			}
			msg, err := replica.DecodeMessage(wire)
			if err != nil {
				c.fail(err)
				return
			}
			// A replica rejects bad messages with an error and carries on,
			// as the server does; raft's own refusals are not faults.
			_ = dst.Rep.Step(msg)
			c.kick(dst)
		})
	}
}

// linkDelay is the base one-way delay from a to b.
func (c *Cluster) linkDelay(a, b uint64) time.Duration {
	return time.Duration(c.delay[[2]uint64{a, b}])
}

// Partition cuts the links between group a and everyone else.
func (c *Cluster) Partition(a []uint64) {
	c.lastFault = c.now
	for _, x := range a {
		for _, y := range c.ids {
			if !slices.Contains(a, y) {
				c.cut[[2]uint64{x, y}] = true
				c.cut[[2]uint64{y, x}] = true
			}
		}
	}
}

// HealAll removes every partition.
func (c *Cluster) HealAll() {
	c.lastFault = c.now
	clear(c.cut)
}

// Crash stops a node. Its filesystem becomes a crash clone of itself: on a
// power loss (half the crashes, drawn from the seed; every crash with the
// noSync mutation) only what was synced survives, on a process crash
// everything written does. The old store is abandoned (closed without
// effect on the clone) and Restart opens a new one on the clone.
//
// Pebble's CrashClone draws its random choices in map iteration order, so
// the only percentages of unsynced data that give the same clone on every
// replay are 0 and 100; those are the two kinds of crash.
func (c *Cluster) Crash(id uint64) {
	n := c.Node(id)
	if n.Rep == nil {
		return
	}
	c.lastFault = c.now
	c.noteTentative(n)
	keep := 100
	if c.opt.noSync || c.rng.IntN(2) == 0 {
		keep = 0
		n.powerLosses++
	}
	// The RNG is never drawn from with 0 and always yields inclusion with
	// 100: a private one keeps c.rng independent of the files Pebble's
	// background work happened to leave.
	n.fs = n.fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: keep, RNG: rand.New(rand.NewPCG(1, 2))})
	_ = n.store.Close()
	n.Rep, n.store, n.drv, n.kicked, n.crashAtSave = nil, nil, nil, false, false
	n.crashes++
}

// Restart brings a crashed node back from its filesystem.
func (c *Cluster) Restart(id uint64) {
	n := c.Node(id)
	if n.Rep != nil || n.retired {
		return
	}
	c.lastFault = c.now
	if err := c.start(n); errors.Is(err, replica.ErrRemoved) {
		// Its log holds its removal: it refuses to start, for good.
		n.retired = true
		n.crashes++ // as retire counts it
		c.Removals++
	} else if err != nil {
		c.fail(err)
	}
}

// Leader returns the id of a node that believes it leads, 0 if none.
func (c *Cluster) Leader() uint64 {
	for _, n := range c.Nodes {
		if n.Rep != nil && n.Rep.IsLeader() {
			return n.ID
		}
	}
	return 0
}

func (c *Cluster) down() int {
	k := 0
	for _, n := range c.Nodes {
		if n.Rep == nil && !n.retired {
			k++
		}
	}
	return k
}

var (
	errStalled = errors.New("sim: run did not finish")
	// errPanic: a replica, its driver or its storage panicked.
	errPanic = errors.New("sim: panic")
)
