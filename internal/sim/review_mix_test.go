package sim

import (
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
)

// reviewMix returns a harsher fault mix than faulty's, by name. Every mix
// runs in TestSimulation (seed mod 5 picks it); TestReviewMix runs one mix
// over many seeds.
func reviewMix(name string, seed uint64) Options {
	replicas := 3
	if seed%2 == 1 {
		replicas = 5
	}
	o := Options{Seed: seed, Replicas: replicas}
	switch name {
	case "snap5": // snapshots every 5 entries, heavy drops, 1s skew
		o.SnapshotEntries = 5
		o.Faults = Faults{Drop: 0.2, Dup: 0.1, Reorder: 50 * time.Millisecond, Partitions: true, Crashes: true, Skew: time.Second}
	case "skew1s": // contention, clock skew 1s, many clients, weak-heavy
		o.Keys = 2
		o.Clients = 6
		o.StrongFraction = 0.2
		o.SnapshotEntries = 7
		o.Faults = Faults{Drop: 0.05, Dup: 0.05, Reorder: 30 * time.Millisecond, Partitions: true, Crashes: true, Skew: time.Second}
	case "onekey": // everything conflicts
		o.Keys = 1
		o.Clients = 5
		o.StrongFraction = 0.3
		if seed%3 == 0 {
			o.SnapshotEntries = 3
		}
		o.Faults = Faults{Drop: 0.1, Dup: 0.1, Reorder: 80 * time.Millisecond, Partitions: true, Crashes: true, Skew: 300 * time.Millisecond}
	case "kvmany": // few conflicts: commuting paths
		o.Keys = 20
		o.Clients = 6
		o.Workload = KV
		o.StrongFraction = 0.3
		if seed%2 == 0 {
			o.SnapshotEntries = 4
		}
		o.Faults = Faults{Drop: 0.1, Dup: 0.1, Reorder: 40 * time.Millisecond, Partitions: true, Crashes: true, Skew: 500 * time.Millisecond}
	default:
		panic("unknown mix " + name)
	}
	return o
}

// TestReviewMix runs CORRECTABLES_REVIEW_SEEDS seeds (from
// CORRECTABLES_REVIEW_FROM) of the mix CORRECTABLES_REVIEW_MIX, all with
// that one mix. Long: only on demand.
func TestReviewMix(t *testing.T) {
	mix := os.Getenv("CORRECTABLES_REVIEW_MIX")
	if mix == "" {
		t.Skip("set CORRECTABLES_REVIEW_MIX=snap5|skew1s|onekey|kvmany and CORRECTABLES_REVIEW_SEEDS")
	}
	n, _ := strconv.Atoi(os.Getenv("CORRECTABLES_REVIEW_SEEDS"))
	if n <= 0 {
		n = 200
	}
	from, _ := strconv.Atoi(os.Getenv("CORRECTABLES_REVIEW_FROM"))
	if from <= 0 {
		from = 1
	}
	seedc := make(chan uint64)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seed := range seedc {
				res := Run(reviewMix(mix, seed))
				if res.Err != nil {
					t.Errorf("mix %s seed %d failed: %v", mix, seed, res.Err)
				}
			}
		}()
	}
	for s := from; s < from+n; s++ {
		seedc <- uint64(s)
	}
	close(seedc)
	wg.Wait()
}
