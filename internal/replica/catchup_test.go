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
	r, err := New(Config{ID: 1, Peers: []uint64{1, 2, 3}, Storage: raft.NewMemoryStorage(),
		Clock: func() int64 { return 1e12 }, Rand: rand.New(rand.NewPCG(1, 1)), SnapshotEntries: -1})
	if err != nil {
		t.Fatal(err)
	}
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

func repeat(s string, n int) string {
	out := ""
	for range n {
		out += s
	}
	return out
}
