package replica

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/correctables/correctables/internal/consensus"
	"github.com/correctables/correctables/internal/state"
)

// Errors returned by Submit. Nothing changes when Submit fails.
var (
	// ErrInvalidOp wraps the state machine's validation error.
	ErrInvalidOp = errors.New("replica: invalid operation")
	// ErrBusy means the replica holds MaxTentative uncommitted operations or
	// MaxPending strong requests, or it has restarted and takes no update
	// until it has caught up with its cluster (fence.go); the client should
	// back off and retry.
	ErrBusy = errors.New("replica: too many operations in flight")
	// ErrFenced is the ErrBusy of a replica that has restarted and takes no
	// update until it has caught up with its cluster (fence.go); another
	// replica may take it at once.
	ErrFenced = fmt.Errorf("%w: restarted, and catching up with its cluster before it takes updates", ErrBusy)
)

// Config configures a Replica. validate fills defaults.
type Config struct {
	// ID is this replica's id (non-zero); Peers lists every replica, this
	// one included, for a cluster bootstrapped with them. Once the replica
	// has a configuration (from the log or a snapshot) its members are
	// that configuration's (see Members).
	ID    uint64
	Peers []uint64
	// Join starts a replica that an existing cluster has added (or will
	// add) with a membership change: with empty storage it bootstraps
	// nothing and learns the configuration from the leader's log or
	// snapshot. Peers may then be empty.
	Join bool
	// Storage is the durable raft log, shared with the driver, which appends
	// Ready.Entries and Ready.HardState to it.
	Storage raft.Storage
	// OwnOps are this replica's own operations that the driver persisted
	// (Ready.Persist) before a crash, in sequence order. They are replayed
	// on restart so that no acknowledged operation is lost.
	OwnOps []*Req
	// Clock returns physical time in nanoseconds; Rand draws election
	// timeouts. Both injected so that the core is deterministic.
	Clock func() int64
	Rand  *rand.Rand
	// Limits bound keys, values and scans of the state machine.
	Limits state.Limits
	// ElectionTicks and HeartbeatTicks configure raft (see consensus.Config).
	ElectionTicks  int
	HeartbeatTicks int
	// GossipTicks is the anti-entropy period: every GossipTicks ticks the
	// replica sends its VV to every peer. Default 2.
	GossipTicks int
	// NoopTicks is the period of the strong no-op that commits this
	// replica's weak operations in quiet periods (Creek §4.4). Default 5.
	NoopTicks int
	// RetryTicks is how long a strong operation or strong read waits for an
	// answer before it is proposed or asked again. Default 20.
	RetryTicks int
	// MaxTentative bounds the uncommitted operations a replica accepts from
	// its clients; it also bounds the size of a log entry, and the results
	// kept per origin for snapshots. Default 1024.
	MaxTentative int
	// MaxPending bounds strong reads and strong operations in flight.
	// Default 4096.
	MaxPending int
	// NoopBatch: once this many own weak operations wait for an entry, the
	// replica proposes them in the next Ready rather than at the next no-op
	// period.
	// Default 128.
	NoopBatch int
	// MaxOpsPerMsg bounds the operations in one gossip message. Default 256.
	MaxOpsPerMsg int
	// MaxEntryBytes bounds (approximately) the bytes of operations in one
	// log entry and in one gossip message; one operation always fits.
	// Default 4 MiB.
	MaxEntryBytes int
	// SnapshotEntries: every this many applied log entries the replica
	// asks its driver for a snapshot and log compaction. Default 10,000;
	// negative disables snapshots.
	SnapshotEntries int
	// SnapshotBytes and SnapshotTicks bound the same by the bytes of the
	// entries applied and by time: a snapshot is taken when any bound is
	// reached (and something was applied since the last). Defaults 16 MiB
	// and 30,000 ticks.
	SnapshotBytes int
	SnapshotTicks int
	// TrackHistory keeps every committed id and operation in memory and in
	// snapshots, for the simulation's checkers. Off in servers.
	TrackHistory bool
	// Logger, if set, receives progress lines of long work (the replay of
	// the log at start).
	Logger *slog.Logger
}

