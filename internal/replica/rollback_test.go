package replica

import (
	"fmt"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/correctables/correctables/internal/state"
)

// TestRollbacksOnlyWhereNecessary (Creek §4.4): an operation placed under
// tentative ones, or committed ahead of them, rolls back and executes again
// only what touches its keys (and, above that, what touches theirs), not
// everything above the first conflict. The stack holds appends to 100 keys
// from replica 2, a transaction on two of them (k10 and k60, so that what
// follows it on k60 goes too), and a newer append to k10; an older
// operation on k10 comes by gossip, then one on k20 by the log. Rolling
// back from the first conflict up, as the stack did before, undid about a
// hundred operations each time.
func TestRollbacksOnlyWhereNecessary(t *testing.T) {
	const keys = 100
	r := loneReplica(t)
	seq := uint64(0)
	put := func(key, v string) *Req {
		seq++
		return &Req{ID: OpID{2, seq}, TS: 3e12 + seq, Op: state.Op{Kind: state.OpAppend, Key: key, Value: []byte(v)}}
	}
	var ops []*Req
	for i := range keys {
		ops = append(ops, put(fmt.Sprint("k", i), "t"))
	}
	seq++
	ops = append(ops, &Req{ID: OpID{2, seq}, TS: 3e12 + seq, Op: state.Op{Kind: state.OpTxn, Txn: &state.Txn{
		Guards: []state.Guard{{Key: "k10", Cmp: state.CmpExists}},
		Then:   []state.Write{{Key: "k10", Value: []byte("x")}, {Key: "k60", Value: []byte("x")}}}}})
	ops = append(ops, put("k60", "y"), put("k10", "z"))
	if err := r.Step(Message{Type: MsgOps, From: 2, To: 1, Ops: ops}); err != nil {
		t.Fatal(err)
	}
	check := func(step string, wantRollbacks int, before Stats) {
		t.Helper()
		if err := r.CheckInvariants(); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		rb, ex := r.stats.Rollbacks-before.Rollbacks, r.stats.Executions-before.Executions
		t.Logf("%s: %d rollbacks, %d executions", step, rb, ex)
		if rb != wantRollbacks {
			t.Errorf("%s: %d rollbacks, want %d", step, rb, wantRollbacks)
		}
	}
	// By gossip, under all of them: an older append to k10. Back: k10's
	// append, the transaction, k60's append after it (on a key of the
	// transaction), the newer k10 append. Not k11..k99 nor k60's first.
	before := r.stats
	old := &Req{ID: OpID{3, 1}, TS: 2e12, Op: state.Op{Kind: state.OpAppend, Key: "k10", Value: []byte("o")}}
	if err := r.Step(Message{Type: MsgOps, From: 3, To: 1, Ops: []*Req{old}}); err != nil {
		t.Fatal(err)
	}
	check("gossip on k10", 4, before)
	// By the log, never gossiped here: an older append of replica 3 to k20,
	// committed, so ahead of every tentative one. Back: k20's append only.
	before = r.stats
	q := &Req{ID: OpID{3, 2}, TS: 2e12 + 1, Op: state.Op{Kind: state.OpAppend, Key: "k20", Value: []byte("c")}}
	ent := &raftpb.Entry{Term: proto.Uint64(1), Index: proto.Uint64(r.applied + 1), Type: raftpb.EntryNormal.Enum(),
		Data: encodeEntry(entry{Proposer: 3, Ops: []*Req{old, q}})}
	if err := r.applyEntries([]*raftpb.Entry{ent}); err != nil {
		t.Fatal(err)
	}
	// old was executed below everything it conflicts with and q only
	// precedes k20's append: one rollback.
	check("commit on k20", 1, before)
	for key, want := range map[string]string{"k10": "xz", "k60": "xy", "k20": "ct", "k99": "t"} {
		res, _ := r.st.Apply(state.Op{Kind: state.OpGet, Key: key})
		if string(res.Value) != want {
			t.Errorf("%s = %q, want %q", key, res.Value, want)
		}
	}
}

// BenchmarkCommitOnAHotKey: committed operations stay in the stack while a
// tentative one lies below them (here an operation on another key that has
// not committed), and every later commit on the same key walked them all
// for each operation it committed: quadratic in that backlog. 2,000 writes
// to one key above one pending operation, committed 100 to an entry.
func BenchmarkCommitOnAHotKey(b *testing.B) {
	const n, perEntry = 2000, 100
	for b.Loop() {
		b.StopTimer()
		r := loneReplica(b)
		pending := &Req{ID: OpID{3, 1}, TS: 1e12, Op: state.Op{Kind: state.OpPut, Key: "other", Value: []byte("p")}}
		if _, ok := r.receive(pending); !ok {
			b.Fatal("not received")
		}
		var ops []*Req
		for s := uint64(1); s <= n; s++ {
			q := &Req{ID: OpID{2, s}, TS: 2e12 + s, Op: state.Op{Kind: state.OpAppend, Key: "hot", Value: []byte("x")}}
			if _, ok := r.receive(q); !ok {
				b.Fatal("not received")
			}
			ops = append(ops, q)
		}
		var ents []*raftpb.Entry
		for i := 0; i < n; i += perEntry {
			ents = append(ents, &raftpb.Entry{Term: proto.Uint64(1), Index: proto.Uint64(r.applied + uint64(len(ents)) + 1),
				Type: raftpb.EntryNormal.Enum(), Data: encodeEntry(entry{Proposer: 2, Ops: ops[i : i+perEntry]})})
		}
		b.StartTimer()
		for _, e := range ents { // one Ready each
			if err := r.applyEntries([]*raftpb.Entry{e}); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		if got := r.committedCount(); got != n {
			b.Fatalf("committed %d, want %d", got, n)
		}
		b.StartTimer()
	}
}
