package replica

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/correctables/correctables/internal/state"
)

// tickExcept ticks every replica and delivers what follows, dropping the
// messages drop selects.
func (tr *trio) tickExcept(drop func(Message) bool) {
	tr.t.Helper()
	for id := uint64(1); id <= 3; id++ {
		tr.r[id].Tick()
		tr.mustDrive(id)
	}
	for len(tr.q) > 0 {
		m := tr.q[0]
		tr.q = tr.q[1:]
		if drop(m) {
			continue
		}
		_ = tr.r[m.To].Step(m)
		tr.mustDrive(m.To)
	}
}

// drainSetup elects a leader and has a follower x accept n weak puts,
// acknowledged (preliminary view) and gossiped to nobody: every message
// from x but raft's is dropped (gossip and the answers to anti-entropy),
// and the no-op period is too long to commit them.
func drainSetup(t *testing.T, n int, leader bool) (tr *trio, x, remover uint64, noGossip func(Message) bool) {
	tr = newTrio(t, func(c *Config) { c.NoopTicks = 1 << 30 })
	tr.elect()
	remover = tr.r[1].Leader()
	x = remover%3 + 1
	if leader {
		x, remover = remover, x
	}
	noGossip = func(m Message) bool { return m.From == x && m.Type != MsgRaft }
	for i := range n {
		if err := tr.r[x].Submit(ClientRequest{Client: 1, Seq: uint64(i + 1), Want: WantTentative,
			Op: state.Op{Kind: state.OpPut, Key: fmt.Sprint("k", i), Value: []byte("v")}}); err != nil {
			t.Fatal(err)
		}
		tr.mustDrive(x)
	}
	for range 20 {
		tr.tickExcept(noGossip)
	}
	for id := uint64(1); id <= 3; id++ {
		if id != x && tr.r[id].vv[x] != 0 {
			t.Fatalf("replica %d received %d operations of %d: the test's gossip cut does not hold", id, tr.r[id].vv[x], x)
		}
	}
	return tr, x, remover, noGossip
}

// removeX proposes the removal of x at remover until every replica but x
// has applied it.
func removeX(t *testing.T, tr *trio, x, remover uint64, drop func(Message) bool) {
	t.Helper()
	for i := 0; ; i++ {
		if i > 3000 {
			t.Fatalf("replica %d not removed after 3000 ticks", x)
		}
		done := true
		for id := uint64(1); id <= 3; id++ {
			if id != x && !tr.r[id].removedIDs[x] {
				done = false
			}
		}
		if done {
			return
		}
		if i%50 == 0 {
			if err := tr.r[remover].ProposeMembers([]MemberChange{{Kind: Remove, ID: x}}); err != nil && !errors.Is(err, ErrMemberChangePending) {
				t.Fatal(err)
			}
		}
		tr.tickExcept(drop)
	}
}

// A replica removed while it runs, holding weak operations it acknowledged
// and gossiped to nobody, loses none of them when it is drained first:
// the drain marker makes it refuse new operations and propose what it
// holds, and its "drained" marker, applied by the remover before it
// proposes the removal, says that all of them are committed. Without the
// drain (the control), the removal loses them: the test's setup is one
// where the drain is what saves them.
func TestDrainBeforeRemoveCommitsUngossipedWeakWrites(t *testing.T) {
	for _, leader := range []bool{false, true} {
		t.Run(fmt.Sprintf("leader=%v", leader), func(t *testing.T) { testDrainBeforeRemove(t, leader) })
	}
}

