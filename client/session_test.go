package client

import (
	"testing"
	"time"

	"github.com/correctables/correctables/correctable"
)

// stamp builds a stamp from a version vector and a committed count.
func stamp(v vv, committed uint64) Stamp {
	return Stamp{VV: v, CommittedCount: committed}
}

func writeStamp(v vv, committed uint64, origin, seq uint64) Stamp {
	s := stamp(v, committed)
	s.Op = OpID{Origin: origin, Seq: seq}
	return s
}

// TestSessionRules checks every guarantee's rule on session histories that
// satisfy it and histories that violate it (docs/consistency.md).
func TestSessionRules(t *testing.T) {
	const pre, fin = false, true
	type step struct {
		op     Op
		st     Stamp
		stable bool
	}
	cases := []struct {
		name    string
		history []step
		op      Op
		st      Stamp
		stable  bool
		want    Consistency
		holds   bool
	}{
		// read-my-writes
		{"rmw: preliminary view holds the write", []step{{Put("k", nil), writeStamp(vv{1: 5}, 0, 1, 5), pre}},
			Get("k"), stamp(vv{1: 5, 2: 1}, 0), pre, Guarantee(correctable.ReadMyWrites), true},
		{"rmw: preliminary view lacks the write", []step{{Put("k", nil), writeStamp(vv{1: 5}, 0, 1, 5), pre}},
			Get("k"), stamp(vv{1: 4, 2: 9}, 3), pre, Guarantee(correctable.ReadMyWrites), false},
		{"rmw: a write to another key does not count", []step{{Put("j", nil), writeStamp(vv{1: 5}, 0, 1, 5), pre}},
			Get("k"), stamp(vv{}, 0), pre, Guarantee(correctable.ReadMyWrites), true},
		{"rmw: a scan needs every write", []step{{Put("j", nil), writeStamp(vv{1: 5}, 0, 1, 5), pre}},
			Scan("", 0), stamp(vv{1: 4}, 0), pre, Guarantee(correctable.ReadMyWrites), false},
		{"rmw: final view after the write committed", []step{{Put("k", nil), writeStamp(vv{1: 5}, 7, 1, 5), fin}},
			Get("k"), stamp(vv{}, 7), fin, Guarantee(correctable.ReadMyWrites), true},
		{"rmw: final view of a shorter prefix", []step{{Put("k", nil), writeStamp(vv{1: 5}, 7, 1, 5), fin}},
			Get("k"), stamp(vv{1: 9}, 6), fin, Guarantee(correctable.ReadMyWrites), false},
		{"rmw: final view while the write is tentative", []step{{Put("k", nil), writeStamp(vv{1: 5}, 2, 1, 5), pre}},
			Get("k"), stamp(vv{1: 9}, 100), fin, Guarantee(correctable.ReadMyWrites), false},
		{"rmw: a transaction writes each of its keys", []step{{Txn(nil, []Write{PutWrite("k", nil)}, nil), writeStamp(vv{2: 3}, 0, 2, 3), pre}},
			Get("k"), stamp(vv{2: 2}, 0), pre, Guarantee(correctable.ReadMyWrites), false},
		// monotonic reads
		{"mr: later view covers the earlier one", []step{{Get("k"), stamp(vv{1: 3, 2: 4}, 2), pre}},
			Get("k"), stamp(vv{1: 3, 2: 5}, 2), pre, Guarantee(correctable.MonotonicReads), true},
		{"mr: later view misses an operation", []step{{Get("k"), stamp(vv{1: 3, 2: 4}, 2), pre}},
			Get("k"), stamp(vv{1: 9, 2: 3}, 9), pre, Guarantee(correctable.MonotonicReads), false},
		{"mr: another key's read does not count", []step{{Get("j"), stamp(vv{1: 3}, 0), pre}},
			Get("k"), stamp(vv{}, 0), pre, Guarantee(correctable.MonotonicReads), true},
		{"mr: preliminary after final, prefix long enough", []step{{Get("k"), stamp(vv{1: 3}, 4), fin}},
			Get("k"), stamp(vv{1: 3}, 4), pre, Guarantee(correctable.MonotonicReads), true},
		{"mr: preliminary after final, prefix too short", []step{{Get("k"), stamp(vv{1: 3}, 4), fin}},
			Get("k"), stamp(vv{1: 30}, 3), pre, Guarantee(correctable.MonotonicReads), false},
		{"mr: final after preliminary is not claimed", []step{{Get("k"), stamp(vv{1: 3}, 0), pre}},
			Get("k"), stamp(vv{1: 3}, 50), fin, Guarantee(correctable.MonotonicReads), false},
		// causal
		{"causal: covers reads and writes of every key", []step{
			{Get("a"), stamp(vv{1: 3}, 1), pre}, {Put("b", nil), writeStamp(vv{2: 2}, 1, 2, 2), pre}},
			Get("c"), stamp(vv{1: 3, 2: 2}, 1), pre, Guarantee(correctable.Causal), true},
		{"causal: misses a read of another key", []step{
			{Get("a"), stamp(vv{1: 3}, 1), pre}, {Put("b", nil), writeStamp(vv{2: 2}, 1, 2, 2), pre}},
			Get("c"), stamp(vv{1: 2, 2: 2}, 1), pre, Guarantee(correctable.Causal), false},
		{"causal: misses a write to another key", []step{
			{Get("a"), stamp(vv{1: 3}, 1), pre}, {Put("b", nil), writeStamp(vv{2: 2}, 1, 2, 2), pre}},
			Get("c"), stamp(vv{1: 3, 2: 1}, 1), pre, Guarantee(correctable.Causal), false},
		// bounded staleness (now is fixed at 100 s after the epoch below)
		{"bounded: stable time within the bound", nil,
			Get("k"), Stamp{StableTime: uint64(98_000) << hlcLogicalBits}, pre, Bounded(3 * time.Second), true},
		{"bounded: stable time too old", nil,
			Get("k"), Stamp{StableTime: uint64(90_000) << hlcLogicalBits}, pre, Bounded(3 * time.Second), false},
		{"bounded: no stable time", nil,
			Get("k"), Stamp{}, pre, Bounded(time.Hour), false},
		{"bounded: a final view is never stale", nil,
			Get("k"), Stamp{}, fin, Bounded(0), true},
		// strong and eventual
		{"strong: final view", nil, Get("k"), stamp(vv{}, 1), fin, Guarantee(correctable.Strong), true},
		{"strong: preliminary view", nil, Get("k"), stamp(vv{1: 99}, 99), pre, Guarantee(correctable.Strong), false},
		{"eventual: always", []step{{Put("k", nil), writeStamp(vv{1: 5}, 0, 1, 5), pre}},
			Get("k"), stamp(vv{}, 0), pre, Guarantee(correctable.Eventual), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := NewSession()
			s.now = func() time.Time { return time.UnixMilli(100_000) }
			for _, h := range tc.history {
				s.Observe(h.op, h.st, h.stable)
			}
			g := s.Check(tc.op, tc.st, tc.stable)
			if got := g.Satisfies(tc.want); got != tc.holds {
				t.Fatalf("%v: Satisfies(%v) = %v, want %v (guarantees %v)", tc.name, tc.want, got, tc.holds, g)
			}
		})
	}
}

