package history

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/correctables/correctables/internal/state"
)

// mustFail asserts that err is a violation whose message names every want.
func mustFail(t *testing.T, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("checker accepted a broken history; want an error naming %q", want)
	}
	if !errors.Is(err, ErrViolation) {
		t.Fatalf("error does not wrap ErrViolation: %v", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("error does not name %q:\n%v", w, err)
		}
	}
	t.Logf("caught, as it should: %v", err)
}

func mustPass(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("checker rejected a correct history: %v", err)
	}
}

var notFound = state.Result{}

func final(at int64, r state.Result, k int, vv map[uint64]uint64) View {
	return View{At: at, Result: r, Final: true, Stamp: Stamp{Replica: 1, CommittedCount: k, VV: vv}}
}

func prelim(at int64, r state.Result, replica uint64, k int, vv map[uint64]uint64) View {
	return View{At: at, Result: r, Stamp: Stamp{Replica: replica, CommittedCount: k, VV: vv}}
}

func TestRecorder(t *testing.T) {
	var mu sync.Mutex
	var clock int64
	rec := NewRecorder(func() int64 {
		mu.Lock()
		defer mu.Unlock()
		clock++
		return clock
	})
	var wg sync.WaitGroup
	for c := range 8 {
		wg.Go(func() {
			for i := range 50 {
				h := rec.Invoke(c, put("k", "v"), i%2 == 0)
				h.SetID(OpID{uint64(c + 1), uint64(i + 1)})
				vv := map[uint64]uint64{uint64(c + 1): uint64(i + 1)}
				h.View(View{Result: notFound, Stamp: Stamp{Replica: uint64(c + 1), VV: vv}})
				vv[99] = 1 // the recorder must have copied it
				h.View(View{Result: notFound, Final: true})
			}
		})
	}
	wg.Wait()
	records := rec.Records()
	if len(records) != 400 || rec.Len() != 400 {
		t.Fatalf("got %d records, want 400", len(records))
	}
	for i, r := range records {
		if !r.Acked || len(r.Views) != 2 || r.ID.IsZero() || r.Views[0].At <= r.Invoke || r.Views[1].At <= r.Views[0].At {
			t.Fatalf("record %d recorded wrongly: %+v", i, r)
		}
		if _, ok := r.Views[0].Stamp.VV[99]; ok {
			t.Fatalf("record %d: the recorder kept the caller's version vector map", i)
		}
	}
	records[0].Views[0].Stamp.VV[1000] = 7
	if _, ok := rec.Records()[0].Views[0].Stamp.VV[1000]; ok {
		t.Fatal("Records returned the recorder's own maps")
	}
	mustPass(t, CheckFinalOnce(records))
}

// linHistory: a strong put of x, a strong read concurrent with it, a stale
// weak read (which linearizability does not cover), a write whose client
// never heard back but which committed, and a later read that sees it.
func linHistory() ([]Record, []OpID) {
	records := []Record{
		{Client: 0, Op: put("x", "1"), Strong: true, ID: OpID{1, 1}, Invoke: 10, Acked: true,
			Views: []View{prelim(12, notFound, 1, 0, nil), final(20, notFound, 1, nil)}},
		{Client: 1, Op: get("x"), Strong: true, Invoke: 15, Acked: true,
			Views: []View{final(25, found("1"), 1, nil)}},
		{Client: 2, Op: get("x"), Invoke: 30, Acked: true,
			Views: []View{final(31, notFound, 0, nil)}},
		{Client: 3, Op: put("y", "2"), Strong: true, ID: OpID{2, 1}, Invoke: 32},
		{Client: 1, Op: get("y"), Strong: true, Invoke: 50, Acked: true,
			Views: []View{final(60, found("2"), 2, nil)}},
	}
	return records, []OpID{{1, 1}, {2, 1}}
}

func TestLinearizablePasses(t *testing.T) {
	records, committed := linHistory()
	for _, c := range [][]OpID{committed, nil} { // nil: no witness, porcupine searches
		res, err := CheckLinearizable(records, c, 0)
		mustPass(t, err)
		if res != porcupine.Ok {
			t.Fatalf("got %v, want Ok", res)
		}
	}
}

func TestLinearizableCatchesStaleStrongRead(t *testing.T) {
	records, committed := linHistory()
	// A strong read after the put returned must see it.
	records = append(records, Record{Client: 4, Op: get("x"), Strong: true, Invoke: 70, Acked: true,
		Views: []View{final(80, notFound, 2, nil)}})
	for _, c := range [][]OpID{committed, nil} {
		res, err := CheckLinearizable(records, c, 0)
		mustFail(t, err, "not linearizable", "record 5", `get("x")`)
		if res != porcupine.Illegal {
			t.Fatalf("got %v, want Illegal", res)
		}
	}
}