func (c *Config) validate() error {
	if c.ID == 0 {
		return errors.New("replica: config: ID must be non-zero")
	}
	if !c.Join && !slices.Contains(c.Peers, c.ID) {
		return fmt.Errorf("replica: config: Peers %v must include ID %d", c.Peers, c.ID)
	}
	if c.Storage == nil || c.Clock == nil || c.Rand == nil {
		return errors.New("replica: config: Storage, Clock and Rand are required")
	}
	c.Limits.EnsureDefaults()
	if err := c.Limits.Validate(); err != nil {
		return fmt.Errorf("replica: config: %w", err)
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.GossipTicks, 2)
	def(&c.NoopTicks, 5)
	def(&c.RetryTicks, 20)
	def(&c.MaxTentative, 1024)
	def(&c.MaxPending, 4096)
	def(&c.MaxOpsPerMsg, 256)
	def(&c.NoopBatch, 128)
	def(&c.MaxEntryBytes, 4<<20)
	if c.SnapshotEntries == 0 {
		c.SnapshotEntries = 10_000
	}
	def(&c.SnapshotBytes, 16<<20)
	def(&c.SnapshotTicks, 30_000)
	return nil
}

// Ready is what the replica asks its driver to do. The driver persists
// HardState, Entries and Persist first (in that order, synchronously), then
// sends Messages and delivers Views, then calls Advance.
type Ready struct {
	HardState *raftpb.HardState
	Entries   []*raftpb.Entry
	Snapshot  *raftpb.Snapshot
	// Persist lists this replica's own new operations: they must be durable
	// before any view or message about them leaves the replica.
	Persist []*Req
	// CreateSnapshot, if set, asks the driver to store a snapshot and
	// compact the log (after persisting the rest of this Ready).
	CreateSnapshot *SnapshotRequest
	// Early are a leader's appends and heartbeats, which the driver sends
	// before it persists, so that its followers write in parallel with it.
	// They may carry this replica's own operations of Persist: a crash
	// before the write leaves those in followers' logs only, which is why
	// a restarted replica issues no new operation until the terms it may
	// have led are settled (fence.go), so no id is ever issued twice.
	Early    []Message
	Messages []Message
	Views    []View

	raft *raft.Ready
}

// Stats counts work done, for the measurements of Creek §6.
type Stats struct {
	Executions        int // executions of updates, re-executions included
	Reads             int // executions of read-only operations
	Rollbacks         int // executions undone
	Committed         int // operations moved to the committed list
	StrongCommitted   int // own strong operations that got a stable view
	StrongAccurate    int // ... whose stable result equalled the tentative one
	TentativeMaxDepth int // longest tentative list seen
	SnapshotsReceived int // snapshots received through raft (catch-up)
	// Duplicates counts operations a committed entry carried that an
	// earlier entry had committed (proposed again by a retry or by another
	// replica), and DuplicateBytes their size (reqSize).
	Duplicates, DuplicateBytes int
	// StrippedAppends counts this leader's appends to a probing follower
	// that repeated the previous one and went without their entries
	// (consensus.Node.stripProbes), and StrippedBytes the entry data left
	// out.
	StrippedAppends, StrippedBytes int
}

// waiter is a client waiting for the stable view of an operation.
type waiter struct {
	client, seq uint64
	want        Want
	tentative   state.Result
	sent        bool // the tentative view was sent
}

// pendingRead is a strong read-only request waiting for ReadIndex.
type pendingRead struct {
	req       ClientRequest
	tentative state.Result
	sent      bool
	index     uint64 // read index once known; 0 before
	// ctx is the operations the replica had received when the read
	// arrived, if some were uncommitted then (nil otherwise): the read is
	// served once they are committed, so that it sees everything it
	// causally follows, weak writes this replica acknowledged included
	// (Creek §3: a strong operation's causal context).
	ctx VV
}

