package sim

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/correctables/correctables/internal/history"
	"github.com/correctables/correctables/internal/replica"
)

// defaultSeeds is how many fixed seeds (1, 2, ...) TestSimulation runs, and
// defaultFresh how many fresh ones it adds, unless CORRECTABLES_SIM_SEEDS
// and CORRECTABLES_SIM_FRESH say otherwise (make test-long runs 5,000).
// Sized so that the package stays within a few minutes with -race on two
// cores that other work keeps busy: 10 seeds took 72 s there (load
// average 34), 260 did not finish in 30 minutes.
const (
	defaultSeeds = 24
	defaultFresh = 2
)

func envCount(t *testing.T, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a number of seeds", name, s)
	}
	return n
}

// mixes are the fault mixes of the seeded runs; seed s runs
// mixes[s%len(mixes)], so the fixed seeds spread evenly over them and any
// seed replays with its own mix.
var mixes = []string{"faulty", "snap5", "skew1s", "onekey", "kvmany"}

func mixOf(seed uint64) string { return mixes[seed%uint64(len(mixes))] }

// seedOptions is the run of a seed: its mix, with the seed. In half the
// seeds of every mix (seed/5 odd) inputs share Readies as in the server's
// loop (Options.GroupCommit).
func seedOptions(seed uint64) Options {
	var o Options
	if m := mixOf(seed); m != "faulty" {
		o = reviewMix(m, seed)
	} else {
		o = faulty(seed)
	}
	if (seed/uint64(len(mixes)))%2 == 1 {
		o.GroupCommit = 3 * time.Millisecond
	}
	// A third of the seeds (seed/10 a multiple of 3, a rule that leaves the
	// regression seeds as they were found) crash nodes inside a Save too.
	if o.Faults.Crashes && (seed/10)%3 == 0 {
		o.Faults.MidWriteCrashes = true
	}
	return o
}

// describe names a seed's run for messages.
func describe(seed uint64) string {
	o := seedOptions(seed)
	gc := ""
	if o.GroupCommit > 0 {
		gc = ", group commit"
	}
	if o.Faults.MidWriteCrashes {
		gc += ", crashes inside writes"
	}
	return fmt.Sprintf("mix %s, %d replicas%s", mixOf(seed), o.Replicas, gc)
}

// faulty is the base fault mix: 3 or 5 replicas, drops, duplicates,
// reordering, partitions, crashes, 100 ms skew.
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

// replay is the command that reruns one seed.
func replay(seed uint64) string {
	return fmt.Sprintf("go test ./internal/sim -run TestSeed -seed=%d -v", seed)
}

// freshSeeds returns n seeds derived from the time, different on every run.
func freshSeeds(n int) []uint64 {
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(os.Getpid())))
	out := make([]uint64, n)
	for i := range out {
		out[i] = r.Uint64N(1<<53) + 1 // printable exactly, never 0
	}
	return out
}

// runSeeds runs the seeds on every core; each run is independent and
// deterministic, so the order they finish in does not matter. It returns
// the seeds that failed, sorted.
func runSeeds(t *testing.T, seeds []uint64, opts func(uint64) Options, fail func(seed uint64, res Result)) []uint64 {
	seedc := make(chan uint64)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed []uint64
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seed := range seedc {
				res := Run(opts(seed))
				if res.Err != nil {
					mu.Lock()
					failed = append(failed, seed)
					mu.Unlock()
					fail(seed, res)
				}
			}
		}()
	}
	for _, seed := range seeds {
		seedc <- seed
	}
	close(seedc)
	wg.Wait()
	slices.Sort(failed)
	return failed
}

