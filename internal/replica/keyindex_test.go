package replica

import (
	"fmt"
	"testing"

	"github.com/correctables/correctables/internal/state"
)

// The key index keeps the lists of keys that emptied (most come back), but
// not without bound: past minShed empty lists and as many as it holds live
// ones, it sheds them. Operations on ever new keys (the keys of a uniform
// workload over millions) must not grow it.
func TestKeyIndexShedsEmptyLists(t *testing.T) {
	var x keyIndex
	x.reset()
	put := func(i int) *Req {
		return &Req{ID: OpID{1, uint64(i + 1)}, Op: state.Op{Kind: state.OpPut, Key: fmt.Sprint("k", i), Value: []byte("v")}}
	}
	const live, total = 100, 20000
	var window []*Req
	for i := range total {
		q := put(i)
		x.push(q, len(window))
		window = append(window, q)
		if len(window) > live {
			x.dropBottom(window[0])
			window = window[1:]
		}
		if n := len(x.pos); n > 2*minShed+2*live+1 {
			t.Fatalf("after %d operations on distinct keys, %d live: the index holds %d lists (%d empty)", i+1, len(window), n, x.empty)
		}
	}
	empty := 0
	for _, p := range x.pos {
		if len(*p) == 0 {
			empty++
		}
	}
	if empty != x.empty || len(x.pos)-empty != live {
		t.Fatalf("index holds %d lists, %d empty (counted %d); want %d live", len(x.pos), empty, x.empty, live)
	}
	for _, q := range window {
		if got := x.slots(q.footprint()[0]); len(got) != 1 || got[0] != x.at[q.ID] {
			t.Fatalf("%v: slots %v, at %d", q.ID, got, x.at[q.ID])
		}
	}
}

// A replica that commits nothing while gossip keeps bringing operations
// older than what its stack holds rolls back and executes again and
// again: every execution takes a slot, and the key index's positions
// (keyIndex.abs) must not grow with the executions, only with the stack
// (compactIndex).
func TestKeyIndexBoundedWithoutCommits(t *testing.T) {
	r := loneReplica(t)
	var ops []*Req
	for s := uint64(1); s <= 200; s++ {
		ops = append(ops, &Req{ID: OpID{2, s}, TS: 3e12 + 10*s, Op: state.Op{Kind: state.OpPut, Key: fmt.Sprint("k", s%50), Value: []byte("t")}})
	}
	if err := r.Step(Message{Type: MsgOps, From: 2, To: 1, Ops: ops}); err != nil {
		t.Fatal(err)
	}
	execs := r.stats.Executions
	for s := uint64(1); s <= 2000; s++ {
		// Each older than the whole stack, on a key of it: a rollback of
		// what follows on that key.
		q := &Req{ID: OpID{3, s}, TS: 1e12 + s, Op: state.Op{Kind: state.OpPut, Key: fmt.Sprint("k", s%50), Value: []byte("c")}}
		if err := r.Step(Message{Type: MsgOps, From: 3, To: 1, Ops: []*Req{q}}); err != nil {
			t.Fatal(err)
		}
		if n, max := len(r.keys.abs), 2*len(r.tentative)+1024+1; n > max {
			t.Fatalf("after %d messages: %d positions for a stack of %d", s, n, len(r.tentative))
		}
	}
	if err := r.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	if again := r.stats.Executions - execs - 2000; again < 5000 {
		t.Fatalf("only %d executions again: the test does not roll back enough to need compaction", again)
	}
}