// readBatch is one ReadIndex request for the strong reads submitted since
// the one before (as etcd's server batches linearizable reads): one raft
// heartbeat round serves them all.
type readBatch struct {
	ids     []uint64 // keys of reads
	askedAt int
}

// Replica is the Creek core of one replica (Algorithm 1): a deterministic
// state machine fed with client requests, peer messages and ticks, drained
// through Ready. Not safe for concurrent use.
type Replica struct {
	cfg  Config
	node *consensus.Node
	clk  hlc

	// st holds the committed state with the tentative operations applied on
	// top, in the order of tentative; tentative[i] was applied with undo
	// tentative[i].undo. That execution order may differ from the (TS, ID)
	// order only by swapping operations that commute (touch disjoint keys):
	// every pair that conflicts is executed in (TS, ID) order, so every
	// result is the one the (TS, ID) order gives.
	st        *state.State
	tentative []executed
	// tentArr is tentative's whole array, from its first slot: tentative
	// is a window at its end (pushExecuted).
	tentArr []executed
	// undone is scratch for what a rollback takes off the stack until it is
	// executed again (receive, adjustExecution).
	undone []executed
	// missing is scratch for adjustExecution: the operations a commit
	// brings that the stack does not hold (at most a flush's worth).
	missing []executed
	// seeds and marks are scratch for rollbackSome: the positions it
	// starts from, and what it rolls back above the lowest of them.
	seeds []int
	marks []bool
	// arrivals is scratch for the operations of one gossip message (Step).
	arrivals []executed
	// walks is mustFollow's scratch, empty between calls.
	walks map[fkey]keyWalk
	ntent int // entries of tentative not committed
	keys  keyIndex
	// latest is at or after, in (TS, ID) order, every operation of
	// tentative that is not committed (nil: none).
	latest    *Req
	committed []OpID

	// vv covers every operation received (committed or tentative);
	// committedVV the committed ones (a contiguous prefix per origin).
	vv, committedVV VV
	// vvShared is the copy of vv the last stamp got (vvCopy).
	vvShared VV
	// log holds the known operations of each origin from sequence number
	// logBase[o]+1 on (committed ones below are forgotten after snapshots).
	log     map[uint64][]*Req
	logBase map[uint64]uint64
	// committedBase counts committed operations forgotten after snapshots.
	committedBase int
	snapIndex     uint64
	results       map[uint64][]committedResult
	confState     *raftpb.ConfState
	// Membership (member.go): the members by id, the peer addresses the
	// log announced, the ids removed; memberGen changes with any of them.
	memberIDs  []uint64
	addrs      map[uint64]string
	removedIDs map[uint64]bool
	memberGen  uint64
	// drain is the replicated drain state (drain.go).
	drain drainState
	// confSnap: a configuration change was applied since the last
	// snapshot (see applyConfChange).
	confSnap bool
	// lastTS is the largest timestamp this replica knows each origin has
	// issued with every earlier operation received (for stable time).
	lastTS map[uint64]uint64

	lastLead    uint64 // the leader seen at the last tick
	incarnation uint64 // random per New: tells this run's reads from earlier ones
	seq         uint64 // last sequence number issued here
	applied     uint64 // last raft index applied
	ticks       int

	// arrived is the tick each tentative operation arrived at; proposedAt
	// the tick this replica last put it in a log entry.
	arrived       map[OpID]int
	proposedAt    map[OpID]int
	gossipSent    map[uint64]*gossipMark
	waiting       map[OpID]*waiter
	pendingStrong map[OpID]int // own uncommitted strong ops -> tick last proposed
	reads         map[uint64]*pendingRead
	nextRead      uint64
	unasked       []uint64              // reads not in a batch yet
	newOwn        []*Req                // own operations not gossiped yet
	readBatches   map[uint64]*readBatch // by ReadIndex context id
	nextBatch     uint64
	lastNoop      int
	// readNoop asks the next Ready to propose the own weak operations no
	// entry carries yet: a strong read waits for them (submitRead).
	readNoop bool
	// bytesSinceSnap counts the entry bytes applied, snapTick the tick of
	// the last snapshot (maybeSnapshot).
	bytesSinceSnap int
	snapTick       int
	// lastSnapBytes is the size of the last snapshot this replica took or
	// restored: the bytes bound follows it (snapshotBytesBound).
	lastSnapBytes int
	// stateBytes is the state's size measured before the first snapshot
	// of a run, when the entries applied were sizedAt bytes
	// (snapshotBytesBound).
	stateBytes, sizedAt int
	// fencedAt is when the replica, started, was still fenced after its
	// replay (zero if it was not): for the log line that the fence lifted.
	fencedAt time.Time
	// snapPending: a snapshot asked for is not yet stored (SnapshotDone).
	snapPending bool
	// ownProposed is the highest own sequence number put in an entry since
	// the last leader change; toPropose the own strong operations submitted
	// since the last Ready (proposeNew).
	ownProposed uint64
	toPropose   []*Req
	// fenceTerm, if not 0, keeps a restarted replica from issuing new
	// operations until the entries of the terms it may have led before
	// are settled (see fence.go); fenceSelf: it may have led fenceTerm.
	// appliedTerm is the highest term of an entry or snapshot applied.
	fenceTerm   uint64
	fenceSelf   bool
	appliedTerm uint64
	// toCommit holds the operations of the entries applied since the last
	// flushCommits: committed, their execution not adjusted yet.
	toCommit []*Req
	// hsTerm and hsVote are the term and vote of the last hard state handed
	// to the driver (durable by the next Ready): a leader sends early only
	// in a Ready that does not change them.
	hsTerm, hsVote uint64

	out Ready
	// spareViews is the array of a Ready's views given back at Advance
	// (delivered by then), for the next Ready's: a busy replica emits
	// thousands of views a second, and a fresh list per Ready grew from
	// nothing each time.
	spareViews []View
	stats      Stats
}

