package consensus

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

// raftElectionTick disables raft's own randomised election timer (which draws
// from crypto/rand and would make simulations unrepeatable); Node runs its own.
const raftElectionTick = 1 << 30

// Config configures a Node. Zero values are replaced by defaults in validate.
type Config struct {
	// ID is this replica's raft id; non-zero.
	ID uint64
	// Peers lists every replica's raft id, this one included, for a fresh
	// cluster. Ignored when Storage already holds a configuration.
	Peers []uint64
	// Join: with empty storage, bootstrap nothing and wait for the leader
	// of an existing cluster (which added this node with a configuration
	// change) to send its log or a snapshot.
	Join bool
	// Storage is the durable raft log. The caller appends Ready.Entries and
	// Ready.HardState to it before sending Ready.Messages.
	Storage raft.Storage
	// Applied is the last log index already applied to the state machine
	// (0 on a replica that rebuilds its state by replaying the log).
	Applied uint64
	// ElectionTicks is the minimum number of ticks without hearing from a
	// leader before a follower campaigns; the timeout is drawn uniformly in
	// [ElectionTicks, 2*ElectionTicks). Default 10.
	ElectionTicks int
	// HeartbeatTicks is the leader's heartbeat interval in ticks. Default 1.
	HeartbeatTicks int
	// Rand draws election timeouts. Required: determinism comes from here.
	Rand *rand.Rand
	// MaxSizePerMsg bounds the bytes of entries in one append message.
	// Default 1 MiB.
	MaxSizePerMsg uint64
	// MaxInflightMsgs bounds the append messages in flight to one follower.
	// Default 1024: the leader sends one per proposal, and under load
	// hundreds of proposals are in flight at once.
	MaxInflightMsgs int
	// MaxInflightBytes bounds the bytes of entries in the appends in flight
	// to one follower. Default 4 MiB (at least MaxSizePerMsg): it bounds
	// what a leader reads from its log and encodes in one Ready to bring a
	// follower up, which otherwise was everything the follower lacked
	// (tens of megabytes after a replica was down for 10 s under load,
	// read on the loop while no heartbeat went out). Under steady load far
	// less is in flight: a round trip's worth of writes.
	MaxInflightBytes uint64
	// MaxUncommittedEntriesSize bounds the bytes of proposals the leader holds
	// uncommitted; past it proposals fail with raft.ErrProposalDropped.
	// Default 64 MiB.
	MaxUncommittedEntriesSize uint64
	// Logger receives raft's log lines. Default: discarded.
	Logger raft.Logger
}

func (c *Config) validate() error {
	if c.ID == 0 {
		return errors.New("consensus: config: ID must be non-zero")
	}
	if c.Storage == nil {
		return errors.New("consensus: config: Storage is required")
	}
	if c.Rand == nil {
		return errors.New("consensus: config: Rand is required (it makes elections deterministic)")
	}
	if c.ElectionTicks == 0 {
		c.ElectionTicks = 10
	}
	if c.HeartbeatTicks == 0 {
		c.HeartbeatTicks = 1
	}
	if c.HeartbeatTicks >= c.ElectionTicks {
		return fmt.Errorf("consensus: config: HeartbeatTicks (%d) must be below ElectionTicks (%d)", c.HeartbeatTicks, c.ElectionTicks)
	}
	if c.MaxSizePerMsg == 0 {
		c.MaxSizePerMsg = 1 << 20
	}
	if c.MaxInflightMsgs == 0 {
		c.MaxInflightMsgs = 1024
	}
	if c.MaxInflightBytes == 0 {
		c.MaxInflightBytes = max(4<<20, c.MaxSizePerMsg)
	}
	if c.MaxInflightBytes < c.MaxSizePerMsg {
		return fmt.Errorf("consensus: config: MaxInflightBytes (%d) must be at least MaxSizePerMsg (%d)", c.MaxInflightBytes, c.MaxSizePerMsg)
	}
	if c.MaxUncommittedEntriesSize == 0 {
		c.MaxUncommittedEntriesSize = 64 << 20
	}
	if c.Logger == nil {
		c.Logger = discardLogger{}
	}
	return nil
}

// Node is one replica's raft participant with a deterministic election timer.
// It is not safe for concurrent use: one owner feeds it, as with RawNode.
type Node struct {
	cfg Config
	rn  *raft.RawNode

	// sinceLeader counts ticks since this node last heard from a leader of
	// its current term (or voted, or was leader); timeout is the current
	// randomised election timeout.
	sinceLeader int
	timeout     int

	// transferee is the target of the leadership transfer this node (as
	// leader) has pending, and transferTicks the ticks it has been
	// pending: abandoned after ElectionTicks (see Tick).
	transferee    uint64
	transferTicks int

	// probes holds, per follower, the last append with entries this
	// leader sent it (see stripProbes); stripped counts the appends whose
	// entries were left out, and strippedBytes their entries' bytes.
	probes        map[uint64]appendKey
	stripped      uint64
	strippedBytes uint64
}

