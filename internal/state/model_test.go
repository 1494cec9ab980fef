package state

import (
	"bytes"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// The reference model: the naive implementation the State must agree with,
// op for op (a metamorphic test in the sense of pebble's). It shares only
// Op.Validate with the package; execution is written out from the documented
// semantics, with plain maps and slices.

type refQueue struct {
	items [][]byte
	next  uint64 // sequence number of the next enqueued item
}

type refState struct {
	lim Limits
	kv  map[string][]byte
	qs  map[string]*refQueue
}

func newRef(l Limits) *refState {
	l.EnsureDefaults()
	return &refState{lim: l, kv: map[string][]byte{}, qs: map[string]*refQueue{}}
}

func (m *refState) apply(op Op) Result {
	if err := op.Validate(m.lim); err != nil {
		return Result{Err: CodeOf(err)}
	}
	cp := func(b []byte) []byte { return append([]byte(nil), b...) }
	switch op.Kind {
	case OpGet:
		v, ok := m.kv[op.Key]
		return Result{Found: ok, Value: v}
	case OpPut:
		v, ok := m.kv[op.Key]
		m.kv[op.Key] = cp(op.Value)
		return Result{Found: ok, Value: v}
	case OpDelete:
		v, ok := m.kv[op.Key]
		delete(m.kv, op.Key)
		return Result{Found: ok, Value: v}
	case OpCAS:
		v, ok := m.kv[op.Key]
		match := (op.ExpectAbsent && !ok) || (!op.ExpectAbsent && ok && bytes.Equal(v, op.Expected))
		if match {
			m.kv[op.Key] = cp(op.Value)
		}
		return Result{OK: match, Found: ok, Value: v}
	case OpIncr:
		v, ok := m.kv[op.Key]
		var n int64
		if ok {
			var err error
			if n, err = strconv.ParseInt(string(v), 10, 64); err != nil {
				return Result{Err: CodeNotInteger}
			}
		}
		sum := n + op.Delta
		if (op.Delta > 0 && sum < n) || (op.Delta < 0 && sum > n) {
			return Result{Err: CodeOverflow}
		}
		m.kv[op.Key] = []byte(strconv.FormatInt(sum, 10))
		return Result{Found: ok, Int: sum}
	case OpAppend:
		v, ok := m.kv[op.Key]
		nv := append(cp(v), op.Value...)
		if len(nv) > m.lim.MaxValue {
			return Result{Err: CodeValueTooLarge}
		}
		m.kv[op.Key] = nv
		return Result{Found: ok, Int: int64(len(nv))}
	case OpScan:
		var keys []string
		for k := range m.kv {
			if strings.HasPrefix(k, op.Key) {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		limit := op.Limit
		if limit == 0 {
			limit = m.lim.MaxScan
		}
		r := Result{OK: len(keys) <= limit}
		for _, k := range keys[:min(limit, len(keys))] {
			r.Items = append(r.Items, KV{k, m.kv[k]})
		}
		return r
	case OpEnqueue:
		q := m.qs[op.Key]
		if q == nil {
			q = &refQueue{next: 1}
			m.qs[op.Key] = q
		}
		q.items = append(q.items, cp(op.Value))
		q.next++
		return Result{Int: int64(q.next - 1), Len: int64(len(q.items))}
	case OpDequeue:
		q := m.qs[op.Key]
		if q == nil || len(q.items) == 0 {
			return Result{}
		}
		seq := q.next - uint64(len(q.items))
		v := q.items[0]
		q.items = q.items[1:]
		return Result{OK: true, Value: v, Int: int64(seq), Len: int64(len(q.items))}
	case OpTxn:
		r := Result{OK: true}
		seen := map[string]bool{}
		for _, g := range op.Txn.Guards {
			v, ok := m.kv[g.Key]
			var holds bool
			switch g.Cmp {
			case CmpEqual:
				holds = ok && bytes.Equal(v, g.Value)
			case CmpNotEqual:
				holds = !(ok && bytes.Equal(v, g.Value))
			case CmpExists:
				holds = ok
			case CmpAbsent:
				holds = !ok
			case CmpLess:
				holds = ok && string(v) < string(g.Value)
			case CmpGreater:
				holds = ok && string(v) > string(g.Value)
			}
			r.OK = r.OK && holds
			if ok && !seen[g.Key] {
				seen[g.Key] = true
				r.Items = append(r.Items, KV{g.Key, v})
			}
		}
		slices.SortFunc(r.Items, func(a, b KV) int { return strings.Compare(a.Key, b.Key) })
		ws := op.Txn.Then
		if !r.OK {
			ws = op.Txn.Else
		}
		for _, w := range ws {
			if w.Delete {
				delete(m.kv, w.Key)
			} else {
				m.kv[w.Key] = cp(w.Value)
			}
		}
		return r
	case OpNoop:
		return Result{}
	}
	panic("unreachable")
}

// fataler is what both *testing.T and *rapid.T provide.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

// sameAs reports whether s holds exactly the model's contents.
func (m *refState) sameAs(t fataler, s *State) {
	t.Helper()
	if s.keys.Len() != len(m.kv) {
		t.Fatalf("state has %d keys, model %d", s.keys.Len(), len(m.kv))
	}
	for k, v := range m.kv {
		e, ok := s.get(k)
		if !ok || !bytes.Equal(e.value, v) {
			t.Fatalf("key %q: state %q (found %v), model %q", k, e.value, ok, v)
		}
	}
	nq := 0
	for name, mq := range m.qs {
		if mq.next == 1 {
			continue
		}
		nq++
		q := s.queues[name]
		if q == nil || q.next != mq.next || q.n != len(mq.items) {
			t.Fatalf("queue %q: state %+v, model %+v", name, q, mq)
		}
		for i, v := range mq.items {
			if !bytes.Equal(q.at(i), v) {
				t.Fatalf("queue %q item %d: state %q, model %q", name, i, q.at(i), v)
			}
		}
	}
	if nq != len(s.queues) {
		t.Fatalf("state has %d queues, model %d", len(s.queues), nq)
	}
}

// checkInvariants recomputes from scratch what State maintains incrementally.
func checkInvariants(t fataler, s *State) {
	t.Helper()
	var h uint64
	s.keys.Ascend(func(e entry) bool {
		if e.h != entryHash(e.key, e.value) {
			t.Fatalf("key %q: stale cached hash", e.key)
		}
		h += e.h
		return true
	})
	for name, q := range s.queues {
		if q.next <= 1 || uint64(q.n) >= q.next {
			t.Fatalf("queue %q: n %d, next %d", name, q.n, q.next)
		}
		if len(q.buf)&(len(q.buf)-1) != 0 || q.n > len(q.buf) {
			t.Fatalf("queue %q: n %d, cap %d", name, q.n, len(q.buf))
		}
		for i := 0; i < q.n; i++ {
			h += itemHash(name, q.headSeq()+uint64(i), q.at(i))
		}
		h += queueHash(name, q.next)
	}
	if h != s.hash {
		t.Fatalf("incremental hash %#x, recomputed %#x", s.hash, h)
	}
}

// Generators. Small key, value and limit spaces so that ops collide, hit
// every error path and every edge (empty queue, scan cut at the limit).

var testLimits = Limits{MaxKey: 3, MaxValue: 20, MaxScan: 3, MaxTxnOps: 4}

var (
	genKey = rapid.SampledFrom([]string{"a", "", "ab", "abc", "abcd", "b", "ba", "a"})
	genVal = rapid.SampledFrom([][]byte{
		nil, {}, []byte("1"), []byte("-3"), []byte("+7"), []byte("x"), []byte("abc"),
		[]byte("9223372036854775807"), []byte("123456789012345678901"),
	})
	genDelta = rapid.SampledFrom([]int64{0, 1, -1, 5, math.MaxInt64, math.MinInt64})
)

func genWrites(t *rapid.T, label string) []Write {
	return rapid.SliceOfN(rapid.Custom(func(t *rapid.T) Write {
		w := Write{Delete: rapid.Bool().Draw(t, "del"), Key: genKey.Draw(t, "key")}
		if !w.Delete || rapid.IntRange(0, 20).Draw(t, "oddvalue") == 0 {
			w.Value = genVal.Draw(t, "value")
		}
		return w
	}), 0, 3).Draw(t, label)
}

var genOp = rapid.Custom(func(t *rapid.T) Op {
	// rapid favours the ends of a range: keep the invalid kinds in the middle
	// so that most ops are valid.
	k := rapid.SampledFrom([]Kind{
		OpGet, OpPut, OpDelete, OpCAS, OpIncr, OpAppend, 0, OpPut, OpScan,
		maxKind + 1, OpEnqueue, OpDequeue, OpEnqueue, OpTxn, OpNoop, OpGet,
	}).Draw(t, "kind")
	o := Op{Kind: k}
	if k != OpTxn && k != OpNoop {
		o.Key = genKey.Draw(t, "key")
	}
	switch k {
	case OpPut, OpAppend, OpEnqueue:
		o.Value = genVal.Draw(t, "value")
	case OpCAS:
		o.Value = genVal.Draw(t, "value")
		o.ExpectAbsent = rapid.IntRange(0, 3).Draw(t, "absent") == 0
		if !o.ExpectAbsent || rapid.IntRange(0, 10).Draw(t, "odd") == 0 {
			o.Expected = genVal.Draw(t, "expected")
		}
	case OpIncr:
		o.Delta = genDelta.Draw(t, "delta")
	case OpScan:
		o.Limit = rapid.IntRange(-1, 4).Draw(t, "limit")
	case OpTxn:
		o.Txn = &Txn{
			Guards: rapid.SliceOfN(rapid.Custom(func(t *rapid.T) Guard {
				g := Guard{Key: genKey.Draw(t, "key"), Cmp: Cmp(rapid.IntRange(0, int(maxCmp)+1).Draw(t, "cmp"))}
				if (g.Cmp != CmpExists && g.Cmp != CmpAbsent) || rapid.IntRange(0, 10).Draw(t, "odd") == 0 {
					g.Value = genVal.Draw(t, "value")
				}
				return g
			}), 0, 3).Draw(t, "guards"),
			Then: genWrites(t, "then"),
			Else: genWrites(t, "else"),
		}
	}
	// Now and then a field the kind does not use.
	switch rapid.IntRange(0, 60).Draw(t, "stray") {
	case 27:
		o.Delta = 1
	case 28:
		o.Limit = 1
	case 29:
		o.Txn = &Txn{}
	case 30:
		o.Value = []byte("v")
	}
	return o
})

// opsEqual compares ops treating nil and empty slices alike.
func opsEqual(a, b Op) bool {
	if a.Kind != b.Kind || a.Key != b.Key || !bytes.Equal(a.Value, b.Value) ||
		!bytes.Equal(a.Expected, b.Expected) || a.ExpectAbsent != b.ExpectAbsent ||
		a.Delta != b.Delta || a.Limit != b.Limit || (a.Txn == nil) != (b.Txn == nil) {
		return false
	}
	if a.Txn == nil {
		return true
	}
	if !slices.EqualFunc(a.Txn.Guards, b.Txn.Guards, func(x, y Guard) bool {
		return x.Key == y.Key && x.Cmp == y.Cmp && bytes.Equal(x.Value, y.Value)
	}) {
		return false
	}
	we := func(x, y Write) bool { return x.Delete == y.Delete && x.Key == y.Key && bytes.Equal(x.Value, y.Value) }
	return slices.EqualFunc(a.Txn.Then, b.Txn.Then, we) && slices.EqualFunc(a.Txn.Else, b.Txn.Else, we)
}

// TestModel: State and the reference model give identical results and end in
// the same contents over random op sequences.
func TestModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s, m := New(testLimits), newRef(testLimits)
		for i, op := range rapid.SliceOfN(genOp, 10, 200).Draw(t, "ops") {
			got, _ := s.Apply(op)
			want := m.apply(op)
			if !got.Equal(want) {
				t.Fatalf("op %d %+v:\n got %+v\nwant %+v", i, op, got, want)
			}
		}
		m.sameAs(t, s)
		checkInvariants(t, s)
	})
}

