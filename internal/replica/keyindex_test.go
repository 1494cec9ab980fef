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
		x.push(q)
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