// TestSimulation runs the fixed seeds 1..CORRECTABLES_SIM_SEEDS and
// CORRECTABLES_SIM_FRESH fresh ones, every mix among them. With -seed it
// runs that seed only.
func TestSimulation(t *testing.T) {
	if *seedFlag != 0 {
		runOne(t, *seedFlag)
		return
	}
	var seeds []uint64
	for s := 1; s <= envCount(t, "CORRECTABLES_SIM_SEEDS", defaultSeeds); s++ {
		seeds = append(seeds, uint64(s))
	}
	fresh := freshSeeds(envCount(t, "CORRECTABLES_SIM_FRESH", defaultFresh))
	t.Logf("sim: %d fixed seeds (1..%d) and fresh seeds %v; mixes %v by seed mod %d", len(seeds), len(seeds), fresh, mixes, len(mixes))
	seeds = append(seeds, fresh...)
	failed := runSeeds(t, seeds, seedOptions, func(seed uint64, res Result) {
		t.Errorf("sim: seed %d failed (%s): %v\n(replay: %s)", seed, describe(seed), res.Err, replay(seed))
	})
	if len(failed) > 0 {
		t.Logf("sim: %d of %d seeds failed: %v", len(failed), len(seeds), failed)
	}
}

var seedFlag = flagUint("seed", 0, "replay one simulation seed (TestSeed, TestSimulation)")

// TestSeed replays the seed given with -seed, with its mix.
func TestSeed(t *testing.T) {
	if *seedFlag == 0 {
		t.Skip("no -seed given")
	}
	runOne(t, *seedFlag)
}

func runOne(t *testing.T, seed uint64) {
	res := Run(seedOptions(seed))
	t.Logf("seed %d (%s): records=%d committed=%d msgs=%d dropped=%d crashes=%d (power losses %d, inside writes %d) snapshots=%d stats=%+v", seed, describe(seed), len(res.Records), len(res.Committed), res.Messages, res.Dropped, res.Crashes, res.PowerLosses, res.MidWriteCrashes, res.Snapshots, res.Stats)
	if res.Err != nil {
		t.Fatalf("sim: seed %d failed (%s): %v\n(replay: %s)", seed, describe(seed), res.Err, replay(seed))
	}
}

// fingerprint hashes what a run recorded and committed and what it counted.
func fingerprint(res Result) string {
	// JSON follows pointers (%v would print their addresses) and sorts
	// map keys.
	b, err := json.Marshal(struct {
		Records                               []history.Record
		Committed                             []history.OpID
		Messages, Dropped, Crashes, Snapshots int
		Stats                                 replica.Stats
	}{res.Records, res.Committed, res.Messages, res.Dropped, res.Crashes, res.Snapshots, res.Stats})
	if err != nil {
		panic(err)
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// TestDeterministic: the same seed gives the same history, committed order
// and counters, although every node runs Pebble with its background
// goroutines. Each seed runs twice at the same time (different timing of
// those goroutines) and once more afterwards; one seed per mix, each with
// crashes (both kinds) and, for most mixes, snapshots.
func TestDeterministic(t *testing.T) {
	t.Parallel()
	var crashes, powerLosses, midWrites int
	defer func() {
		if powerLosses == 0 || powerLosses == crashes {
			t.Errorf("%d crashes, %d of them power losses: want both kinds of crash among the seeds", crashes, powerLosses)
		}
		if midWrites == 0 {
			t.Errorf("%d crashes, none inside a write: want some among the seeds", crashes)
		}
	}()
	for _, seed := range []uint64{15, 6, 62, 3, 14} {
		t.Run(fmt.Sprintf("seed%d_%s_gc%v", seed, mixOf(seed), seedOptions(seed).GroupCommit > 0), func(t *testing.T) {
			var runs [3]Result
			var wg sync.WaitGroup
			for i := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					runs[i] = Run(seedOptions(seed))
				}()
			}
			wg.Wait()
			runs[2] = Run(seedOptions(seed))
			if runs[0].Err != nil {
				t.Fatalf("seed %d: %v (replay: %s)", seed, runs[0].Err, replay(seed))
			}
			crashes += runs[0].Crashes
			powerLosses += runs[0].PowerLosses
			midWrites += runs[0].MidWriteCrashes
			if runs[0].Crashes == 0 {
				t.Errorf("seed %d had no crash; pick a seed that has", seed)
			}
			want := fingerprint(runs[0])
			for i, r := range runs[1:] {
				if got := fingerprint(r); got != want {
					t.Errorf("seed %d: run %d differs from run 0: %d vs %d records, %d vs %d committed, %d vs %d messages",
						seed, i+1, len(r.Records), len(runs[0].Records), len(r.Committed), len(runs[0].Committed), r.Messages, runs[0].Messages)
				}
			}
		})
	}
}