// TestRevertSuffix: Creek's rollback. Reverting a suffix in LIFO order gives
// back a state Equal (and of equal Hash and snapshot) to the one before the
// suffix; re-executing the suffix gives the same results again.
func TestRevertSuffix(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ops := rapid.SliceOfN(genOp, 5, 150).Draw(t, "ops")
		cut := rapid.IntRange(0, len(ops)).Draw(t, "cut")
		s := New(testLimits)
		for _, op := range ops[:cut] {
			s.Apply(op)
		}
		before := s.Clone()
		snap, _ := s.MarshalBinary()
		var undos []Undo
		var results []Result
		for _, op := range ops[cut:] {
			r, u := s.Apply(op)
			results = append(results, r)
			undos = append(undos, u)
		}
		for i := len(undos) - 1; i >= 0; i-- {
			s.Revert(undos[i])
			checkInvariants(t, s)
		}
		if !s.Equal(before) || s.Hash() != before.Hash() {
			t.Fatalf("state after revert differs from state before the suffix")
		}
		if got, _ := s.MarshalBinary(); !bytes.Equal(got, snap) {
			t.Fatalf("snapshot after revert differs")
		}
		for i, op := range ops[cut:] {
			if r, _ := s.Apply(op); !r.Equal(results[i]) {
				t.Fatalf("re-execution of op %d: got %+v, first time %+v", i, r, results[i])
			}
		}
	})
}

