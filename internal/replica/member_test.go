package replica

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/correctables/correctables/internal/state"
)

// memberEnv is the interaction harness driven from Go: three replicas on
// raft.MemoryStorage, messages delivered by stabilize.
func memberEnv(t *testing.T) *interactionEnv {
	t.Helper()
	e := &interactionEnv{
		nodes: map[uint64]*interactionNode{}, cut: map[[2]uint64]bool{},
		reqs: map[[2]uint64]ClientRequest{}, counts: map[[2]uint64]*viewCount{},
	}
	e.ids = []uint64{1, 2, 3}
	for _, id := range e.ids {
		nd := &interactionNode{id: id, storage: raft.NewMemoryStorage(), clockMS: 1000}
		e.nodes[id] = nd
		e.start(t, nd)
		e.processReady(t, nd, &strings.Builder{})
	}
	for i := 0; e.nodes[1].rep.node.Status().RaftState == raft.StateFollower; i++ {
		if i > 1000 {
			t.Fatal("replica 1 does not campaign")
		}
		e.nodes[1].rep.node.Tick()
	}
	e.stabilize(t, &strings.Builder{})
	if !e.nodes[1].rep.IsLeader() {
		t.Fatal("replica 1 is not the leader")
	}
	return e
}

// join starts replica id with empty storage, as `serve --join` does.
func (e *interactionEnv) join(t *testing.T, id uint64) *interactionNode {
	t.Helper()
	nd := &interactionNode{id: id, storage: raft.NewMemoryStorage(), clockMS: 1000}
	e.nodes[id] = nd
	e.ids = append(e.ids, id)
	cfg := e.tmpl
	cfg.ID, cfg.Join, cfg.Storage = id, true, nd.storage
	cfg.Clock = func() int64 { return nd.clockMS * 1e6 }
	cfg.Rand = rand.New(rand.NewPCG(id, 1))
	rep, err := New(cfg)
	if err != nil {
		t.Fatalf("joining replica %d: %v", id, err)
	}
	nd.rep = rep
	return nd
}

// settle ticks every live replica and stabilizes, n times.
func (e *interactionEnv) settle(t *testing.T, n int) {
	t.Helper()
	for range n {
		for _, id := range e.ids {
			if nd := e.nodes[id]; nd.rep != nil {
				nd.rep.Tick()
			}
		}
		e.stabilize(t, &strings.Builder{})
	}
}

var putSeq uint64

func (e *interactionEnv) put(t *testing.T, id uint64, key, val string, strong bool) {
	t.Helper()
	nd := e.nodes[id]
	putSeq++
	cr := ClientRequest{Client: id, Seq: putSeq, Op: state.Op{Kind: state.OpPut, Key: key, Value: []byte(val)}, Strong: strong, Want: WantTentative | WantStable}
	if err := nd.rep.Submit(cr); err != nil {
		t.Fatalf("replica %d: put %s: %v", id, key, err)
	}
}

func memberIDs(ms []Member) []uint64 {
	var ids []uint64
	for _, m := range ms {
		ids = append(ids, m.ID)
	}
	return ids
}

