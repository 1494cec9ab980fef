package sim

import (
	"testing"

	"github.com/correctables/correctables/internal/history"
	"github.com/correctables/correctables/internal/state"
)

// The durability check allows the loss of a removed origin's weak writes
// only when its removal went ahead without a confirmed drain; a drained
// origin's acknowledged writes are all required.
func TestRelaxOnlyUndrainedRemovals(t *testing.T) {
	put := state.Op{Kind: state.OpPut, Key: "k", Value: []byte("v")}
	records := []history.Record{
		{Client: 1, Op: put, ID: history.OpID{Origin: 3, Seq: 1}, Acked: true, Views: []history.View{{}}},
		{Client: 2, Op: put, ID: history.OpID{Origin: 4, Seq: 1}, Acked: true, Views: []history.View{{}}},
		{Client: 3, Op: put, ID: history.OpID{Origin: 1, Seq: 1}, Acked: true, Views: []history.View{{}}},
	}
	c := &Cluster{undrained: map[uint64]bool{3: true}}
	out, relaxed := c.relaxForRemoved(records, nil, map[uint64]bool{3: true, 4: true})
	if relaxed != 1 || out[0].Acked || !out[1].Acked || !out[2].Acked {
		t.Fatalf("relaxed %d, acked after: %v %v %v; want only the undrained origin 3's write relaxed", relaxed, out[0].Acked, out[1].Acked, out[2].Acked)
	}
	if !records[0].Acked {
		t.Fatal("relaxForRemoved changed its input")
	}
}