func TestLinearizableCatchesReadOfUncommittedWrite(t *testing.T) {
	records, _ := linHistory()
	// y=2 never committed, so no strong read may see it.
	_, err := CheckLinearizable(records, []OpID{{1, 1}}, 0)
	mustFail(t, err, "record 4")
}

// A weak write whose client got no view (its replica was killed before it
// answered) has no ID, yet may have taken effect: it is pending, not a weak
// read to leave out. Seen in the crash test: a later put's final view
// returned the lost-view put's value as the previous one, and the checker,
// which had dropped the write, reported a violation that was not one.
func TestLinearizableWeakWriteWithoutView(t *testing.T) {
	val := func(v string) state.Result { return state.Result{Found: true, Value: []byte(v)} }
	records := []Record{
		{Client: 1, Op: put("k", "a"), Strong: true, ID: OpID{1, 1}, Invoke: 0, Acked: true,
			Views: []View{final(10, notFound, 1, nil)}},
		// The weak put of b: its replica died, the client saw nothing.
		{Client: 2, Op: put("k", "b"), Invoke: 20},
		// A later put saw b before it: b took effect between.
		{Client: 1, Op: put("k", "c"), Strong: true, ID: OpID{1, 2}, Invoke: 30, Acked: true,
			Views: []View{final(40, val("b"), 3, nil)}},
		{Client: 3, Op: get("k"), Strong: true, Invoke: 50, Acked: true,
			Views: []View{final(60, val("c"), 3, nil)}},
	}
	res, err := CheckLinearizable(records, nil, 0)
	mustPass(t, err)
	if res != porcupine.Ok {
		t.Fatalf("got %v, want Ok", res)
	}
	// And the write is not free to appear anywhere: a strong read that
	// returned before the put of b was invoked cannot see b.
	records = append(records, Record{Client: 4, Op: get("k"), Strong: true, Invoke: 11, Acked: true,
		Views: []View{final(15, val("b"), 1, nil)}})
	res, err = CheckLinearizable(records, nil, 0)
	mustFail(t, err, "not linearizable")
	if res != porcupine.Illegal {
		t.Fatalf("got %v, want Illegal", res)
	}
}

func TestLinearizableVisualization(t *testing.T) {
	records, committed := linHistory()
	records[1].Views[0].Result = found("7")
	path := filepath.Join(t.TempDir(), "vis.html")
	_, err := CheckLinearizableWith(records, committed, LinearizableOptions{VisualizePath: path})
	mustFail(t, err, path)
	if fi, statErr := os.Stat(path); statErr != nil || fi.Size() == 0 {
		t.Fatalf("no visualization written: %v", statErr)
	}
}

func TestPartitionByKey(t *testing.T) {
	ops := []porcupine.Operation{
		{Input: ModelInput{Op: put("ab", "1")}},
		{Input: ModelInput{Op: put("b", "1")}},
		{Input: ModelInput{Op: scan("a")}},
		{Input: ModelInput{Op: get("c")}},
		{Input: ModelInput{Op: state.Op{Kind: state.OpEnqueue, Key: "c", Value: []byte("i")}}},
		{Input: ModelInput{Op: state.Op{Kind: state.OpTxn, Txn: &state.Txn{
			Guards: []state.Guard{{Key: "c", Cmp: state.CmpExists}}, Then: []state.Write{{Key: "b", Value: []byte("2")}}}}}},
	}
	parts := partitionByKey(ops)
	// {ab, scan a}, {b, c, txn}, {queue c}
	if len(parts) != 3 || len(parts[0]) != 2 || len(parts[1]) != 3 || len(parts[2]) != 1 {
		t.Fatalf("partitions %v", parts)
	}
}

// weakHistory: replica 1 submits put x=1 with TS 10, replica 2 put x=2 with
// TS 5. Each first sees only its own; a weak read at replica 1 that has both
// sees x=1, since (5, 2) sorts first. The strong noop (1,2) commits both.
func weakHistory() ([]Record, []Submitted, []OpID) {
	noop := state.Op{Kind: state.OpNoop}
	submitted := []Submitted{
		{ID: OpID{1, 1}, TS: 10, Op: put("x", "1")},
		{ID: OpID{2, 1}, TS: 5, Op: put("x", "2")},
		{ID: OpID{1, 2}, TS: 20, Op: noop},
	}
	committed := []OpID{{2, 1}, {1, 1}, {1, 2}}
	records := []Record{
		{Client: 0, Op: put("x", "1"), ID: OpID{1, 1}, Invoke: 1, Acked: true, Views: []View{
			prelim(2, notFound, 1, 0, map[uint64]uint64{1: 1}),
			prelim(6, found("2"), 1, 0, map[uint64]uint64{1: 1, 2: 1}), // rolled back and re-executed
			final(9, found("2"), 3, map[uint64]uint64{1: 2, 2: 1}),
		}},
		{Client: 1, Op: put("x", "2"), ID: OpID{2, 1}, Invoke: 3, Acked: true, Views: []View{
			prelim(4, notFound, 2, 0, map[uint64]uint64{2: 1}),
			final(10, notFound, 3, map[uint64]uint64{1: 2, 2: 1}),
		}},
		{Client: 2, Op: get("x"), Invoke: 5, Acked: true, Views: []View{
			final(7, found("1"), 0, map[uint64]uint64{1: 1, 2: 1}),
		}},
		{Client: 3, Op: get("x"), Strong: true, Invoke: 11, Acked: true, Views: []View{
			prelim(12, found("2"), 2, 0, map[uint64]uint64{2: 1}),
			final(13, found("1"), 3, map[uint64]uint64{1: 2, 2: 1}),
		}},
	}
	return records, submitted, committed
}

