package storage

import (
	"fmt"
	"io"
	"log"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// raftNode is one member of an in-process raft cluster over a Store, driven
// the way etcd's raftexample drives raft: persist the Ready, send, apply,
// Advance. Its application state is the list of applied entry payloads.
type raftNode struct {
	id      uint64
	fs      *vfs.MemFS
	s       *Store
	rn      *raft.RawNode // nil while down
	applied []string
	index   uint64 // last applied log index
	cs      *raftpb.ConfState
	snaps   int // snapshots received from a leader
}

type raftCluster struct {
	t     *testing.T
	nodes []*raftNode
	inbox []*raftpb.Message
	// snapEvery makes every node snapshot its state and compact its log
	// each time it has applied that many entries since its last snapshot.
	snapEvery uint64
}

func newRaftCluster(t *testing.T, n int) *raftCluster {
	c := &raftCluster{t: t, snapEvery: 20}
	var peers []raft.Peer
	for i := 1; i <= n; i++ {
		peers = append(peers, raft.Peer{ID: uint64(i)})
	}
	for i := 1; i <= n; i++ {
		nd := &raftNode{id: uint64(i), fs: vfs.NewCrashableMem()}
		c.nodes = append(c.nodes, nd)
		c.start(nd, peers)
	}
	return c
}

// start opens the node's store and starts raft on it, restoring the
// application state from the store's snapshot as a real server would.
func (c *raftCluster) start(nd *raftNode, peers []raft.Peer) {
	nd.s = mustOpen(c.t, memOptions(nd.fs))
	snap, err := nd.s.Snapshot()
	if err != nil {
		c.t.Fatal(err)
	}
	nd.restore(snap)
	nd.rn, err = raft.NewRawNode(&raft.Config{
		ID:              nd.id,
		ElectionTick:    10,
		HeartbeatTick:   1,
		Storage:         nd.s,
		Applied:         nd.index,
		MaxSizePerMsg:   4 << 10, // small, so catching up takes several messages
		MaxInflightMsgs: 16,
		Logger:          &raft.DefaultLogger{Logger: log.New(io.Discard, "", 0)},
	})
	if err != nil {
		c.t.Fatal(err)
	}
	if peers != nil {
		if err := nd.rn.Bootstrap(peers); err != nil {
			c.t.Fatal(err)
		}
	}
}

func (nd *raftNode) restore(snap *raftpb.Snapshot) {
	nd.applied = nil
	if d := snap.GetData(); len(d) > 0 {
		nd.applied = strings.Split(string(d), "\n")
	}
	nd.index = snap.GetMetadata().GetIndex()
	nd.cs = snap.GetMetadata().GetConfState()
}

// crash kills a node without Close: only what its store synced survives.
func (c *raftCluster) crash(nd *raftNode) {
	crashed := nd.fs.CrashClone(vfs.CrashCloneCfg{})
	_ = nd.s.Close() // frees the dead store's goroutines; its filesystem is discarded
	nd.fs, nd.rn = crashed, nil
}

func (c *raftCluster) leader() *raftNode {
	for _, nd := range c.nodes {
		if nd.rn != nil && nd.rn.BasicStatus().RaftState == raft.StateLeader {
			return nd
		}
	}
	return nil
}

// round ticks every live node once and runs until nothing is left to do.
func (c *raftCluster) round() {
	for _, nd := range c.nodes {
		if nd.rn != nil {
			nd.rn.Tick()
		}
	}
	for busy := true; busy; {
		busy = false
		for _, nd := range c.nodes {
			if nd.rn != nil && nd.rn.HasReady() {
				busy = true
				c.handleReady(nd)
			}
		}
		msgs := c.inbox
		c.inbox = nil
		for _, m := range msgs {
			busy = true
			to, from := c.nodes[m.GetTo()-1], c.nodes[m.GetFrom()-1]
			if to.rn == nil {
				if from.rn != nil && m.GetType() == raftpb.MsgSnap {
					from.rn.ReportSnapshot(to.id, raft.SnapshotFailure)
				}
				continue
			}
			if err := to.rn.Step(m); err != nil {
				c.t.Fatalf("node %d: step %v: %v", to.id, m.GetType(), err)
			}
			if m.GetType() == raftpb.MsgSnap && from.rn != nil {
				from.rn.ReportSnapshot(to.id, raft.SnapshotFinish)
			}
		}
	}
}

func (c *raftCluster) handleReady(nd *raftNode) {
	rd := nd.rn.Ready()
	if err := nd.s.Save(rd.HardState, rd.Entries, rd.Snapshot, nil); err != nil {
		c.t.Fatalf("node %d: Save: %v", nd.id, err)
	}
	if rd.Snapshot != nil && !raft.IsEmptySnap(rd.Snapshot) {
		nd.snaps++
		nd.restore(rd.Snapshot)
	}
	c.inbox = append(c.inbox, rd.Messages...)
	for _, e := range rd.CommittedEntries {
		switch e.GetType() {
		case raftpb.EntryNormal:
			if len(e.GetData()) > 0 {
				nd.applied = append(nd.applied, string(e.GetData()))
			}
		case raftpb.EntryConfChange:
			var cc raftpb.ConfChange
			if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
				c.t.Fatal(err)
			}
			nd.cs = nd.rn.ApplyConfChange(&cc)
		}
		nd.index = e.GetIndex()
	}
	if snapIdx := nd.snapIndex(c.t); nd.index >= snapIdx+c.snapEvery {
		data := []byte(strings.Join(nd.applied, "\n"))
		if _, err := nd.s.CreateSnapshot(nd.index, nd.cs, data); err != nil {
			c.t.Fatalf("node %d: CreateSnapshot(%d): %v", nd.id, nd.index, err)
		}
		// Keep a few entries behind the snapshot for slow followers.
		if keep := nd.index - 5; keep > snapIdx {
			if err := nd.s.Compact(keep); err != nil {
				c.t.Fatalf("node %d: Compact(%d): %v", nd.id, keep, err)
			}
		}
	}
	nd.rn.Advance(rd)
}

