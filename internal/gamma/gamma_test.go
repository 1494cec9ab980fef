package gamma

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"pgregory.net/rapid"
)

const ms = int64(time.Millisecond)

func w(key string, v uint64, start, finish int64) Op {
	return Op{Key: key, Write: true, Value: v, Start: start, Finish: finish}
}

func r(key string, v uint64, start, finish int64) Op {
	return Op{Key: key, Value: v, Start: start, Finish: finish}
}

func mustScore(t *testing.T, ops []Op) Report {
	t.Helper()
	rep, err := Score(ops, Options{Scores: true})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func scoreOf(t *testing.T, rep Report, key string, v uint64) time.Duration {
	t.Helper()
	for _, s := range rep.Scores {
		if s.Key == key && s.Value == v {
			return s.Score
		}
	}
	t.Fatalf("no score for %q %d in %+v", key, v, rep.Scores)
	return 0
}

func TestLinearizableTracesScoreZero(t *testing.T) {
	for name, ops := range map[string][]Op{
		"sequential": {
			w("k", 1, 0, 1*ms), r("k", 1, 2*ms, 3*ms), w("k", 2, 4*ms, 5*ms), r("k", 2, 6*ms, 7*ms),
		},
		"read concurrent with the write sees the new value": {
			w("k", 1, 0, 1*ms), w("k", 2, 2*ms, 10*ms), r("k", 2, 3*ms, 4*ms), r("k", 2, 11*ms, 12*ms),
		},
		"read concurrent with the write sees the old value": {
			w("k", 1, 0, 1*ms), w("k", 2, 2*ms, 10*ms), r("k", 1, 3*ms, 4*ms), r("k", 2, 11*ms, 12*ms),
		},
		"initial value read first": {
			r("k", Absent, 0, 1*ms), w("k", 1, 2*ms, 3*ms), r("k", 1, 4*ms, 5*ms),
		},
		"touching operations are concurrent": {
			w("k", 1, 0, 1*ms), w("k", 2, 2*ms, 3*ms), r("k", 1, 3*ms, 4*ms),
		},
		"keys are independent": {
			w("a", 1, 0, 1*ms), w("b", 1, 2*ms, 3*ms), r("a", 1, 4*ms, 5*ms), r("b", 1, 4*ms, 5*ms),
		},
	} {
		t.Run(name, func(t *testing.T) {
			rep := mustScore(t, ops)
			if rep.Gamma != 0 || rep.Positive != 0 {
				t.Fatalf("Γ %v, %d positive, want 0: %+v", rep.Gamma, rep.Positive, rep.Scores)
			}
			if !linearizable(ops) {
				t.Fatal("porcupine rejects the trace")
			}
		})
	}
}

// TestStaleReadScoresItsStaleness: a read that returns a value overwritten X
// before it started scores X, for X under the gap between the two writes.
func TestStaleReadScoresItsStaleness(t *testing.T) {
	for _, x := range []int64{1, 3, 7, 40} {
		ops := []Op{
			w("k", 1, 0, 1*ms),
			w("k", 2, 100*ms, 101*ms),
			r("k", 1, 101*ms+x*ms, 102*ms+x*ms),
		}
		rep := mustScore(t, ops)
		if got := scoreOf(t, rep, "k", 1); got != time.Duration(x*ms) {
			t.Errorf("X = %d ms: stale value scores %v, want %d ms", x, got, x)
		}
		if got := scoreOf(t, rep, "k", 2); got != 0 {
			t.Errorf("X = %d ms: the newer value scores %v, want 0 (the pair counts once, for the stale value)", x, got)
		}
		if rep.Gamma != time.Duration(x*ms) || rep.Positive != 1 || rep.Values != 2 || rep.Proportion() != 0.5 {
			t.Errorf("X = %d ms: report %+v", x, rep)
		}
		if linearizable(ops) {
			t.Errorf("X = %d ms: porcupine accepts a stale read", x)
		}
	}
}

// TestStaleReadBoundedByWriteGap: when the writes are closer together than
// the staleness, reordering them is cheaper, and Γ is their gap.
func TestStaleReadBoundedByWriteGap(t *testing.T) {
	ops := []Op{w("k", 1, 0, 1*ms), w("k", 2, 3*ms, 4*ms), r("k", 1, 50*ms, 51*ms)}
	rep := mustScore(t, ops)
	if rep.Gamma != 2*time.Millisecond {
		t.Fatalf("Γ %v, want 2ms (w2 may move before w1)", rep.Gamma)
	}
}

func TestReadBeforeItsWrite(t *testing.T) {
	ops := []Op{r("k", 7, 0, 1*ms), w("k", 7, 6*ms, 7*ms)}
	rep := mustScore(t, ops)
	if got := scoreOf(t, rep, "k", 7); got != 5*time.Millisecond {
		t.Fatalf("score %v, want 5ms", got)
	}
}

func TestInitialValueReadAfterAWrite(t *testing.T) {
	ops := []Op{w("k", 1, 0, 1*ms), r("k", Absent, 4*ms, 5*ms)}
	rep := mustScore(t, ops)
	if rep.Gamma == 0 || scoreOf(t, rep, "k", Absent) == 0 || rep.Values != 2 {
		t.Fatalf("stale read of the initial value not scored: %+v", rep)
	}
}

func TestThresholdAndUnmatched(t *testing.T) {
	ops := []Op{
		w("k", 1, 0, 1*ms), w("k", 2, 100*ms, 101*ms), r("k", 1, 102*ms, 103*ms), // scores 1 ms
		w("j", 1, 0, 1*ms), w("j", 2, 100*ms, 101*ms), r("j", 1, 110*ms, 111*ms), // scores 9 ms
		r("k", 99, 0, 1*ms), // no write of 99
	}
	rep, err := Score(ops, Options{Threshold: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Values != 4 || rep.Positive != 1 || rep.Unmatched != 1 || rep.Reads != 3 || rep.Writes != 4 || rep.Gamma != 9*time.Millisecond {
		t.Fatalf("report %+v", rep)
	}
}

func TestBadTraces(t *testing.T) {
	for name, ops := range map[string][]Op{
		"value written twice": {w("k", 1, 0, 1), w("k", 1, 2, 3)},
		"write of absent":     {w("k", Absent, 0, 1)},
		"finish before start": {r("k", 1, 5, 4)},
	} {
		if _, err := Score(ops, Options{}); !errors.Is(err, ErrBadTrace) {
			t.Errorf("%s: err %v, want ErrBadTrace", name, err)
		}
	}
}

// registerModel is porcupine's model of one register per key with unique
// writes: state is the value, Absent at first.
var registerModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, o := range history {
			k := o.Input.(Op).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], o)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return Absent },
	Step: func(state, input, _ any) (bool, any) {
		o := input.(Op)
		if o.Write {
			return true, o.Value
		}
		return state.(uint64) == o.Value, state
	},
	Equal: func(a, b any) bool { return a == b },
}

