package replica

import (
	"fmt"
	"testing"

	"github.com/correctables/correctables/internal/state"
)

// A proposal that was on its way while an entry committed its operations
// (under load, forwarded proposals and retries wait in the queues) adds
// nothing to the leader's log: the leader keeps committed operations out
// (inlog.go). Before, each such proposal went into the log again.
func TestLeaderKeepsCommittedOutOfItsLog(t *testing.T) {
	tr := newTrio(t, nil)
	tr.elect()
	lead := tr.r[1].Leader()
	origin := lead%3 + 1
	const n = 20
	for i := range n {
		if err := tr.r[origin].Submit(ClientRequest{Client: 1, Seq: uint64(i + 1), Want: WantTentative,
			Op: state.Op{Kind: state.OpPut, Key: fmt.Sprintf("k%d", i), Value: []byte("v")}}); err != nil {
			t.Fatal(err)
		}
		tr.mustDrive(origin)
	}
	for i := 0; len(tr.r[1].Committed()) < n || len(tr.r[2].Committed()) < n || len(tr.r[3].Committed()) < n; i++ {
		if i > 200 {
			t.Fatalf("committed %d, %d, %d of %d operations after 200 ticks", len(tr.r[1].Committed()), len(tr.r[2].Committed()), len(tr.r[3].Committed()), n)
		}
		tr.tick()
	}
	before := map[uint64]int{}
	for id := uint64(1); id <= 3; id++ {
		before[id] = tr.r[id].Stats().Duplicates
	}
	ops := tr.ops(origin, n)
	// The origin's late proposal, forwarded to the leader, and the
	// leader's own.
	tr.r[origin].proposeEntry(entry{Proposer: origin, Ops: ops})
	tr.mustDrive(origin)
	tr.r[lead].proposeEntry(entry{Proposer: lead, Ops: ops})
	tr.mustDrive(lead)
	for range 5 {
		tr.tick()
	}
	for id := uint64(1); id <= 3; id++ {
		if d := tr.r[id].Stats().Duplicates - before[id]; d != 0 {
			t.Errorf("replica %d applied %d committed operations again (leader %d, origin %d)", id, d, lead, origin)
		}
	}
}