func TestWeakViewsPass(t *testing.T) {
	records, submitted, committed := weakHistory()
	mustPass(t, CheckWeakViews(records, submitted, committed))
	mustPass(t, CheckFinalOnce(records))
	mustPass(t, CheckDurable(records, committed))
	_, err := CheckLinearizableWith(records, committed, LinearizableOptions{Submitted: submitted})
	mustPass(t, err)
}

func TestWeakViewsCatchBadViews(t *testing.T) {
	for _, tc := range []struct {
		name   string
		break_ func(r []Record)
		want   []string
	}{
		{"weak read not from its claimed order", func(r []Record) { r[2].Views[0].Result = found("2") },
			[]string{"record 2", `got {found value="2"}`, `gives {found value="1"}`, "tentative [(2,1) (1,1)]"}},
		{"tentative result of the wrong order", func(r []Record) { r[0].Views[1].Result = notFound },
			[]string{"record 0", "view 1 (preliminary"}},
		{"final view not the committed result", func(r []Record) { r[1].Views[1].Result = found("1") },
			[]string{"record 1", "view 1 (final", "place in the committed order (0)"}},
		{"strong read not from committed state", func(r []Record) { r[3].Views[1].Result = found("2") },
			[]string{"record 3", "committed state it claims"}},
		{"committed count beyond the committed order", func(r []Record) { r[0].Views[0].Stamp.CommittedCount = 9 },
			[]string{"record 0", "committed count 9 is not a prefix"}},
		{"version vector misses the committed prefix", func(r []Record) { r[3].Views[0].Stamp.CommittedCount = 2 },
			[]string{"record 3", "does not cover (1,1)"}},
		{"view does not cover the op itself", func(r []Record) { r[0].Views[0].Stamp.VV = map[uint64]uint64{} },
			[]string{"record 0", "does not cover the op itself"}},
		{"version vector beyond what was submitted", func(r []Record) { r[2].Views[0].Stamp.VV[2] = 5 },
			[]string{"record 2", "origin 2 submitted only up to sequence number 1"}},
		{"final view stamped before its commit", func(r []Record) { r[0].Views[2].Stamp.CommittedCount = 1 },
			[]string{"record 0", "committed at position 1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			records, submitted, committed := weakHistory()
			tc.break_(records)
			mustFail(t, CheckWeakViews(records, submitted, committed), tc.want...)
		})
	}
}

func TestWeakViewsRejectBadInputs(t *testing.T) {
	records, submitted, committed := weakHistory()
	mustFail(t, CheckWeakViews(records, submitted, append(committed, OpID{1, 1})), "(1,1) committed twice")
	mustFail(t, CheckWeakViews(records, submitted, append(committed, OpID{3, 1})), "never submitted")
	mustFail(t, CheckWeakViews(records, append(submitted, submitted[0]), committed), "submitted twice")
}

func TestGeneratedHistoryWithInjectedBug(t *testing.T) {
	h := generate(3, 300)
	// Flip one preliminary view of a write to a result it cannot have had.
	for i := range h.records {
		rec := &h.records[i]
		if rec.ID.IsZero() || len(rec.Views) == 0 || rec.Views[0].Final {
			continue
		}
		rec.Views[0].Result = state.Result{Found: true, Value: []byte("impossible")}
		mustFail(t, CheckWeakViews(h.records, h.submitted, h.committed), rec.describe(i))
		break
	}
	// Lose an acked write from the committed order.
	h = generate(3, 300)
	for i := range h.records {
		rec := &h.records[i]
		if rec.Acked && !rec.Op.ReadOnly() {
			p := -1
			for j, id := range h.committed {
				if id == rec.ID {
					p = j
				}
			}
			lost := append(h.committed[:p:p], h.committed[p+1:]...)
			mustFail(t, CheckDurable(h.records, lost), "acked write is lost", rec.describe(i))
			break
		}
	}
}