// TestUndoMatchesChange: an op whose Undo says it changed nothing left the
// state Equal, and one that changed it is undone by its own Revert.
func TestUndoMatchesChange(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := New(testLimits)
		for _, op := range rapid.SliceOfN(genOp, 0, 40).Draw(t, "prefix") {
			s.Apply(op)
		}
		before := s.Clone()
		op := genOp.Draw(t, "op")
		r, u := s.Apply(op)
		if r.Err != CodeOK && !s.Equal(before) {
			t.Fatalf("op %+v failed with %v but changed the state", op, r.Err)
		}
		if !u.Changed() && !s.Equal(before) {
			t.Fatalf("op %+v changed the state with a zero Undo", op)
		}
		if op.ReadOnly() && u.Changed() {
			t.Fatalf("read-only op %+v returned an Undo", op)
		}
		s.Revert(u)
		if !s.Equal(before) {
			t.Fatalf("Revert of %+v did not restore the state", op)
		}
	})
}

// TestCloneIndependent: ops on a clone never show in the original and vice
// versa.
func TestCloneIndependent(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := New(testLimits)
		for _, op := range rapid.SliceOfN(genOp, 0, 40).Draw(t, "prefix") {
			s.Apply(op)
		}
		c := s.Clone()
		if !c.Equal(s) || c.Hash() != s.Hash() {
			t.Fatalf("clone differs from original")
		}
		sSnap, _ := s.MarshalBinary()
		for _, op := range rapid.SliceOfN(genOp, 0, 40).Draw(t, "onclone") {
			c.Apply(op)
		}
		if got, _ := s.MarshalBinary(); !bytes.Equal(got, sSnap) {
			t.Fatalf("ops on the clone changed the original")
		}
		checkInvariants(t, s)
		cSnap, _ := c.MarshalBinary()
		for _, op := range rapid.SliceOfN(genOp, 0, 40).Draw(t, "onorig") {
			s.Apply(op)
		}
		if got, _ := c.MarshalBinary(); !bytes.Equal(got, cSnap) {
			t.Fatalf("ops on the original changed the clone")
		}
		checkInvariants(t, c)
	})
}