// checkConverged fails unless the live replicas agree on the committed
// order and state with nothing tentative.
func (e *interactionEnv) checkConverged(t *testing.T) {
	t.Helper()
	var b strings.Builder
	e.converged(&b)
	if !strings.HasPrefix(b.String(), "converged") {
		t.Fatal(b.String())
	}
	for _, id := range e.ids {
		if nd := e.nodes[id]; nd.rep != nil {
			if err := nd.rep.CheckInvariants(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestMembershipAddPromoteRemove adds a learner that catches up from the
// log, promotes it, removes a voter, and checks that every replica agrees
// on the membership, that gossip follows it, and that a removed id is
// refused for good.
func TestMembershipAddPromoteRemove(t *testing.T) {
	e := memberEnv(t)
	for i := range 10 {
		e.put(t, uint64(i%3+1), fmt.Sprintf("k%d", i%4), fmt.Sprint(i), i%2 == 0)
	}
	e.settle(t, 30)

	// Bad changes are refused and change nothing.
	for _, bad := range [][]MemberChange{
		{{Kind: AddVoter, ID: 2, Addr: "x:1"}}, // already a member
		{{Kind: AddLearner, ID: 4}},            // no address
		{{Kind: Promote, ID: 3}},               // not a learner
		{{Kind: Remove, ID: 9}},                // not a member
		{{Kind: Remove, ID: 1}, {Kind: Remove, ID: 2}, {Kind: Remove, ID: 3}},
	} {
		if err := e.nodes[1].rep.ProposeMembers(bad); !errors.Is(err, ErrBadMemberChange) {
			t.Errorf("ProposeMembers(%v) = %v, want ErrBadMemberChange", bad, err)
		}
	}
	if e.nodes[1].rep.HasReady() {
		t.Fatal("a refused change left something to do")
	}

	// Add replica 4 as a learner; it joins with empty storage and learns
	// the log (configuration included) from the leader.
	if err := e.nodes[2].rep.ProposeMembers([]MemberChange{{Kind: AddLearner, ID: 4, Addr: "host4:7104"}}); err != nil {
		t.Fatal(err)
	}
	e.join(t, 4)
	e.settle(t, 30)
	for _, id := range e.ids {
		ms := e.nodes[id].rep.Members()
		if !slices.Equal(memberIDs(ms), []uint64{1, 2, 3, 4}) || !ms[3].Learner || ms[3].Addr != "host4:7104" {
			t.Fatalf("replica %d members %+v, want 1-3 voters and learner 4 at host4:7104", id, ms)
		}
	}
	e.put(t, 4, "k9", "from4", true)
	e.settle(t, 30)
	e.checkConverged(t)

	// Promote 4, then remove 2; 2 learns it was removed.
	if err := e.nodes[1].rep.ProposeMembers([]MemberChange{{Kind: Promote, ID: 4}}); err != nil {
		t.Fatal(err)
	}
	e.settle(t, 10)
	if ms := e.nodes[3].rep.Members(); ms[3].Learner {
		t.Fatalf("4 still a learner: %+v", ms)
	}
	if err := e.nodes[1].rep.ProposeMembers([]MemberChange{{Kind: Remove, ID: 2}}); err != nil {
		t.Fatal(err)
	}
	e.settle(t, 10)
	if !e.nodes[2].rep.Removed() {
		t.Fatal("replica 2 does not know it was removed")
	}
	e.nodes[2].rep = nil // it stops
	e.ids = slices.DeleteFunc(e.ids, func(id uint64) bool { return id == 2 })
	for _, id := range e.ids {
		r := e.nodes[id].rep
		if got := memberIDs(r.Members()); !slices.Equal(got, []uint64{1, 3, 4}) {
			t.Fatalf("replica %d members %v, want [1 3 4]", id, got)
		}
		if got := r.RemovedIDs(); !slices.Equal(got, []uint64{2}) {
			t.Fatalf("replica %d removed %v, want [2]", id, got)
		}
	}
	// Gossip and anti-entropy go to members only.
	e.put(t, 3, "k1", "after", false)
	for range 3 {
		e.nodes[3].rep.Tick()
	}
	rd, err := e.nodes[3].rep.Ready()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range rd.Messages {
		if m.To == 2 {
			t.Fatalf("replica 3 sent %s to removed replica 2", m.Type)
		}
	}
	e.nodes[3].rep.Advance(rd)
	e.settle(t, 30)
	e.checkConverged(t)

	// Snapshots carry the membership beyond raft's ConfState.
	r1 := e.nodes[1].rep
	data, err := r1.snapshotData()
	if err != nil {
		t.Fatal(err)
	}
	sc, err := r1.decodeSnapshot(&raftpb.Snapshot{Data: data, Metadata: &raftpb.SnapshotMetadata{Index: proto.Uint64(r1.applied)}})
	if err != nil {
		t.Fatal(err)
	}
	if sc.members == nil || sc.members.addrs[4] != "host4:7104" || !sc.members.removed[2] || len(sc.members.removed) != 1 {
		t.Fatalf("snapshot membership %+v, want 4's address and 2 removed", sc.members)
	}

	// The snapshot restored into a new cluster whose configuration reuses
	// id 2 (snapshot restore): 2 is a member there, not a removed id.
	restored := raft.NewMemoryStorage()
	snap := &raftpb.Snapshot{Data: data, Metadata: &raftpb.SnapshotMetadata{Index: proto.Uint64(r1.applied), Term: proto.Uint64(1),
		ConfState: &raftpb.ConfState{Voters: []uint64{1, 2, 3}}}}
	if err := restored.ApplySnapshot(snap); err != nil {
		t.Fatal(err)
	}
	rcfg := e.tmpl
	rcfg.ID, rcfg.Peers, rcfg.Storage = 2, []uint64{1, 2, 3}, restored
	rcfg.Clock, rcfg.Rand = func() int64 { return 1e9 }, rand.New(rand.NewPCG(2, 7))
	if rr, err := New(rcfg); err != nil || len(rr.RemovedIDs()) != 0 || !slices.Equal(memberIDs(rr.Members()), []uint64{1, 2, 3}) {
		t.Fatalf("restoring as replica 2 of a new cluster: err %v", err)
	}

	// A removed id is never added again, and replica 2 cannot restart.
	err = e.nodes[1].rep.ProposeMembers([]MemberChange{{Kind: AddVoter, ID: 2, Addr: "host2:7102"}})
	if !errors.Is(err, ErrBadMemberChange) || !strings.Contains(err.Error(), "removed") {
		t.Fatalf("re-adding removed id 2: %v", err)
	}
	cfg := e.tmpl
	cfg.ID, cfg.Peers, cfg.Storage = 2, []uint64{1, 2, 3}, e.nodes[2].storage
	cfg.Clock, cfg.Rand = func() int64 { return 1e9 }, rand.New(rand.NewPCG(2, 9))
	if _, err := New(cfg); !errors.Is(err, ErrRemoved) {
		t.Fatalf("restarting removed replica 2: %v, want ErrRemoved", err)
	}
}

// TestMembershipReplaceThroughJointConsensus replaces replica 3 by replica
// 5 in one change (remove one voter, add another: joint consensus, which
// raft leaves on its own) while 3 is down.
func TestMembershipReplaceThroughJointConsensus(t *testing.T) {
	e := memberEnv(t)
	e.put(t, 3, "a", "1", false) // an operation of the origin that goes
	e.settle(t, 5)
	e.nodes[3].rep = nil // dead for good
	e.ids = []uint64{1, 2}
	e.put(t, 1, "b", "2", true)
	if err := e.nodes[1].rep.ProposeMembers([]MemberChange{{Kind: Remove, ID: 3}, {Kind: AddVoter, ID: 5, Addr: "host5:7105"}}); err != nil {
		t.Fatal(err)
	}
	e.join(t, 5)
	e.settle(t, 40)
	// The log holds the joint change (two changes) and then raft's own
	// entry that leaves the joint configuration (no change).
	st := e.nodes[1].storage
	first, _ := st.FirstIndex()
	last, _ := st.LastIndex()
	ents, err := st.Entries(first, last+1, math.MaxUint64)
	if err != nil {
		t.Fatal(err)
	}
	var changes []int
	for _, ent := range ents {
		if ent.GetType() == raftpb.EntryConfChangeV2 {
			var cc raftpb.ConfChangeV2
			if err := proto.Unmarshal(ent.GetData(), &cc); err != nil {
				t.Fatal(err)
			}
			changes = append(changes, len(cc.GetChanges()))
		}
	}
	if !slices.Equal(changes, []int{2, 0}) {
		t.Errorf("configuration entries with %v changes, want [2 0] (enter joint, leave joint)", changes)
	}
	for _, id := range e.ids {
		r := e.nodes[id].rep
		if r.Joint() || !slices.Equal(memberIDs(r.Members()), []uint64{1, 2, 5}) {
			t.Fatalf("replica %d: joint %v, members %v; want [1 2 5], not joint", id, r.Joint(), memberIDs(r.Members()))
		}
	}
	e.put(t, 5, "c", "3", true)
	e.settle(t, 30)
	e.checkConverged(t)
	for _, id := range e.ids {
		if got := e.nodes[id].rep.Stamp().CommittedCount; got != 3 {
			t.Fatalf("replica %d committed %d operations, want the three (3's included)", id, got)
		}
	}
}

// TestMembershipDepartedOriginCommits: an operation whose origin dies
// before any entry carries it, known to the others only through gossip,
// is committed by them after the origin is removed, and a replica added
// afterwards receives it with the rest: version vectors keep the departed
// origin's entry.
func TestMembershipDepartedOriginCommits(t *testing.T) {
	e := memberEnv(t)
	e.put(t, 3, "x", "from3", false)
	n3 := e.nodes[3]
	e.processReady(t, n3, &strings.Builder{})
	// Deliver 3's gossip only, then 3 dies without a single entry out.
	for _, id := range []uint64{1, 2} {
		e.deliver(e.nodes[id], MsgOps, 3, false, &strings.Builder{})
	}
	n3.rep = nil
	e.ids = []uint64{1, 2}
	for _, id := range e.ids {
		if got := e.nodes[id].rep.Tentative(); len(got) != 1 || got[0].Origin != 3 {
			t.Fatalf("replica %d tentative %v, want 3's operation", id, got)
		}
	}
	if err := e.nodes[1].rep.ProposeMembers([]MemberChange{{Kind: Remove, ID: 3}}); err != nil {
		t.Fatal(err)
	}
	e.settle(t, 40) // 4*NoopTicks: the others commit what 3 left
	if err := e.nodes[2].rep.ProposeMembers([]MemberChange{{Kind: AddVoter, ID: 6, Addr: "host6:1"}}); err != nil {
		t.Fatal(err)
	}
	e.join(t, 6)
	e.settle(t, 40)
	e.checkConverged(t)
	for _, id := range e.ids {
		r := e.nodes[id].rep
		if r.Stamp().CommittedCount != 1 || r.Stamp().VV[3] != 1 {
			t.Fatalf("replica %d: %d committed, vv %v; want 3's operation committed", id, r.Stamp().CommittedCount, r.Stamp().VV)
		}
		var res state.Result
		r.withCommitted(func(st *state.State) { res, _ = st.Apply(state.Op{Kind: state.OpGet, Key: "x"}) })
		if string(res.Value) != "from3" {
			t.Fatalf("replica %d: x = %q, want from3", id, res.Value)
		}
	}
}