func (nd *raftNode) snapIndex(t *testing.T) uint64 {
	snap, err := nd.s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return snap.GetMetadata().GetIndex()
}

// propose proposes n entries through the leader, running rounds until it
// has applied them all.
func (c *raftCluster) propose(first, n int) {
	for i := first; i < first+n; {
		c.round()
		if l := c.leader(); l != nil && l.rn.Propose([]byte(fmt.Sprintf("e%03d", i))) == nil {
			i++
		}
	}
	for range 30 {
		c.round()
	}
}

// persisted is what a node's store holds: the hard state and the log.
func persisted(t *testing.T, s *Store) (*raftpb.HardState, []*raftpb.Entry) {
	t.Helper()
	hs, err := s.HardState()
	if err != nil {
		t.Fatal(err)
	}
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	if last < first {
		return hs, nil
	}
	ents, err := s.Entries(first, last+1, math.MaxUint64)
	if err != nil {
		t.Fatal(err)
	}
	return hs, ents
}

// TestRaftCluster runs three raft nodes over Stores, crashes a follower and
// checks that it restarts with its log and hard state, keeps it down while
// the others compact past its log so that it must catch up from a snapshot,
// then crashes and restarts the leader. All nodes end with the same state.
func TestRaftCluster(t *testing.T) {
	c := newRaftCluster(t, 3)
	defer func() {
		for _, nd := range c.nodes {
			_ = nd.s.Close()
		}
	}()
	for range 50 {
		c.round()
	}
	if c.leader() == nil {
		t.Fatal("no leader after 50 rounds")
	}
	c.propose(0, 30)

	// Crash a follower and restart it at once: it must find its log exactly
	// as it saved it, and its hard state too but for the commit index, which
	// a commit-only write does not fsync (Save): that may move back, never
	// past what the log holds.
	f := c.nodes[0]
	if f == c.leader() {
		f = c.nodes[1]
	}
	hs, ents := persisted(t, f.s)
	if len(ents) == 0 || hs.GetCommit() == 0 {
		t.Fatalf("node %d persisted nothing: %v, %d entries", f.id, hs, len(ents))
	}
	c.crash(f)
	c.start(f, nil)
	hs2, ents2 := persisted(t, f.s)
	if hs2.GetTerm() != hs.GetTerm() || hs2.GetVote() != hs.GetVote() || hs2.GetCommit() > hs.GetCommit() ||
		!slices.EqualFunc(ents, ents2, func(a, b *raftpb.Entry) bool { return proto.Equal(a, b) }) {
		t.Fatalf("node %d after restart: %v and %d entries, want %v (or an older commit) and %d", f.id, hs2, len(ents2), hs, len(ents))
	}
	if st := f.rn.BasicStatus(); st.GetTerm() != hs2.GetTerm() || st.GetCommit() != hs2.GetCommit() {
		t.Fatalf("raft on node %d restarted at term %d commit %d, want %d, %d", f.id, st.GetTerm(), st.GetCommit(), hs2.GetTerm(), hs2.GetCommit())
	}
	c.propose(30, 10)

	// Keep it down while the others go on and compact past its log.
	c.crash(f)
	c.propose(40, 60)
	c.start(f, nil)
	for range 50 {
		c.round()
	}
	if f.snaps == 0 {
		t.Fatalf("node %d caught up without a snapshot; the test does not exercise snapshots", f.id)
	}

	// Crash the leader; a new one takes over and the old one rejoins.
	l := c.leader()
	c.crash(l)
	for range 50 {
		c.round()
	}
	c.start(l, nil)
	c.propose(100, 20)

	for _, nd := range c.nodes {
		first, _ := nd.s.FirstIndex()
		last, _ := nd.s.LastIndex()
		t.Logf("node %d: applied %d entries up to index %d, log [%d, %d], %d snapshots received", nd.id, len(nd.applied), nd.index, first, last, nd.snaps)
	}
	want := c.nodes[0].applied
	if len(want) < 100 {
		t.Fatalf("only %d entries applied, want at least 100", len(want))
	}
	for _, nd := range c.nodes {
		if !slices.Equal(nd.applied, want) {
			t.Fatalf("node %d applied %d entries, node 1 %d; states differ", nd.id, len(nd.applied), len(want))
		}
		seen := map[string]bool{}
		for _, a := range nd.applied {
			if seen[a] {
				t.Fatalf("node %d applied %q twice", nd.id, a)
			}
			seen[a] = true
		}
	}
}
