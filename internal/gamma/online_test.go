package gamma

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestOnlineScoresAfterSettle(t *testing.T) {
	o := NewOnline(OnlineConfig{Settle: 50 * time.Millisecond})
	for _, op := range []Op{w("k", 1, 0, 1*ms), w("j", 1, 0, 1*ms), r("j", 1, 2*ms, 3*ms)} {
		o.Add(op)
	}
	if got := o.Collect(40 * ms); got.Values != 0 {
		t.Fatalf("scored %+v before any write settled", got)
	}
	if got := o.Collect(60 * ms); got.Values != 2 || got.Positive != 0 {
		t.Fatalf("at 60ms: %+v, want k's and j's value 1, fresh", got)
	}
	o.Add(w("k", 2, 100*ms, 101*ms))
	o.Add(r("k", 2, 102*ms, 103*ms))
	if got := o.Collect(120 * ms); got.Values != 0 {
		t.Fatalf("at 120ms: %+v, want nothing (k's value 2 has not settled and is fresh)", got)
	}
	if got := o.Collect(200 * ms); got.Values != 1 || got.Positive != 0 {
		t.Fatalf("at 200ms: %+v, want k's value 2, fresh", got)
	}
	if tot := o.Total(); tot.Values != 3 || tot.Positive != 0 {
		t.Fatalf("total %+v", tot)
	}
}

// TestOnlineCountsStaleValuesAtOnce: a value is counted as stale at the
// first Collect after the read that makes it stale, long before Settle,
// once; a score at or under the threshold waits for Settle.
func TestOnlineCountsStaleValuesAtOnce(t *testing.T) {
	o := NewOnline(OnlineConfig{Settle: time.Second, Threshold: 2 * time.Millisecond})
	o.Add(w("k", 1, 0, 1*ms))
	o.Add(w("j", 1, 0, 1*ms))
	o.Add(w("k", 2, 100*ms, 101*ms))
	o.Add(w("j", 2, 100*ms, 101*ms))
	o.Add(r("k", 1, 105*ms, 106*ms)) // value 1 of k is 4 ms stale
	o.Add(r("j", 1, 102*ms, 103*ms)) // value 1 of j 1 ms: under the threshold
	if got := o.Collect(110 * ms); got.Values != 1 || got.Positive != 1 {
		t.Fatalf("at 110ms: %+v, want k's value 1, stale, at once", got)
	}
	o.Add(r("k", 1, 300*ms, 301*ms)) // stale again: counted already
	if got := o.Collect(500 * ms); got.Values != 0 {
		t.Fatalf("at 500ms: %+v, want nothing", got)
	}
	if got := o.Collect(1050 * ms); got.Values != 1 || got.Positive != 0 {
		t.Fatalf("at 1050ms: %+v, want j's value 1, settled, under the threshold", got)
	}
	if got := o.Collect(1200 * ms); got.Values != 2 || got.Positive != 0 {
		t.Fatalf("at 1200ms: %+v, want k's and j's value 2, fresh", got)
	}
	want, err := Score([]Op{w("k", 1, 0, 1*ms), w("j", 1, 0, 1*ms), w("k", 2, 100*ms, 101*ms), w("j", 2, 100*ms, 101*ms),
		r("k", 1, 105*ms, 106*ms), r("j", 1, 102*ms, 103*ms), r("k", 1, 300*ms, 301*ms)}, Options{Threshold: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if tot := o.Total(); tot.Values != want.Values || tot.Positive != want.Positive {
		t.Fatalf("total %+v, Score %+v", tot, want)
	}
}

// TestOnlineAgreesWithScore: operations fed in finish order and collected
// once everything settled give Score's counts.
func TestOnlineAgreesWithScore(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		var ops []Op
		written := map[string][]uint64{}
		next := uint64(1)
		for range 30 {
			key := fmt.Sprintf("k%d", rng.IntN(3))
			start := int64(rng.IntN(1000)) * 1000
			finish := start + int64(rng.IntN(50))*1000
			if len(written[key]) == 0 || rng.IntN(3) == 0 {
				ops = append(ops, w(key, next, start, finish))
				written[key] = append(written[key], next)
				next++
				continue
			}
			vs := written[key]
			ops = append(ops, r(key, vs[rng.IntN(len(vs))], start, finish))
		}
		want, err := Score(ops, Options{})
		if err != nil {
			t.Fatal(err)
		}
		sorted := slices.Clone(ops)
		slices.SortFunc(sorted, func(a, b Op) int { return int(a.Finish - b.Finish) })
		o := NewOnline(OnlineConfig{Settle: time.Second})
		for _, op := range sorted {
			o.Add(op)
		}
		got := o.Collect(int64(2 * time.Second))
		if got.Values != want.Values || got.Positive != want.Positive {
			t.Fatalf("trial %d: online %+v, Score %+v", trial, got, want)
		}
	}
}

func TestOnlineBounded(t *testing.T) {
	o := NewOnline(OnlineConfig{Settle: time.Millisecond, Horizon: 10 * time.Millisecond, KeepPerKey: 2})
	now := int64(0)
	for i := range 10_000 {
		now = int64(i) * ms
		o.Add(w(fmt.Sprintf("k%d", i%5), uint64(i+1), now, now+ms/2))
		o.Add(r("k0", 9_999_999, now, now+ms/2)) // never written
		if i%10 == 0 {
			o.Collect(now)
		}
	}
	o.Collect(now + 100*ms)
	if n := o.Held(); n > 5*(2*4+64) {
		t.Fatalf("holds %d values after 10,000 writes over 5 keys", n)
	}
	if tot := o.Total(); tot.Values != 10_000 {
		t.Fatalf("scored %d values, want 10,000", tot.Values)
	}
}