// testDrainBeforeRemove removes a follower, or the leader.
func testDrainBeforeRemove(t *testing.T, leader bool) {
	const n = 40
	t.Run("control: removed without drain", func(t *testing.T) {
		tr, x, remover, noGossip := drainSetup(t, n, leader)
		removeX(t, tr, x, remover, noGossip)
		for range 100 {
			tr.tickExcept(noGossip)
		}
		if got := tr.r[remover].committedVV[x]; got == n {
			t.Fatalf("all %d weak writes of %d committed without a drain: the setup does not expose the loss", n, x)
		}
	})
	tr, x, remover, noGossip := drainSetup(t, n, leader)
	for i := 0; !tr.r[remover].Drained(x); i++ {
		if i > 3000 {
			t.Fatalf("replica %d not drained after 3000 ticks (draining %v, committed %d of %d)",
				x, tr.r[remover].Draining(x), tr.r[remover].committedVV[x], n)
		}
		if i%50 == 0 {
			if err := tr.r[remover].ProposeDrain(x); err != nil {
				t.Fatal(err)
			}
		}
		tr.tickExcept(noGossip)
	}
	if err := tr.r[x].Submit(ClientRequest{Client: 2, Seq: 1, Want: WantTentative,
		Op: state.Op{Kind: state.OpPut, Key: "late", Value: []byte("v")}}); !errors.Is(err, ErrDraining) {
		t.Fatalf("a draining replica accepted a client operation: %v", err)
	}
	if err := tr.r[remover].Submit(ClientRequest{Client: 2, Seq: 1, Want: WantTentative,
		Op: state.Op{Kind: state.OpPut, Key: "late", Value: []byte("v")}}); err != nil {
		t.Fatalf("a replica that is not draining refused a client operation: %v", err)
	}
	removeX(t, tr, x, remover, noGossip)
	for range 100 {
		tr.tickExcept(noGossip)
	}
	for id := uint64(1); id <= 3; id++ {
		if id == x {
			continue
		}
		if got := tr.r[id].committedVV[x]; got != n {
			t.Errorf("replica %d committed %d of the %d weak writes of removed replica %d", id, got, n, x)
		}
		if tr.r[id].Draining(x) || tr.r[id].Drained(x) {
			t.Errorf("replica %d still lists removed replica %d as draining", id, x)
		}
	}
}

// The drain state is replicated state: a snapshot carries it (version 5),
// and a snapshot of version 4, which had none, still restores.
func TestDrainStateInSnapshots(t *testing.T) {
	tr := newTrio(t, nil)
	for i := 0; tr.r[1].Leader() == 0; i++ {
		if i > 1000 {
			t.Fatal("no leader after 1000 ticks")
		}
		tr.tick()
	}
	r := tr.r[1]
	r.drain = drainState{draining: map[uint64]bool{2: true, 3: true}, drained: map[uint64]bool{3: true}}
	data, err := r.snapshotData()
	if err != nil {
		t.Fatal(err)
	}
	d := decoder{b: data}
	if v := d.byte(); v != 5 {
		t.Fatalf("snapshot version %d, want 5", v)
	}
	sc, err := tr.r[2].decodeSnapshot(snapFor(r, data))
	if err != nil {
		t.Fatal(err)
	}
	tr.r[2].installDrain(sc.draining, sc.drained)
	if !tr.r[2].Draining(2) || !tr.r[2].Draining(3) || tr.r[2].Drained(2) || !tr.r[2].Drained(3) {
		t.Fatalf("drain state after the snapshot: draining %v drained %v", sc.draining, sc.drained)
	}
	if err := tr.r[2].Submit(ClientRequest{Client: 1, Seq: 1, Want: WantTentative,
		Op: state.Op{Kind: state.OpPut, Key: "k", Value: []byte("v")}}); !errors.Is(err, ErrDraining) {
		t.Fatalf("replica 2, draining by its snapshot, accepted a client operation: %v", err)
	}
	// A backup (restored into a new cluster) leaves the drain state out.
	bk, err := r.Backup()
	if err != nil {
		t.Fatal(err)
	}
	sc, err = tr.r[3].decodeSnapshot(bk)
	if err != nil {
		t.Fatal(err)
	}
	if len(sc.draining) != 0 || len(sc.drained) != 0 {
		t.Fatalf("backup: draining %v drained %v, want none", sc.draining, sc.drained)
	}
	// Version 4: the same bytes without the drain state.
	r.drain = drainState{}
	v4, err := r.snapshotData()
	if err != nil {
		t.Fatal(err)
	}
	v4 = v4[:len(v4)-2] // the two empty drain sets
	v4[0] = 4
	sc, err = tr.r[3].decodeSnapshot(snapFor(r, v4))
	if err != nil {
		t.Fatalf("a version-4 snapshot does not restore: %v", err)
	}
	if sc.draining != nil || sc.members == nil {
		t.Fatalf("version-4 snapshot decoded with drain state %v, members %v", sc.draining, sc.members)
	}
}

// snapFor wraps snapshot data of r as raft's snapshot at r's applied index.
func snapFor(r *Replica, data []byte) *raftpb.Snapshot {
	return &raftpb.Snapshot{Data: data, Metadata: &raftpb.SnapshotMetadata{Index: proto.Uint64(r.applied), ConfState: r.confState}}
}

