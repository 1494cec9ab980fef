package replica

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/correctables/correctables/internal/state"
)

// TestCatchUpAdjustsExecutionOncePerReady: a replica that catches up (a
// restarted one, in the e2e soak) applies many committed entries in one
// Ready while its stack holds the newer operations gossip brought on the
// same key. The operations the entries commit were never executed here and
// precede every tentative one, so the tentative ones are rolled back and
// executed again after them: once for the whole run of entries, not once
// per entry. Per entry, 50 entries under 200 tentative appends cost 10,000
// executions and rollbacks (a restarted replica of the soak spent seconds
// per Ready so, answering no client); once, about 450.
func TestCatchUpAdjustsExecutionOncePerReady(t *testing.T) {
	const tentative, entries = 200, 50
	r := loneReplica(t)
	// Gossip from replica 2: appends to k, newer than what the log brings.
	for s := uint64(1); s <= tentative; s++ {
		q := &Req{ID: OpID{2, s}, TS: 3e12 + s, Op: state.Op{Kind: state.OpAppend, Key: "k", Value: []byte("t")}}
		if _, ok := r.receive(q); !ok {
			t.Fatalf("gossip %v not received", q.ID)
		}
	}
	// The log: one append of replica 3 per entry, older, never gossiped here.
	var ents []*raftpb.Entry
	for s := uint64(1); s <= entries; s++ {
		q := &Req{ID: OpID{3, s}, TS: 2e12 + s, Op: state.Op{Kind: state.OpAppend, Key: "k", Value: []byte("c")}}
		ents = append(ents, &raftpb.Entry{Term: proto.Uint64(1), Index: proto.Uint64(r.applied + s), Type: raftpb.EntryNormal.Enum(),
			Data: encodeEntry(entry{Proposer: 3, Ops: []*Req{q}})})
	}
	before := r.stats
	if err := r.applyEntries(ents); err != nil {
		t.Fatal(err)
	}
	execs, rollbacks := r.stats.Executions-before.Executions, r.stats.Rollbacks-before.Rollbacks
	t.Logf("%d entries under %d tentative operations: %d executions, %d rollbacks", entries, tentative, execs, rollbacks)
	if limit := 2 * (tentative + entries); execs > limit || rollbacks > limit {
		t.Errorf("%d executions and %d rollbacks for %d entries under %d tentative operations, want at most %d each: execution adjusted per entry",
			execs, rollbacks, entries, tentative, limit)
	}
	// The order is the same as entry by entry: the committed appends, then
	// the tentative ones.
	if got := r.committedCount(); got != entries {
		t.Errorf("committed %d operations, want %d", got, entries)
	}
	if got := r.TentativeLen(); got != tentative {
		t.Errorf("%d tentative operations, want %d", got, tentative)
	}
	res, _ := r.st.Apply(state.Op{Kind: state.OpGet, Key: "k"})
	want := fmt.Sprintf("%s%s", repeat("c", entries), repeat("t", tentative))
	if string(res.Value) != want {
		t.Errorf("k = %q, want %q", res.Value, want)
	}
}

// loneReplica is replica 1 of three on memory storage, its peers absent,
// its clock fixed and snapshots off: for tests that feed it messages and
// entries by hand.
func loneReplica(tb testing.TB) *Replica {
	tb.Helper()
	r, err := New(Config{ID: 1, Peers: []uint64{1, 2, 3}, Storage: raft.NewMemoryStorage(),
		Clock: func() int64 { return 1e12 }, Rand: rand.New(rand.NewPCG(1, 1)), SnapshotEntries: -1})
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

func repeat(s string, n int) string {
	out := ""
	for range n {
		out += s
	}
	return out
}

// TestGossipPlacesAMessageOnce: anti-entropy brings a restarted replica,
// whose stack holds the newer operations pushed to it since, many older
// operations on the same key in one message. They are placed together: the
// newer ones are rolled back and executed again once for the message, not
// once per operation (50 under 200: 10,050 executions one by one; a
// restarted replica of the e2e soak spent seconds per message so).
func TestGossipPlacesAMessageOnce(t *testing.T) {
	const tentative, older = 200, 50
	r := loneReplica(t)
	var newer, old []*Req
	for s := uint64(1); s <= tentative; s++ {
		newer = append(newer, &Req{ID: OpID{2, s}, TS: 3e12 + s, Op: state.Op{Kind: state.OpAppend, Key: "k", Value: []byte("t")}})
	}
	for s := uint64(1); s <= older; s++ {
		old = append(old, &Req{ID: OpID{3, s}, TS: 2e12 + s, Op: state.Op{Kind: state.OpAppend, Key: "k", Value: []byte("c")}})
	}
	if err := r.Step(Message{Type: MsgOps, From: 2, To: 1, Ops: newer}); err != nil {
		t.Fatal(err)
	}
	before := r.stats
	if err := r.Step(Message{Type: MsgOps, From: 3, To: 1, Ops: old}); err != nil {
		t.Fatal(err)
	}
	execs, rollbacks := r.stats.Executions-before.Executions, r.stats.Rollbacks-before.Rollbacks
	t.Logf("%d older operations under %d tentative ones: %d executions, %d rollbacks", older, tentative, execs, rollbacks)
	if limit := 2 * (tentative + older); execs > limit || rollbacks > limit {
		t.Errorf("%d executions and %d rollbacks, want at most %d each: placed one by one", execs, rollbacks, limit)
	}
	if got := r.TentativeLen(); got != tentative+older {
		t.Errorf("%d tentative operations, want %d", got, tentative+older)
	}
	res, _ := r.st.Apply(state.Op{Kind: state.OpGet, Key: "k"})
	if want := repeat("c", older) + repeat("t", tentative); string(res.Value) != want {
		t.Errorf("k = %q, want %q", res.Value, want)
	}
}
