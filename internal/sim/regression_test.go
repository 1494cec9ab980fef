package sim

import (
	"fmt"
	"testing"
)

// regressionSeeds are seeds that once failed, with what they caught. They
// run in every default run, whatever CORRECTABLES_SIM_SEEDS says.
var regressionSeeds = []struct {
	seed   uint64
	caught string
}{
	// An index-driven commit (replica.keepLenIndexed) kept a committed
	// operation executed here above one learnt from the log that the
	// committed order puts before it, on the same key: weak views and
	// linearizability broke.
	{1254, "commit kept an operation above a conflicting earlier one learnt from the log (kvmany)"},
	{1273, "the same, on a queue (onekey, 5 replicas)"},
	// A leader killed inside a write whose early appends carried an own
	// operation came back without it and, unfenced, issued its id again
	// for another operation, which commit skipped as a duplicate.
	{721, "an id issued twice after a crash inside a leader's write (snap5, 5 replicas, crashes inside writes)"},
}

func TestRegressionSeeds(t *testing.T) {
	for _, rs := range regressionSeeds {
		t.Run(fmt.Sprint(rs.seed), func(t *testing.T) {
			t.Logf("caught before: %s", rs.caught)
			runOne(t, rs.seed)
		})
	}
}