func TestDurable(t *testing.T) {
	records, _, committed := weakHistory()
	mustPass(t, CheckDurable(records, committed))
	// Unacked writes may be lost.
	unacked := append(records, Record{Op: put("z", "1"), ID: OpID{3, 1}})
	mustPass(t, CheckDurable(unacked, committed))
	mustFail(t, CheckDurable(records, []OpID{{2, 1}, {1, 2}}), "record 0", "acked write is lost")
	mustFail(t, CheckDurable(records, append(committed, OpID{2, 1})), "op (2,1) committed twice, at 0 and at 3")
	noID := append(records, Record{Op: put("z", "1"), Acked: true, Views: []View{final(1, notFound, 0, nil)}})
	mustFail(t, CheckDurable(noID, committed), "record 4", "no id")
}

func TestFinalOnce(t *testing.T) {
	records, _, _ := weakHistory()
	mustPass(t, CheckFinalOnce(records))

	twoFinals, _, _ := weakHistory()
	twoFinals[1].Views = append(twoFinals[1].Views, final(11, notFound, 3, nil))
	mustFail(t, CheckFinalOnce(twoFinals), "record 1", "view 2 (final=true", "after final view 1")

	backToPrelim, _, _ := weakHistory()
	backToPrelim[1].Views = append(backToPrelim[1].Views, prelim(11, notFound, 1, 3, nil))
	mustFail(t, CheckFinalOnce(backToPrelim), "record 1", "view 2 (final=false", "after final view 1")

	early, _, _ := weakHistory()
	early[3].Views[0].At = 5
	mustFail(t, CheckFinalOnce(early), "record 3", "arrived before 11")

	unacked, _, _ := weakHistory()
	unacked[2].Acked = false
	mustFail(t, CheckFinalOnce(unacked), "record 2", "acked=false with 1 views")
}

func TestConverged(t *testing.T) {
	ok := func() []ReplicaState {
		return []ReplicaState{
			{ID: 1, Committed: []OpID{{1, 1}, {2, 1}}, StateHash: 42, Tentative: []OpID{{3, 1}}},
			{ID: 2, Committed: []OpID{{1, 1}, {2, 1}}, StateHash: 42, Tentative: []OpID{{3, 1}}},
			{ID: 3, Committed: []OpID{{1, 1}, {2, 1}}, StateHash: 42, Tentative: []OpID{{3, 1}}},
		}
	}
	mustPass(t, CheckConverged(ok()))
	mustPass(t, CheckConverged(nil))

	r := ok()
	r[2].Committed = []OpID{{2, 1}, {1, 1}}
	mustFail(t, CheckConverged(r), "replica 1 and replica 3: committed lists differ: at 0: (1,1) vs (2,1)")
	r = ok()
	r[1].Committed = r[1].Committed[:1]
	mustFail(t, CheckConverged(r), "replica 1 and replica 2: committed lists differ: lengths 2 vs 1, first extra (2,1)")
	r = ok()
	r[1].StateHash = 43
	mustFail(t, CheckConverged(r), "state hashes differ: 0x2a and 0x2b")
	r = ok()
	r[2].Tentative = nil
	mustFail(t, CheckConverged(r), "tentative lists differ: lengths 1 vs 0")
}

// After a timeout of the whole check, checkParts says which key is not
// linearizable (with its longest linearizable prefix) and which are.
func TestCheckPartsNamesTheBadKey(t *testing.T) {
	val := func(v string) state.Result { return state.Result{Found: true, Value: []byte(v)} }
	records := []Record{
		{Client: 1, Op: put("good", "a"), Strong: true, ID: OpID{1, 1}, Invoke: 0, Acked: true,
			Views: []View{final(10, notFound, 1, nil)}},
		{Client: 2, Op: get("good"), Strong: true, Invoke: 20, Acked: true,
			Views: []View{final(30, val("a"), 1, nil)}},
		{Client: 1, Op: put("bad", "x"), Strong: true, ID: OpID{1, 2}, Invoke: 40, Acked: true,
			Views: []View{final(50, notFound, 2, nil)}},
		// Reads a value never written.
		{Client: 2, Op: get("bad"), Strong: true, Invoke: 60, Acked: true,
			Views: []View{final(70, val("y"), 2, nil)}},
		// A pending write on the good key.
		{Client: 3, Op: put("good", "b"), Invoke: 80},
	}
	ops, err := linearizableOps(records, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := checkParts(Model(), ops, records, 10*time.Second)
	for _, want := range []string{`keys ["good"]: 3 ops (1 pending): Ok`, `keys ["bad"]: 2 ops (0 pending): Illegal`, `strong get("bad")`, `saw {found value="y"}`} {
		if !strings.Contains(got, want) {
			t.Errorf("checkParts output lacks %q:\n%s", want, got)
		}
	}
}
