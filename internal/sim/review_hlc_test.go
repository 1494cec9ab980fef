package sim

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/correctables/correctables/internal/replica"
	"github.com/correctables/correctables/internal/state"
)

// The hybrid logical clock is not restored on restart beyond the operations
// replayed (own persisted ones and log entries after the snapshot). When a
// snapshot covers every own operation, the restarted origin may issue a
// timestamp below its own earlier one: its operations no longer appear in
// sequence order, and a peer's stable time (which trusted the origin's
// earlier timestamps and clock readings) claims an operation had arrived that
// had not.
func TestReviewHLCAfterSnapshotRestart(t *testing.T) {
	var A, B uint64 = 1, 2
	var before, after *replica.Req
	var stableAtB uint64
	opt := Options{Seed: 11, Replicas: 3, Clients: 1, OpsPerClient: 1, StrongFraction: 1, Quiet: 3 * time.Second, SnapshotEntries: 1,
		Workload: func(r *rand.Rand, keys int) state.Op {
			return state.Op{Kind: state.OpPut, Key: "z", Value: []byte("z")}
		},
	}
	opt.Hook = func(c *Cluster) {
		c.Node(A).skew = -int64(400 * time.Millisecond)
		c.Node(B).skew = int64(400 * time.Millisecond)
		c.At(time.Second, func() {
			submitAt(t, c, B, 1, state.Op{Kind: state.OpPut, Key: "b", Value: []byte("1")}, false)
		})
		c.At(1100*time.Millisecond, func() {
			submitAt(t, c, A, 1, state.Op{Kind: state.OpPut, Key: "a", Value: []byte("1")}, true)
		})
		c.At(1400*time.Millisecond, func() {
			rep := c.Node(A).Rep
			last := rep.Stamp().VV[A]
			q, _ := rep.Op(replica.OpID{Origin: A, Seq: last})
			before = q
			c.Crash(A)
			c.Restart(A)
			stableAtB = c.Node(B).Rep.Stamp().StableTime
			submitAt(t, c, A, 1, state.Op{Kind: state.OpPut, Key: "a", Value: []byte("2")}, false)
			q, _ = c.Node(A).Rep.Op(replica.OpID{Origin: A, Seq: last + 1})
			after = q
		})
	}
	res := Run(opt)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if before == nil || after == nil {
		t.Fatal("scenario did not run")
	}
	t.Logf("A.1 ts=%d A.2 ts=%d stable time at B before A.2 arrived: %d", before.TS, after.TS, stableAtB)
	if after.TS < before.TS {
		t.Errorf("origin %d issued %v with timestamp %d below its earlier %v (%d)", A, after.ID, after.TS, before.ID, before.TS)
	}
	if after.TS < stableAtB {
		t.Errorf("replica %d's stable time %d claimed every operation below it had arrived, but %v (ts %d) had not", B, stableAtB, after.ID, after.TS)
	}
}