// appendKey names what an append's entries follow: the leader's term and
// the index and term of the entry before them.
type appendKey struct{ term, index, logTerm uint64 }

// New starts a Node. A fresh cluster (empty storage) bootstraps with
// cfg.Peers; a restarted one recovers its configuration from storage.
func New(cfg Config) (*Node, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	rc := &raft.Config{
		ID:                        cfg.ID,
		ElectionTick:              raftElectionTick,
		HeartbeatTick:             cfg.HeartbeatTicks,
		Storage:                   cfg.Storage,
		Applied:                   cfg.Applied,
		MaxSizePerMsg:             cfg.MaxSizePerMsg,
		MaxInflightMsgs:           cfg.MaxInflightMsgs,
		MaxInflightBytes:          cfg.MaxInflightBytes,
		MaxUncommittedEntriesSize: cfg.MaxUncommittedEntriesSize,
		MaxCommittedSizePerReady:  4 * cfg.MaxSizePerMsg,
		PreVote:                   true,
		ReadOnlyOption:            raft.ReadOnlySafe,
		Logger:                    cfg.Logger,
		// A leader removed from the configuration steps down at once, so
		// that the others elect a new one.
		StepDownOnRemoval: true,
	}
	rn, err := raft.NewRawNode(rc)
	if err != nil {
		return nil, fmt.Errorf("consensus: %w", err)
	}
	_, cs, err := cfg.Storage.InitialState()
	if err != nil {
		return nil, fmt.Errorf("consensus: reading initial state: %w", err)
	}
	last, err := cfg.Storage.LastIndex()
	if err != nil {
		return nil, fmt.Errorf("consensus: reading last index: %w", err)
	}
	// A fresh cluster bootstraps. A restarted replica finds its log (and
	// replays its configuration changes from it, or from a snapshot).
	if last == 0 && len(cs.GetVoters()) == 0 && !cfg.Join {
		if len(cfg.Peers) == 0 {
			return nil, errors.New("consensus: empty storage and no Peers to bootstrap with")
		}
		// Every replica bootstraps with the same configuration entries in
		// the same order, whatever order its caller lists the peers in, so
		// that entries 1..n are the same on every replica's log (raft's log
		// matching property).
		ids := slices.Sorted(slices.Values(cfg.Peers))
		peers := make([]raft.Peer, len(ids))
		for i, id := range ids {
			peers[i] = raft.Peer{ID: id}
		}
		if err := rn.Bootstrap(peers); err != nil {
			return nil, fmt.Errorf("consensus: bootstrap: %w", err)
		}
	}
	n := &Node{cfg: cfg, rn: rn}
	n.resetTimer()
	return n, nil
}

func (n *Node) resetTimer() {
	n.sinceLeader = 0
	n.timeout = n.cfg.ElectionTicks + n.cfg.Rand.IntN(n.cfg.ElectionTicks)
}

// Tick advances the logical clock by one tick: heartbeats on a leader, the
// election timer on everyone else.
func (n *Node) Tick() {
	n.rn.Tick()
	if n.rn.BasicStatus().RaftState == raft.StateLeader {
		n.sinceLeader = 0
		n.tickTransfer()
		return
	}
	n.transferee, n.transferTicks = 0, 0
	n.sinceLeader++
	if n.sinceLeader >= n.timeout {
		n.resetTimer()
		// Campaign starts a pre-vote; an error only means this node cannot
		// campaign now (for example it is not a voter), which is not fatal.
		_ = n.rn.Campaign()
	}
}

// tickTransfer abandons a leadership transfer that has been pending for
// ElectionTicks ticks. raft does that itself after an election timeout
// ("if current leader cannot transfer leadership in electionTimeout, it
// becomes leader again"), counted by the election timer this Node disables
// (raftElectionTick); without it, a transfer to a crashed or cut-off
// replica stays pending for ever, and the leader drops every proposal
// while one is pending. A MsgTransferLeader naming the leader itself
// aborts the pending transfer (raft's stepLeader: a request for another
// transferee aborts the current one, then one for the leader is ignored).
func (n *Node) tickTransfer() {
	lt := n.rn.BasicStatus().LeadTransferee
	if lt == 0 {
		n.transferee, n.transferTicks = 0, 0
		return
	}
	if lt != n.transferee {
		n.transferee, n.transferTicks = lt, 0
	}
	n.transferTicks++
	if n.transferTicks >= n.cfg.ElectionTicks {
		n.rn.TransferLeader(n.cfg.ID)
		n.transferee, n.transferTicks = 0, 0
	}
}