// New creates a replica, or recreates one after a crash from its durable
// storage and persisted own operations.
func New(cfg Config) (*Replica, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r := &Replica{
		cfg:           cfg,
		clk:           hlc{now: cfg.Clock},
		st:            state.New(cfg.Limits),
		vv:            VV{},
		committedVV:   VV{},
		log:           map[uint64][]*Req{},
		logBase:       map[uint64]uint64{},
		results:       map[uint64][]committedResult{},
		lastTS:        map[uint64]uint64{},
		waiting:       map[OpID]*waiter{},
		arrived:       map[OpID]int{},
		proposedAt:    map[OpID]int{},
		gossipSent:    map[uint64]*gossipMark{},
		pendingStrong: map[OpID]int{},
		reads:         map[uint64]*pendingRead{},
		readBatches:   map[uint64]*readBatch{},
		addrs:         map[uint64]string{},
		removedIDs:    map[uint64]bool{},
	}
	r.keys.reset()
	r.refreshMembers()
	r.incarnation = cfg.Rand.Uint64()
	hs, _, err := cfg.Storage.InitialState()
	if err != nil {
		return nil, fmt.Errorf("replica: reading hard state: %w", err)
	}
	r.fence(hs)
	// Recovery: the snapshot in storage is the starting point; then the
	// log entries known committed (up to the durable commit index) are
	// applied here, before anything else is tentative, so that each costs
	// what it commits; then own operations persisted but not committed come
	// back as tentative. Raft goes on from the commit index.
	if _, err := r.loadSnapshot(); err != nil {
		return nil, err
	}
	commit := max(hs.GetCommit(), r.applied)
	r.node, err = consensus.New(consensus.Config{
		ID:             cfg.ID,
		Peers:          cfg.Peers,
		Join:           cfg.Join,
		Storage:        cfg.Storage,
		Applied:        commit,
		ElectionTicks:  cfg.ElectionTicks,
		HeartbeatTicks: cfg.HeartbeatTicks,
		Rand:           cfg.Rand,
	})
	if err != nil {
		return nil, err
	}
	if err := r.replay(commit); err != nil {
		return nil, err
	}
	if r.Removed() {
		return nil, fmt.Errorf("%w: replica %d (its log says so); a removed id never rejoins: start a new replica under a new id", ErrRemoved, cfg.ID)
	}
	if r.fenceTerm != 0 {
		r.fencedAt = time.Now() // still fenced after the replay (fence.go)
		if cfg.Logger != nil {
			cfg.Logger.Info("restart fence: updates refused until an entry of a term after this one is applied",
				"fenced_term", r.fenceTerm, "applied", r.applied)
		}
	}
	r.seq = r.vv[cfg.ID]
	st := r.node.Status()
	r.hsTerm, r.hsVote = st.GetTerm(), st.GetVote()
	for _, req := range cfg.OwnOps {
		if req.ID.Origin != cfg.ID {
			return nil, fmt.Errorf("replica: persisted own operation %v is not this replica's", req.ID)
		}
		if req.ID.Seq <= r.seq {
			continue // in the snapshot
		}
		if req.ID.Seq != r.seq+1 {
			return nil, fmt.Errorf("replica: persisted own operation %v out of sequence after %d", req.ID, r.seq)
		}
		r.seq = req.ID.Seq
		r.clk.Observe(req.TS)
		r.receive(req)
		if req.Strong {
			r.pendingStrong[req.ID] = -cfg.RetryTicks // propose at the first tick
		}
	}
	return r, nil
}