func linearizable(ops []Op) bool {
	h := make([]porcupine.Operation, len(ops))
	for i, o := range ops {
		h[i] = porcupine.Operation{ClientId: i, Input: o, Call: o.Start, Output: nil, Return: o.Finish}
	}
	return porcupine.CheckOperations(registerModel, h)
}

// TestGammaZeroIffLinearizable: on small random register traces with unique
// writes, Γ = 0 exactly when porcupine finds a linearization. Times are
// small integers, so operations often touch and overlap.
func TestGammaZeroIffLinearizable(t *testing.T) {
	// 20 rounds of rapid's default 100 traces each (more with -rapid.checks).
	for round := range 20 {
		t.Run(fmt.Sprint(round), func(t *testing.T) { rapid.Check(t, checkGammaZeroIffLinearizable) })
	}
}

func checkGammaZeroIffLinearizable(t *rapid.T) {
	nkeys := rapid.IntRange(1, 2).Draw(t, "keys")
	n := rapid.IntRange(1, 7).Draw(t, "ops")
	var ops []Op
	written := map[string][]uint64{}
	next := uint64(1)
	for i := range n {
		key := fmt.Sprintf("k%d", rapid.IntRange(0, nkeys-1).Draw(t, "key"))
		start := int64(rapid.IntRange(0, 20).Draw(t, "start"))
		finish := start + int64(rapid.IntRange(0, 6).Draw(t, "len"))
		if rapid.Bool().Draw(t, fmt.Sprintf("write%d", i)) {
			ops = append(ops, w(key, next, start, finish))
			written[key] = append(written[key], next)
			next++
			continue
		}
		// A read returns a value some write of the key wrote, or the
		// initial value.
		vals := append([]uint64{Absent}, written[key]...)
		ops = append(ops, r(key, rapid.SampledFrom(vals).Draw(t, "value"), start, finish))
	}
	// Reads may be drawn before writes of later values: let some read
	// return a value written later in the slice.
	if len(ops) > 1 && rapid.Bool().Draw(t, "late value") {
		i := rapid.IntRange(0, len(ops)-1).Draw(t, "read")
		if !ops[i].Write && len(written[ops[i].Key]) > 0 {
			ops[i].Value = rapid.SampledFrom(written[ops[i].Key]).Draw(t, "later")
		}
	}
	rep, err := Score(ops, Options{})
	if err != nil {
		t.Fatal(err)
	}
	lin := linearizable(ops)
	if (rep.Gamma == 0) != lin {
		t.Fatalf("Γ = %v but porcupine says linearizable = %v: %v", rep.Gamma, lin, ops)
	}
	// Γ-atomicity: widening every operation by Γ/2 on both sides makes
	// the trace linearizable (Γ rounds up to whole nanoseconds).
	g := rep.Gamma.Nanoseconds()
	wide := make([]Op, len(ops))
	for i, o := range ops {
		o.Start, o.Finish = 2*o.Start-g, 2*o.Finish+g
		wide[i] = o
	}
	if !linearizable(wide) {
		t.Fatalf("widened by Γ = %v the trace is still not linearizable: %v", rep.Gamma, ops)
	}
	// And Γ is the least such widening: 1 ns less is not enough.
	if g > 0 {
		for i, o := range ops {
			o.Start, o.Finish = 2*o.Start-(g-1), 2*o.Finish+(g-1)
			wide[i] = o
		}
		if linearizable(wide) {
			t.Fatalf("widened by Γ-1ns = %dns the trace is already linearizable: %v", g-1, ops)
		}
	}
}