// noteTransfer restarts the count of a transfer that started (or changed
// target) in a call: raft gives each request a full election timeout.
func (n *Node) noteTransfer(before raft.BasicStatus) {
	if lt := n.rn.BasicStatus().LeadTransferee; lt != 0 && lt != before.LeadTransferee {
		n.transferee, n.transferTicks = lt, 0
	}
}

// Step hands a message from a peer to raft.
func (n *Node) Step(m *raftpb.Message) error {
	before := n.rn.BasicStatus()
	// A follower forwards MsgTransferLeader to the leader.
	defer n.noteTransfer(before)
	switch m.GetType() {
	case raftpb.MsgApp, raftpb.MsgHeartbeat, raftpb.MsgSnap:
		// Only a leader of at least our term sends these; hearing from it
		// keeps us from campaigning.
		if m.GetTerm() >= before.GetTerm() {
			n.sinceLeader = 0
		}
	case raftpb.MsgPreVote, raftpb.MsgVote:
		if n.inLease(m, before) {
			return nil
		}
	}
	if err := n.rn.Step(m); err != nil {
		return fmt.Errorf("consensus: step %s from %d: %w", m.GetType(), m.GetFrom(), err)
	}
	if after := n.rn.BasicStatus(); after.GetTerm() != before.GetTerm() {
		// A new term (a vote granted, or a new leader seen) gives the
		// candidate or leader of that term a full timeout, as raft does.
		n.resetTimer()
	}
	return nil
}

// campaignTransfer is the context of the votes of an election that a
// leadership transfer started (raft's campaignTransfer).
var campaignTransfer = []byte("CampaignTransfer")

// inLease reports whether a vote or pre-vote request for a later term is
// to be ignored: this node is the leader, or heard from one less than the
// shortest election timeout ago (raft's leader lease, which comes with its
// CheckQuorum and counts on the election timer this Node replaces). Without
// it a follower that missed a few heartbeats (its own loop slow, or a
// restart) won the pre-vote of the other follower, which was hearing from
// the leader all along, and deposed a healthy leader: a loaded cluster with
// large values changed leaders a dozen times a minute. A transfer's
// election is never ignored.
func (n *Node) inLease(m *raftpb.Message, st raft.BasicStatus) bool {
	return m.GetTerm() > st.GetTerm() && st.Lead != 0 && n.sinceLeader < n.cfg.ElectionTicks &&
		!bytes.Equal(m.GetContext(), campaignTransfer)
}

// Propose appends data to the log through the leader. It fails with
// raft.ErrProposalDropped when there is no known leader or the leader's
// uncommitted budget is full; the caller retries.
func (n *Node) Propose(data []byte) error { return n.rn.Propose(data) }

// ProposeConfChange proposes a configuration change through the leader. The
// leader drops it (raft turns it into an empty entry) while an earlier
// change is not applied yet, or, for a change, while the configuration is
// joint; the caller watches the configuration to see it take effect.
func (n *Node) ProposeConfChange(cc raftpb.ConfChangeI) error { return n.rn.ProposeConfChange(cc) }

// ReadIndex asks for a linearizable read point; the answer arrives as a
// raft.ReadState in a later Ready, carrying rctx. Without a leader the request
// is dropped silently, so the caller retries.
func (n *Node) ReadIndex(rctx []byte) { n.rn.ReadIndex(rctx) }

// HasReady reports whether Ready would return anything.
func (n *Node) HasReady() bool { return n.rn.HasReady() }

// Ready returns what raft has for the caller: entries and hard state to
// persist first, then messages to send and committed entries to apply.
func (n *Node) Ready() raft.Ready {
	rd := n.rn.Ready()
	n.stripProbes(rd.Messages)
	return rd
}