// A replica that restarts while it drains goes on draining: the state
// comes from the log it replays. Here replica x applies its drain marker
// while everything it sends is lost (it proposes nothing that arrives),
// restarts from its storage and its persisted own operations, and then
// drains: every one of its weak writes is committed at the others.
func TestDrainSurvivesRestart(t *testing.T) {
	const n = 30
	tr, x, remover, noGossip := drainSetup(t, n, false)
	fromX := func(m Message) bool { return m.From == x }
	for i := 0; !tr.r[x].Draining(x); i++ {
		if i > 3000 {
			t.Fatalf("replica %d has not applied its drain marker after 3000 ticks", x)
		}
		if i%50 == 0 {
			if err := tr.r[remover].ProposeDrain(x); err != nil {
				t.Fatal(err)
			}
		}
		tr.tickExcept(fromX)
	}
	if got := tr.r[remover].committedVV[x]; got != 0 {
		t.Fatalf("%d operations of replica %d committed while everything it sends is lost", got, x)
	}
	own := tr.ops(x, n)
	old := tr.r[x]
	cfg := old.cfg
	cfg.OwnOps = own
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tr.r[x] = r
	if !r.Draining(x) {
		t.Fatalf("replica %d restarted without its drain state (applied %d)", x, r.applied)
	}
	if err := r.Submit(ClientRequest{Client: 2, Seq: 1, Want: WantTentative,
		Op: state.Op{Kind: state.OpPut, Key: "late", Value: []byte("v")}}); !errors.Is(err, ErrDraining) {
		t.Fatalf("replica %d, draining after its restart, accepted a client operation: %v", x, err)
	}
	for i := 0; !tr.r[remover].Drained(x); i++ {
		if i > 3000 {
			t.Fatalf("replica %d not drained after 3000 ticks (committed %d of %d)", x, tr.r[remover].committedVV[x], n)
		}
		tr.tickExcept(noGossip)
	}
	removeX(t, tr, x, remover, noGossip)
	for id := uint64(1); id <= 3; id++ {
		if got := tr.r[id].committedVV[x]; id != x && got != n {
			t.Errorf("replica %d committed %d of the %d weak writes of removed replica %d", id, got, n, x)
		}
	}
}

// A removal checked while the configuration is joint (a replacement that
// cannot leave it: a voter of the new half died) is refused with
// ErrMemberChangePending by CheckMembers, as ProposeMembers would refuse
// it, so the server does not drain a replica for a change it cannot make
// (the replica would refuse its clients until some later removal).
func TestCheckMembersRefusesWhileJoint(t *testing.T) {
	e := memberEnv(t)
	e.put(t, 1, "a", "1", true)
	e.settle(t, 5)
	e.nodes[3].rep = nil // dead for good
	e.ids = []uint64{1, 2}
	if err := e.nodes[1].rep.CheckMembers([]MemberChange{{Kind: Remove, ID: 2}}); err != nil {
		t.Fatalf("removal of 2 checked before any change: %v", err)
	}
	if err := e.nodes[1].rep.ProposeMembers([]MemberChange{{Kind: Remove, ID: 3}, {Kind: AddVoter, ID: 5, Addr: "host5:7105"}}); err != nil {
		t.Fatal(err)
	}
	// Step until replica 1 is in the joint configuration, then kill 2: the
	// entry that leaves it cannot commit (5 never starts).
	e.nodes[5] = &interactionNode{id: 5} // down: what is sent to it is dropped
	var b strings.Builder
	for i := 0; !e.nodes[1].rep.Joint(); i++ {
		if i > 1000 {
			t.Fatal("replica 1 never entered the joint configuration")
		}
		for _, id := range e.ids {
			if n := e.nodes[id]; n.rep != nil && n.rep.HasReady() {
				e.processReady(t, n, &b)
			}
		}
		for _, id := range e.ids {
			e.deliver(e.nodes[id], 0, 0, false, &b)
		}
	}
	e.nodes[2].rep = nil
	e.ids = []uint64{1}
	e.settle(t, 20)
	r := e.nodes[1].rep
	if !r.Joint() {
		t.Fatal("replica 1 left the joint configuration without replica 2")
	}
	if err := r.CheckMembers([]MemberChange{{Kind: Remove, ID: 2}}); !errors.Is(err, ErrMemberChangePending) {
		t.Fatalf("removal of 2 checked while joint: %v, want ErrMemberChangePending", err)
	}
	if err := r.ProposeMembers([]MemberChange{{Kind: Remove, ID: 2}}); !errors.Is(err, ErrMemberChangePending) {
		t.Fatalf("removal of 2 proposed while joint: %v, want ErrMemberChangePending", err)
	}
}