// TestSnapshotRoundTrip: Unmarshal(Marshal(s)) is Equal to s with the same
// Hash, and behaves the same afterwards.
func TestSnapshotRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := New(testLimits)
		for _, op := range rapid.SliceOfN(genOp, 0, 60).Draw(t, "ops") {
			s.Apply(op)
		}
		b, err := s.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		// BinarySize is exact (a snapshot's buffer is sized by it), and
		// AppendBinary appends the same encoding behind a prefix.
		if n := s.BinarySize(); n != len(b) {
			t.Fatalf("BinarySize %d, encoding of %d bytes", n, len(b))
		}
		if a := s.AppendBinary([]byte("prefix")); !bytes.Equal(a, append([]byte("prefix"), b...)) {
			t.Fatalf("AppendBinary differs from MarshalBinary")
		}
		r := New(testLimits)
		if err := r.UnmarshalBinary(b); err != nil {
			t.Fatalf("unmarshal: %v", err)
		}
		checkInvariants(t, r)
		if !r.Equal(s) || r.Hash() != s.Hash() || r.Len() != s.Len() {
			t.Fatalf("round trip differs")
		}
		if b2, _ := r.MarshalBinary(); !bytes.Equal(b, b2) {
			t.Fatalf("re-marshal differs")
		}
		for _, op := range rapid.SliceOfN(genOp, 0, 20).Draw(t, "after") {
			r1, _ := s.Apply(op)
			r2, _ := r.Apply(op)
			if !r1.Equal(r2) {
				t.Fatalf("after round trip, %+v: %+v vs %+v", op, r1, r2)
			}
		}
	})
}

// TestCodecRoundTrip: ops and results survive encoding, and the encoding is
// canonical.
func TestCodecRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		op := genOp.Draw(t, "op")
		b := EncodeOp(op)
		got, err := DecodeOp(b)
		if err != nil {
			t.Fatalf("decode %+v: %v", op, err)
		}
		if !opsEqual(op, got) {
			t.Fatalf("op round trip: %+v -> %+v", op, got)
		}
		if !bytes.Equal(EncodeOp(got), b) {
			t.Fatalf("op encoding not canonical")
		}
		s := New(testLimits)
		for _, o := range rapid.SliceOfN(genOp, 0, 20).Draw(t, "prefix") {
			s.Apply(o)
		}
		res, _ := s.Apply(op)
		rb := EncodeResult(res)
		gr, err := DecodeResult(rb)
		if err != nil || !gr.Equal(res) {
			t.Fatalf("result round trip: %+v -> %+v, %v", res, gr, err)
		}
	})
}