// stripProbes leaves the entries out of an append to a probing follower
// that repeats the last one sent to it: the same entries after the same
// point, while the first copy may still be on its way or waiting in the
// follower's inbox.
//
// raft's leader sends a follower it is probing (one it does not know to
// match its log: after a restart, a rejection, a report that it was
// unreachable) one append of up to MaxSizePerMsg and waits for the reply;
// but every heartbeat reply lifts that wait and sends the same append
// again. etcd beats every 100 ms; a server of this store every 30 ms, so a
// follower whose loop was a second behind its inbox (a restarted replica
// catching up) was sent thirty copies of a megabyte, which it had to
// decode, falling further behind, and which its leader read from its log
// and encoded, on its loop: restarted replicas of the kill soak took
// updates only after 20 s, and leaders were deposed for slow rounds.
//
// A probe carries its entries only to save a round trip; the point it
// names (index and term) is what probing needs: the follower answers an
// empty one as it would the full one (it matches there, or it rejects with
// a hint), and on a match the leader replicates to it from there. So
// stripping a repeat never stalls a follower, whether or not the first
// copy arrives. Only appends to a follower that raft still probes when
// the Ready is taken are stripped: in raft's replicate state the leader
// counts what it sent as on its way and does not send it again unless the
// follower rejects a later append (raft sends, after a probe is answered,
// the same entries after the same point: that copy must go). An append
// sent in replicate state before a fall back to probing in the same Ready
// may be stripped: raft has forgotten it, and probes afresh.
func (n *Node) stripProbes(msgs []*raftpb.Message) {
	var states map[uint64]tracker.StateType
	for _, m := range msgs {
		if m.GetType() != raftpb.MsgApp || len(m.GetEntries()) == 0 {
			continue
		}
		to := m.GetTo()
		k := appendKey{m.GetTerm(), m.GetIndex(), m.GetLogTerm()}
		if n.probes == nil {
			n.probes = map[uint64]appendKey{}
		}
		if n.probes[to] != k {
			n.probes[to] = k
			continue
		}
		if states == nil {
			states = map[uint64]tracker.StateType{}
			n.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) { states[id] = pr.State })
		}
		if states[to] != tracker.StateProbe {
			continue
		}
		n.stripped++
		for _, e := range m.GetEntries() {
			n.strippedBytes += uint64(len(e.GetData()))
		}
		m.Entries = nil
	}
}

// Stripped returns how many repeated appends to a probing follower went
// without their entries, and the bytes of data those entries held.
func (n *Node) Stripped() (appends, bytes uint64) { return n.stripped, n.strippedBytes }

// Advance tells raft that the last Ready was handled.
func (n *Node) Advance(rd raft.Ready) { n.rn.Advance(rd) }

// Status is raft's basic status: term, leader, commit and applied index.
func (n *Node) Status() raft.BasicStatus { return n.rn.BasicStatus() }

// IsLeader reports whether this node is the leader of its current term.
func (n *Node) IsLeader() bool { return n.rn.BasicStatus().RaftState == raft.StateLeader }

// ReportUnreachable tells raft a message to id could not be delivered.
// The last append to id may be among what was lost: the next one is sent
// whole even if it repeats it (stripProbes).
func (n *Node) ReportUnreachable(id uint64) {
	delete(n.probes, id)
	n.rn.ReportUnreachable(id)
}

// ReportSnapshot tells raft how sending a snapshot to id ended.
func (n *Node) ReportSnapshot(id uint64, ok bool) {
	st := raft.SnapshotFinish
	if !ok {
		st = raft.SnapshotFailure
	}
	n.rn.ReportSnapshot(id, st)
}

// TransferLeadership asks the leader to hand leadership to id. The leader
// drops proposals while the transfer is pending; if id has not taken over
// within ElectionTicks ticks (it may be down), the leader abandons the
// transfer and carries on.
func (n *Node) TransferLeadership(id uint64) {
	before := n.rn.BasicStatus()
	n.rn.TransferLeader(id)
	n.noteTransfer(before)
}

// discardLogger drops raft's log lines; the driver injects a real one.
type discardLogger struct{}

func (discardLogger) Debug(...interface{})            {}
func (discardLogger) Debugf(string, ...interface{})   {}
func (discardLogger) Error(...interface{})            {}
func (discardLogger) Errorf(string, ...interface{})   {}
func (discardLogger) Info(...interface{})             {}
func (discardLogger) Infof(string, ...interface{})    {}
func (discardLogger) Warning(...interface{})          {}
func (discardLogger) Warningf(string, ...interface{}) {}
func (discardLogger) Fatal(v ...interface{})          { panic(fmt.Sprint(v...)) }
func (discardLogger) Fatalf(f string, v ...interface{}) {
	panic(fmt.Sprintf(f, v...))
}
func (discardLogger) Panic(v ...interface{})            { panic(fmt.Sprint(v...)) }
func (discardLogger) Panicf(f string, v ...interface{}) { panic(fmt.Sprintf(f, v...)) }

// ApplyConfChange applies a committed configuration change entry and returns
// the resulting configuration.
func (n *Node) ApplyConfChange(cc raftpb.ConfChangeI) *raftpb.ConfState {
	return n.rn.ApplyConfChange(cc)
}
