package replica

import (
	"fmt"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/correctables/correctables/internal/state"
)

// A leader's log carries an operation once while it leads, however often
// its origin retries it or other replicas propose it as stale (inlog.go).
// Here the leader's appends are held back, so nothing commits for a while:
// the origin retries its weak operations every RetryTicks and the others
// propose them as stale foreign operations every NoopTicks. Before, every
// such proposal went into the log (with 256 KiB values, twice the bytes of
// the operations themselves); now each operation is in it once, and all of
// them commit once the appends go through.
func TestLeaderLogCarriesAnOperationOnce(t *testing.T) {
	tr := newTrio(t, func(c *Config) { c.RetryTicks, c.NoopTicks, c.ElectionTicks = 2, 1, 50 })
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
	// Twenty ticks without appends reaching the followers (heartbeats do:
	// the leader stays).
	for range 20 {
		for id := uint64(1); id <= 3; id++ {
			tr.r[id].Tick()
			tr.mustDrive(id)
		}
		for len(tr.q) > 0 {
			m := tr.q[0]
			tr.q = tr.q[1:]
			if m.Type == MsgRaft && m.Raft.GetType() == raftpb.MsgApp {
				continue // raft sends them again once heartbeats are answered
			}
			_ = tr.r[m.To].Step(m)
			tr.mustDrive(m.To)
		}
	}
	if got := tr.r[lead].Leader(); got != lead {
		t.Fatalf("leader changed from %d to %d while appends were held", lead, got)
	}
	for i := 0; len(tr.r[1].Committed()) < n || len(tr.r[2].Committed()) < n || len(tr.r[3].Committed()) < n; i++ {
		if i > 200 {
			t.Fatalf("committed %d, %d, %d of %d operations after 200 ticks", len(tr.r[1].Committed()), len(tr.r[2].Committed()), len(tr.r[3].Committed()), n)
		}
		tr.tick()
	}
	// A proposal that was on its way while an entry committed its
	// operations (under load, forwarded proposals wait in the queues):
	// the leader appends nothing.
	var ops []*Req
	for s := uint64(1); s <= n; s++ {
		q, ok := tr.r[origin].Op(OpID{origin, s})
		if !ok {
			t.Fatalf("replica %d lacks its operation %d", origin, s)
		}
		ops = append(ops, q)
	}
	tr.r[origin].proposeEntry(entry{Proposer: origin, Ops: ops})
	tr.mustDrive(origin)
	for range 5 {
		tr.tick()
	}
	for id := uint64(1); id <= 3; id++ {
		if d := tr.r[id].Stats().Duplicates; d != 0 {
			t.Errorf("replica %d applied %d operations that the log had carried before (leader %d, origin %d)", id, d, lead, origin)
		}
	}
}