// replayBatchBytes bounds the log entries read from storage at once during
// recovery.
const replayBatchBytes = 16 << 20

// replay applies the committed log entries after the snapshot, up to
// commit, reading them from storage in bounded batches. Nothing is
// tentative yet, so each entry costs the operations it commits: recovery
// time is linear in the log it reads.
func (r *Replica) replay(commit uint64) error {
	from := r.applied + 1
	total := commit - r.applied
	progress := r.cfg.Logger != nil && total > 0
	if progress {
		r.cfg.Logger.Info("replaying the committed log", "from", from, "to", commit, "entries", total)
	}
	for lo := from; lo <= commit; {
		ents, err := r.cfg.Storage.Entries(lo, commit+1, replayBatchBytes)
		if err != nil {
			return fmt.Errorf("replica: reading log entries from %d: %w", lo, err)
		}
		if len(ents) == 0 {
			return fmt.Errorf("replica: log entries from %d to %d missing", lo, commit)
		}
		if err := r.applyEntries(ents); err != nil {
			return err
		}
		lo = ents[len(ents)-1].GetIndex() + 1
		if progress && (lo-from)/replayLogEvery != (lo-from-uint64(len(ents)))/replayLogEvery {
			r.cfg.Logger.Info("replaying the committed log", "applied", lo-1, "of", commit)
		}
	}
	if progress {
		r.cfg.Logger.Info("replayed the committed log", "applied", r.applied, "committed ops", r.committedCount())
	}
	return nil
}

// replayLogEvery is how many replayed entries pass between progress lines.
const replayLogEvery = 10_000

// ID returns the replica's id.
func (r *Replica) ID() uint64 { return r.cfg.ID }

// Stats returns the work counters.
func (r *Replica) Stats() Stats {
	st := r.stats
	n, b := r.node.Stripped()
	st.StrippedAppends, st.StrippedBytes = int(n), int(b)
	return st
}

// IsLeader reports whether this replica leads the raft group.
func (r *Replica) IsLeader() bool { return r.node.IsLeader() }

// Leader returns the raft leader this replica knows of, 0 if none.
func (r *Replica) Leader() uint64 { return r.node.Status().Lead }

// Committed returns the committed order (a copy).
func (r *Replica) Committed() []OpID { return slices.Clone(r.committed) }