// TestSessionWriteLifecycle: a write counts for final views only once its
// own final view has arrived.
func TestSessionWriteLifecycle(t *testing.T) {
	s := NewSession()
	put := Put("k", []byte("v"))
	s.Observe(put, writeStamp(vv{1: 1}, 0, 1, 1), false)
	if s.Check(Get("k"), stamp(vv{}, 10), true).ReadMyWrites {
		t.Fatal("a final view claims a write that has not committed")
	}
	s.Observe(put, writeStamp(vv{1: 1}, 3, 1, 1), true)
	if !s.Check(Get("k"), stamp(vv{}, 3), true).ReadMyWrites {
		t.Fatal("a final view at the write's committed count is not read-my-writes")
	}
	if s.Check(Get("k"), stamp(vv{}, 2), true).ReadMyWrites {
		t.Fatal("a final view before the write's committed count claims it")
	}
	if len(s.pending) != 0 || s.allWrites.Pending != 0 || s.writes["k"].Pending != 0 {
		t.Fatalf("pending writes left: %v", s.pending)
	}
}

func TestParseConsistency(t *testing.T) {
	for in, want := range map[string]Consistency{
		"strong":         Guarantee(correctable.Strong),
		"Causal":         Guarantee(correctable.Causal),
		"monotonic":      Guarantee(correctable.MonotonicReads),
		"read-my-writes": Guarantee(correctable.ReadMyWrites),
		"eventual":       Guarantee(correctable.Eventual),
		"bounded(300)":   Bounded(300 * time.Second),
		"bounded(1.5s)":  Bounded(1500 * time.Millisecond),
	} {
		got, err := ParseConsistency(in)
		if err != nil || got != want {
			t.Errorf("ParseConsistency(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "linearizable", "bounded()", "bounded(-1)", "bounded(soon)", "bounded(3"} {
		if _, err := ParseConsistency(in); err == nil {
			t.Errorf("ParseConsistency(%q) accepted", in)
		}
	}
}

func TestSessionJSONRoundTrip(t *testing.T) {
	s := NewSession()
	s.Observe(Put("k", nil), writeStamp(vv{1: 2}, 0, 1, 2), false)
	s.Observe(Get("j"), stamp(vv{1: 2, 3: 4}, 5), false)
	b, err := s.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	r := NewSession()
	if err := r.UnmarshalJSON(b); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		op Op
		st Stamp
	}{{Get("k"), stamp(vv{1: 1}, 9)}, {Get("k"), stamp(vv{1: 2}, 9)}, {Get("j"), stamp(vv{1: 2, 3: 3}, 9)}, {Get("j"), stamp(vv{1: 2, 3: 4}, 9)}} {
		if a, b := s.Check(c.op, c.st, false), r.Check(c.op, c.st, false); a.ReadMyWrites != b.ReadMyWrites || a.MonotonicReads != b.MonotonicReads || a.Causal != b.Causal {
			t.Errorf("%v at %v: before saving %v, after %v", c.op, c.st.VV, a, b)
		}
	}
	if err := r.UnmarshalJSON([]byte(`{"all_writes":{"pending":2}}`)); err == nil {
		t.Error("inconsistent pending count accepted")
	}
	if err := r.UnmarshalJSON([]byte(`{"reads":`)); err == nil {
		t.Error("truncated JSON accepted")
	}
}
