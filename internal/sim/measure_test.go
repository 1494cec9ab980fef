package sim

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/correctables/correctables/internal/state"
)

// BenchmarkContention measures what Creek §6 reports (Figures 3-5): the
// fraction of strong operations whose tentative result equals the stable one
// (accuracy), executions per operation and rollbacks per operation, at low
// contention (single-key operations on 1000 keys) and high contention (the
// mixed workload on 2 keys, one ticket queue and whole-store scans), with
// 3 replicas, 8 clients, half the operations strong, 5% message drop and
// reordering, no crashes.
//
//	go test ./internal/sim -run '^$' -bench Contention -benchtime 50x
func BenchmarkContention(b *testing.B) {
	for _, bc := range []struct {
		name     string
		keys     int
		workload func(*rand.Rand, int) state.Op
	}{{"low", 1000, KV}, {"high", 2, Mixed}} {
		b.Run(bc.name, func(b *testing.B) {
			var accurate, strong, execs, rollbacks, ops int
			for i := 0; i < b.N; i++ {
				res := Run(Options{
					Seed: uint64(i + 1), Replicas: 3, Clients: 8, OpsPerClient: 25, Keys: bc.keys, Workload: bc.workload,
					Faults: Faults{Drop: 0.05, Reorder: 20 * time.Millisecond},
				})
				if res.Err != nil {
					b.Fatalf("seed %d: %v", i+1, res.Err)
				}
				accurate += res.Stats.StrongAccurate
				strong += res.Stats.StrongCommitted
				execs += res.Stats.Executions
				rollbacks += res.Stats.Rollbacks
				// Executions are counted on every replica; per operation
				// means per operation per replica.
				ops += len(res.Committed) * 3
			}
			b.ReportMetric(100*float64(accurate)/float64(max(strong, 1)), "accuracy%")
			b.ReportMetric(float64(execs)/float64(max(ops, 1)), "execs/op")
			b.ReportMetric(float64(rollbacks)/float64(max(ops, 1)), "rollbacks/op")
		})
	}
}
