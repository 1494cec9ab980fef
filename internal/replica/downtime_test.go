package replica

import (
	"fmt"
	"slices"
	"testing"

	"github.com/correctables/correctables/internal/state"
)

// tickDown ticks every replica but down and delivers what follows, losing
// every message to or from down (a replica that is down), and the raft
// messages to or from slow (a replica whose link to the leader is still
// being re-established).
func (tr *trio) tickDown(down, slow uint64) {
	tr.t.Helper()
	for id := uint64(1); id <= 3; id++ {
		if id != down {
			tr.r[id].Tick()
			tr.mustDrive(id)
		}
	}
	for len(tr.q) > 0 {
		m := tr.q[0]
		tr.q = tr.q[1:]
		if m.To == down || m.From == down || (m.Type == MsgRaft && (m.To == slow || m.From == slow)) {
			continue
		}
		_ = tr.r[m.To].Step(m)
		tr.mustDrive(m.To)
	}
}

// A replica that was down while the others took many weak updates of one
// key catches up in work linear in what it missed. The answers to its
// anti-entropy used to carry the missing operations origin by origin: each
// later origin's run went under what it had placed already, and every
// answer rolled back and executed again all it had received so far (a
// restarted replica of the kill soak, weak appends to one key, 10 s down,
// spent over 30 s so and answered no client meanwhile). Now an answer
// merges the origins' runs in timestamp order (Creek §3.2): each operation
// goes on top, executed once.
func TestCatchUpAfterDowntimeIsLinear(t *testing.T) {
	tr := newTrio(t, nil)
	tr.elect()
	// Replica 3 must not lead: it goes down.
	if tr.r[1].Leader() == 3 {
		tr.r[3].TransferLeadership(1)
		for i := 0; tr.r[1].Leader() == 3 || tr.r[3].Leader() == 3; i++ {
			if i > 1000 {
				t.Fatal("leadership not transferred after 1000 ticks")
			}
			tr.tick()
		}
	}
	const n = 2000 // updates per live replica
	seq := map[uint64]uint64{}
	for i := range n {
		for _, id := range []uint64{1, 2} {
			seq[id]++
			if err := tr.r[id].Submit(ClientRequest{Client: id, Seq: seq[id], Want: WantTentative,
				Op: state.Op{Kind: state.OpAppend, Key: "w", Value: fmt.Appendf(nil, "%d.%d;", id, i)}}); err != nil {
				t.Fatal(err)
			}
			tr.mustDrive(id)
		}
		tr.tickDown(3, 0)
	}
	for i := 0; tr.r[1].TentativeLen() > 0 || tr.r[2].TentativeLen() > 0; i++ {
		if i > 5000 {
			t.Fatalf("replicas 1 and 2 hold %d and %d tentative operations after 5000 ticks", tr.r[1].TentativeLen(), tr.r[2].TentativeLen())
		}
		tr.tickDown(3, 0)
	}
	want := len(tr.r[1].Committed())
	before := tr.r[3].Stats().Executions
	// Back up: for a while the leader's messages do not reach it yet (the
	// others' connections to it back off while it was down), gossip does.
	for range 100 {
		tr.tickDown(0, 3)
	}
	for i := 0; len(tr.r[3].Committed()) < want || tr.r[3].TentativeLen() > 0; i++ {
		if i > 5000 {
			t.Fatalf("replica 3 has %d of %d committed operations (%d tentative) after 5000 ticks", len(tr.r[3].Committed()), want, tr.r[3].TentativeLen())
		}
		tr.tick()
	}
	if got, wantState := tr.r[3].CommittedStateHash(), tr.r[1].CommittedStateHash(); got != wantState {
		t.Fatalf("replica 3's committed state %x, replica 1's %x", got, wantState)
	}
	execs := tr.r[3].Stats().Executions - before
	t.Logf("replica 3 caught up on %d operations with %d executions", want, execs)
	if execs > 3*want {
		t.Fatalf("replica 3 executed %d operations to catch up on %d: more than 3 per operation", execs, want)
	}
}

// answersTo returns the operations of r's answers to peer's anti-entropy
// message with version vector vv, as if nothing had been sent to it
// recently.
func answersTo(r *Replica, peer uint64, vv VV) []OpID {
	r.out.Messages = nil
	delete(r.gossipSent, peer)
	r.answerSync(Message{Type: MsgSync, From: peer, To: r.cfg.ID, VV: vv})
	var ids []OpID
	for _, m := range r.out.Messages {
		if m.Type == MsgOps && m.To == peer {
			for _, q := range m.Ops {
				ids = append(ids, q.ID)
			}
		}
	}
	r.out.Messages = nil
	return ids
}

// Anti-entropy answers carry the origins' operations merged in timestamp
// order, and nothing to a peer that lacks operations the answering replica
// has forgotten after a snapshot: those come from the log or a snapshot
// first. A restarted replica of the kill soak was sent the whole run of an
// origin the answering replica still held, with another origin's run
// behind a gap (refused), and then rolled the first back under every
// answer that brought the second: 3,000 operations executed again per
// answer, for seconds.
func TestAntiEntropyAnswers(t *testing.T) {
	r := loneReplica(t)
	// Origins 2 and 3, interleaved in time: 2.s at 10s, 3.s at 10s+5.
	for s := uint64(1); s <= 6; s++ {
		for _, o := range []uint64{2, 3} {
			q := &Req{ID: OpID{o, s}, TS: 2e12 + 10*s + 5*(o-2), Op: state.Op{Kind: state.OpAppend, Key: "k", Value: []byte("x")}}
			if _, ok := r.receive(q); !ok {
				t.Fatalf("%v not received", q.ID)
			}
		}
	}
	got := answersTo(r, 2, VV{2: 6, 3: 2})
	want := []OpID{{3, 3}, {3, 4}, {3, 5}, {3, 6}}
	if !slices.Equal(got, want) {
		t.Fatalf("answer to a peer lacking 3.3-3.6: %v, want %v", got, want)
	}
	got = answersTo(r, 3, VV{2: 1, 3: 0})
	want = []OpID{{3, 1}, {2, 2}, {3, 2}, {2, 3}, {3, 3}, {2, 4}, {3, 4}, {2, 5}, {3, 5}, {2, 6}, {3, 6}}
	if !slices.Equal(got, want) {
		t.Fatalf("answer to a peer lacking most: %v, want %v (timestamp order)", got, want)
	}
	// Forget origin 2's first three (as a snapshot does with committed
	// operations): a peer below them gets nothing.
	r.log[2], r.logBase[2] = r.log[2][3:], 3
	if got := answersTo(r, 3, VV{2: 1, 3: 0}); len(got) != 0 {
		t.Fatalf("answer to a peer lacking forgotten operations: %v, want none", got)
	}
	got = answersTo(r, 3, VV{2: 3, 3: 0})
	want = []OpID{{3, 1}, {3, 2}, {3, 3}, {2, 4}, {3, 4}, {2, 5}, {3, 5}, {2, 6}, {3, 6}}
	if !slices.Equal(got, want) {
		t.Fatalf("answer to a peer at the forgotten ones: %v, want %v", got, want)
	}
}
