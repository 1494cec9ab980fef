package sim

import (
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// seeds is the number of seeds TestSimulation runs: 500 by default, more
// with CORRECTABLES_SIM_SEEDS (make test-long).
func seeds(t *testing.T) int {
	if s := os.Getenv("CORRECTABLES_SIM_SEEDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("CORRECTABLES_SIM_SEEDS=%q: want a positive number", s)
		}
		return n
	}
	return 500
}

// faulty is the fault mix of the seeded runs.
func faulty(seed uint64) Options {
	replicas := 3
	if seed%2 == 1 {
		replicas = 5
	}
	// One seed in three takes snapshots every few entries, so that
	// followers catch up from snapshots and restarts start from them.
	snap := -1
	if seed%3 == 0 {
		snap = 20
	}
	return Options{
		Seed:            seed,
		Replicas:        replicas,
		SnapshotEntries: snap,
		Faults: Faults{
			Drop: 0.05, Dup: 0.05, Reorder: 30 * time.Millisecond,
			Partitions: true, Crashes: true, Skew: 100 * time.Millisecond,
		},
	}
}

// TestSimulation runs the seeds on every core; each run is independent and
// deterministic, so the order they finish in does not matter.
func TestSimulation(t *testing.T) {
	n := seeds(t)
	seedc := make(chan uint64)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed []uint64
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seed := range seedc {
				res := Run(faulty(seed))
				if res.Err != nil {
					mu.Lock()
					failed = append(failed, seed)
					mu.Unlock()
					t.Errorf("seed %d (%d replicas) failed; replay with: go test ./internal/sim -run TestSeed -seed %d -v\n%v",
						seed, faulty(seed).Replicas, seed, res.Err)
				}
			}
		}()
	}
	for seed := uint64(1); seed <= uint64(n); seed++ {
		seedc <- seed
	}
	close(seedc)
	wg.Wait()
	if len(failed) > 0 {
		slices.Sort(failed)
		t.Logf("%d of %d seeds failed: %v", len(failed), n, failed)
	}
}

var seedFlag = flagUint("seed", 0, "replay one simulation seed (TestSeed)")

func TestSeed(t *testing.T) {
	if *seedFlag == 0 {
		t.Skip("no -seed given")
	}
	res := Run(faulty(*seedFlag))
	t.Logf("records=%d committed=%d msgs=%d dropped=%d crashes=%d snapshots=%d stats=%+v", len(res.Records), len(res.Committed), res.Messages, res.Dropped, res.Crashes, res.Snapshots, res.Stats)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
}