// Tentative returns the tentative order: the uncommitted operations by
// (TS, ID). (They may have been executed in another order that differs only
// by operations that commute.)
func (r *Replica) Tentative() []OpID {
	var reqs []*Req
	for _, e := range r.tentative {
		if !e.committed {
			reqs = append(reqs, e.req)
		}
	}
	slices.SortFunc(reqs, compareReq)
	ids := make([]OpID, len(reqs))
	for i, q := range reqs {
		ids[i] = q.ID
	}
	return ids
}

// CommittedStateHash returns the hash of the committed state.
func (r *Replica) CommittedStateHash() uint64 {
	var h uint64
	r.withCommitted(func(st *state.State) { h = st.Hash() })
	return h
}

// Op returns a known operation by id.
func (r *Replica) Op(id OpID) (*Req, bool) {
	ops, base := r.log[id.Origin], r.logBase[id.Origin]
	if id.Seq <= base || id.Seq > base+uint64(len(ops)) {
		return nil, false
	}
	return ops[id.Seq-base-1], true
}

func (r *Replica) stamp() Stamp {
	return Stamp{
		Replica:        r.cfg.ID,
		AppliedIndex:   r.applied,
		CommittedCount: r.committedCount(),
		VV:             r.vvCopy(),
		StableTime:     r.stableTime(),
	}
}

// vvCopy returns a copy of vv for a stamp. Stamps taken while vv does not
// change share one copy (the stable views of an entry's operations, the
// views of one batch of reads): nothing writes a stamp's VV, neither here,
// where vvShared is replaced and never written, nor in its users.
func (r *Replica) vvCopy() VV {
	if c := r.vvShared; c != nil && len(c) == len(r.vv) {
		same := true
		for o, s := range r.vv {
			if c[o] != s {
				same = false
				break
			}
		}
		if same {
			return c
		}
	}
	r.vvShared = r.vv.Clone()
	return r.vvShared
}

// stableTime is the largest timestamp below which every operation of every
// replica has arrived here.
func (r *Replica) stableTime() uint64 {
	var min uint64
	for i, p := range r.memberIDs {
		ts := r.lastTS[p]
		if p == r.cfg.ID {
			ts = r.clk.Peek()
		}
		if i == 0 || ts < min {
			min = ts
		}
	}
	return min
}

func (r *Replica) emit(v View) {
	rv := v.Stamp.ReadVV // set by the caller, for a read that asked for it
	v.Stamp = r.stamp()
	v.Stamp.ReadVV = rv
	r.out.Views = append(r.out.Views, v)
}

func (r *Replica) send(m Message) {
	m.From = r.cfg.ID
	r.out.Messages = append(r.out.Messages, m)
}

// Stamp returns the replica's current stamp.
func (r *Replica) Stamp() Stamp { return r.stamp() }

// Covers reports whether the replica has received every operation v counts
// (its version vector covers v).
func (r *Replica) Covers(v VV) bool { return r.vv.Covers(v) }

// TransferLeadership asks raft to hand leadership to id (effective only on
// the leader).
func (r *Replica) TransferLeadership(id uint64) { r.node.TransferLeadership(id) }

// Progress returns the raft index applied, the commit index this replica
// knows of (ahead of applied while it catches up) and its snapshot's index.
func (r *Replica) Progress() (applied, commit, snapshot uint64) {
	return r.applied, r.node.Status().GetCommit(), r.snapIndex
}

// Term returns the raft term this replica is in.
func (r *Replica) Term() uint64 { return r.node.Status().GetTerm() }

// TentativeLen returns the number of tentative operations.
func (r *Replica) TentativeLen() int { return r.ntent }

// ownUncommitted is the number of this replica's own operations not yet
// committed (its prefix is contiguous, so a difference of VV entries).
func (r *Replica) ownUncommitted() int {
	return int(r.vv[r.cfg.ID] - r.committedVV[r.cfg.ID])
}
