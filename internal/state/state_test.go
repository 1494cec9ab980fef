package state

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"
)

func b(s string) []byte { return []byte(s) }

// step is one op of a scenario and the result it must give.
type step struct {
	op   Op
	want Result
}

func runSteps(t *testing.T, s *State, steps []step) {
	t.Helper()
	for i, st := range steps {
		got, _ := s.Apply(st.op)
		if !got.Equal(st.want) {
			t.Fatalf("step %d %v %+v:\n got %+v\nwant %+v", i, st.op.Kind, st.op, got, st.want)
		}
		checkInvariants(t, s)
	}
}

func TestKeyOps(t *testing.T) {
	runSteps(t, New(Limits{}), []step{
		{Op{Kind: OpGet, Key: "k"}, Result{}},
		{Op{Kind: OpPut, Key: "k", Value: b("v1")}, Result{}},
		{Op{Kind: OpGet, Key: "k"}, Result{Found: true, Value: b("v1")}},
		{Op{Kind: OpPut, Key: "k", Value: b("v2")}, Result{Found: true, Value: b("v1")}},
		{Op{Kind: OpPut, Key: "e"}, Result{}},
		{Op{Kind: OpGet, Key: "e"}, Result{Found: true}},
		{Op{Kind: OpDelete, Key: "k"}, Result{Found: true, Value: b("v2")}},
		{Op{Kind: OpDelete, Key: "k"}, Result{}},
		{Op{Kind: OpGet, Key: "k"}, Result{}},
		{Op{Kind: OpNoop}, Result{}},
	})
}

func TestCAS(t *testing.T) {
	runSteps(t, New(Limits{}), []step{
		{Op{Kind: OpCAS, Key: "k", Expected: b("x"), Value: b("y")}, Result{}},
		{Op{Kind: OpCAS, Key: "k", ExpectAbsent: true, Value: b("a")}, Result{OK: true}},
		{Op{Kind: OpCAS, Key: "k", ExpectAbsent: true, Value: b("b")}, Result{Found: true, Value: b("a")}},
		{Op{Kind: OpCAS, Key: "k", Expected: b("z"), Value: b("b")}, Result{Found: true, Value: b("a")}},
		{Op{Kind: OpCAS, Key: "k", Expected: b("a"), Value: b("b")}, Result{OK: true, Found: true, Value: b("a")}},
		{Op{Kind: OpGet, Key: "k"}, Result{Found: true, Value: b("b")}},
		// An empty Expected matches an existing empty value only.
		{Op{Kind: OpCAS, Key: "e", Value: b("x")}, Result{}},
		{Op{Kind: OpPut, Key: "e"}, Result{}},
		{Op{Kind: OpCAS, Key: "e", Value: b("x")}, Result{OK: true, Found: true}},
	})
}

func TestIncr(t *testing.T) {
	runSteps(t, New(Limits{}), []step{
		{Op{Kind: OpIncr, Key: "n", Delta: 5}, Result{Int: 5}},
		{Op{Kind: OpIncr, Key: "n", Delta: -7}, Result{Found: true, Int: -2}},
		{Op{Kind: OpGet, Key: "n"}, Result{Found: true, Value: b("-2")}},
		{Op{Kind: OpIncr, Key: "z"}, Result{Int: 0}},
		{Op{Kind: OpGet, Key: "z"}, Result{Found: true, Value: b("0")}},
		{Op{Kind: OpPut, Key: "n", Value: b("9223372036854775806")}, Result{Found: true, Value: b("-2")}},
		{Op{Kind: OpIncr, Key: "n", Delta: 1}, Result{Found: true, Int: math.MaxInt64}},
		{Op{Kind: OpIncr, Key: "n", Delta: 1}, Result{Err: CodeOverflow}},
		{Op{Kind: OpPut, Key: "m", Value: b("-9223372036854775808")}, Result{}},
		{Op{Kind: OpIncr, Key: "m", Delta: -1}, Result{Err: CodeOverflow}},
		{Op{Kind: OpPut, Key: "s", Value: b("abc")}, Result{}},
		{Op{Kind: OpIncr, Key: "s", Delta: 1}, Result{Err: CodeNotInteger}},
		{Op{Kind: OpPut, Key: "s"}, Result{Found: true, Value: b("abc")}},
		{Op{Kind: OpIncr, Key: "s", Delta: 1}, Result{Err: CodeNotInteger}},
	})
}

func TestAppend(t *testing.T) {
	runSteps(t, New(Limits{MaxValue: 5}), []step{
		{Op{Kind: OpAppend, Key: "a", Value: b("ab")}, Result{Int: 2}},
		{Op{Kind: OpAppend, Key: "a", Value: b("cd")}, Result{Found: true, Int: 4}},
		{Op{Kind: OpAppend, Key: "a", Value: b("ef")}, Result{Err: CodeValueTooLarge}},
		{Op{Kind: OpGet, Key: "a"}, Result{Found: true, Value: b("abcd")}},
	})
}

func TestScan(t *testing.T) {
	s := New(Limits{MaxScan: 3})
	for _, k := range []string{"b", "a/3", "a/1", "a", "a/2", "a/4", "c"} {
		s.Apply(Op{Kind: OpPut, Key: k, Value: b("v" + k)})
	}
	kvs := func(keys ...string) []KV {
		var out []KV
		for _, k := range keys {
			out = append(out, KV{k, b("v" + k)})
		}
		return out
	}
	runSteps(t, s, []step{
		{Op{Kind: OpScan, Key: "a/"}, Result{Items: kvs("a/1", "a/2", "a/3")}}, // cut at MaxScan
		{Op{Kind: OpScan, Key: "a/", Limit: 2}, Result{Items: kvs("a/1", "a/2")}},
		{Op{Kind: OpScan, Key: "a/4"}, Result{OK: true, Items: kvs("a/4")}},
		{Op{Kind: OpScan, Key: "b"}, Result{OK: true, Items: kvs("b")}},
		{Op{Kind: OpScan, Key: "d"}, Result{OK: true}},
		{Op{Kind: OpScan, Key: "a/", Limit: 4}, Result{Err: CodeBadArgs}},
		{Op{Kind: OpScan, Key: "a/", Limit: -1}, Result{Err: CodeBadArgs}},
	})
}

// TestQueue: FIFO order, sequence numbers counting every item ever enqueued,
// an empty dequeue that is not an error, and queues separate from keys.
func TestQueue(t *testing.T) {
	runSteps(t, New(Limits{}), []step{
		{Op{Kind: OpDequeue, Key: "q"}, Result{}},
		{Op{Kind: OpEnqueue, Key: "q", Value: b("t1")}, Result{Int: 1, Len: 1}},
		{Op{Kind: OpEnqueue, Key: "q", Value: b("t2")}, Result{Int: 2, Len: 2}},
		{Op{Kind: OpEnqueue, Key: "r", Value: b("r1")}, Result{Int: 1, Len: 1}},
		{Op{Kind: OpGet, Key: "q"}, Result{}}, // a queue is not a key
		{Op{Kind: OpPut, Key: "q", Value: b("k")}, Result{}},
		{Op{Kind: OpDequeue, Key: "q"}, Result{OK: true, Value: b("t1"), Int: 1, Len: 1}},
		{Op{Kind: OpDequeue, Key: "q"}, Result{OK: true, Value: b("t2"), Int: 2, Len: 0}},
		{Op{Kind: OpDequeue, Key: "q"}, Result{}},
		{Op{Kind: OpEnqueue, Key: "q", Value: b("t3")}, Result{Int: 3, Len: 1}},
		{Op{Kind: OpDequeue, Key: "q"}, Result{OK: true, Value: b("t3"), Int: 3}},
		{Op{Kind: OpGet, Key: "q"}, Result{Found: true, Value: b("k")}},
	})
}

// TestQueueRing: many pushes and pops through growth, wrap-around and
// shrinking, with dequeue reverts pushing the head back.
func TestQueueRing(t *testing.T) {
	s := New(Limits{})
	var undos []Undo
	var states []*State
	for i := 0; i < 300; i++ {
		states = append(states, s.Clone())
		op := Op{Kind: OpEnqueue, Key: "q", Value: b(strings.Repeat("x", i%7))}
		if i%3 == 2 {
			op = Op{Kind: OpDequeue, Key: "q"}
		}
		_, u := s.Apply(op)
		undos = append(undos, u)
	}
	for i := 0; i < 250; i++ { // drain, through shrinking
		states = append(states, s.Clone())
		_, u := s.Apply(Op{Kind: OpDequeue, Key: "q"})
		undos = append(undos, u)
	}
	checkInvariants(t, s)
	for i := len(undos) - 1; i >= 0; i-- {
		s.Revert(undos[i])
		if !s.Equal(states[i]) {
			t.Fatalf("revert %d: state differs", i)
		}
	}
	checkInvariants(t, s)
	if s.Len() != 0 || s.Hash() != 0 || len(s.queues) != 0 {
		t.Fatalf("fully reverted state is not empty: len %d hash %#x", s.Len(), s.Hash())
	}
}

func TestTxn(t *testing.T) {
	txn := func(tx Txn) Op { return Op{Kind: OpTxn, Txn: &tx} }
	runSteps(t, New(Limits{MaxTxnOps: 5}), []step{
		{txn(Txn{}), Result{OK: true}},
		{txn(Txn{
			Guards: []Guard{{Key: "a", Cmp: CmpAbsent}},
			Then:   []Write{{Key: "a", Value: b("1")}, {Key: "b", Value: b("2")}},
			Else:   []Write{{Key: "x", Value: b("no")}},
		}), Result{OK: true}},
		{txn(Txn{
			Guards: []Guard{{Key: "b", Cmp: CmpEqual, Value: b("2")}, {Key: "a", Cmp: CmpGreater, Value: b("1")}, {Key: "b", Cmp: CmpExists}},
			Then:   []Write{{Key: "x", Value: b("yes")}},
		}), Result{Items: []KV{{"a", b("1")}, {"b", b("2")}}}}, // a > "1" fails: Else (empty)
		{Op{Kind: OpGet, Key: "x"}, Result{}},
		{txn(Txn{
			Guards: []Guard{{Key: "a", Cmp: CmpLess, Value: b("2")}, {Key: "zz", Cmp: CmpNotEqual, Value: b("v")}},
			Then:   []Write{{Delete: true, Key: "a"}, {Key: "c", Value: b("3")}, {Key: "c", Value: b("4")}},
		}), Result{OK: true, Items: []KV{{"a", b("1")}}}},
		{Op{Kind: OpScan}, Result{OK: true, Items: []KV{{"b", b("2")}, {"c", b("4")}}}},
		// All-or-nothing: an invalid write anywhere rejects the whole txn.
		{txn(Txn{Then: []Write{{Key: "d", Value: b("1")}, {Delete: true, Key: "b", Value: b("x")}}}), Result{Err: CodeBadArgs}},
		{txn(Txn{Guards: []Guard{{Key: "a", Cmp: 0}}}), Result{Err: CodeUnknownOp}},
		{txn(Txn{Guards: []Guard{{Key: "a", Cmp: CmpExists, Value: b("1")}}}), Result{Err: CodeBadArgs}},
		{txn(Txn{Guards: make([]Guard, 2), Then: make([]Write, 2), Else: make([]Write, 2)}), Result{Err: CodeTooManyOps}},
		{Op{Kind: OpTxn}, Result{Err: CodeBadArgs}},
		{Op{Kind: OpGet, Key: "d"}, Result{}},
	})
}

// TestErrorsChangeNothing: every invalid op, and every op that fails on the
// state, gives its code and leaves the state Equal, with the same Hash and
// snapshot, and a zero Undo.
func TestErrorsChangeNothing(t *testing.T) {
	l := Limits{MaxKey: 4, MaxValue: 8, MaxScan: 5, MaxTxnOps: 2}
	s := New(l)
	for _, op := range []Op{
		{Kind: OpPut, Key: "k", Value: b("v")},
		{Kind: OpPut, Key: "s", Value: b("str")},
		{Kind: OpPut, Key: "big", Value: b("12345678")},
		{Kind: OpPut, Key: "max", Value: b("9223372036854775807")[:8]},
		{Kind: OpEnqueue, Key: "q", Value: b("t")},
	} {
		s.Apply(op)
	}
	s.Apply(Op{Kind: OpIncr, Key: "n", Delta: math.MaxInt64})
	long := strings.Repeat("k", 5)
	big := b(strings.Repeat("v", 9))
	cases := []struct {
		name string
		op   Op
		want Code
	}{
		{"zero op", Op{}, CodeUnknownOp},
		{"unknown kind", Op{Kind: 200}, CodeUnknownOp},
		{"get long key", Op{Kind: OpGet, Key: long}, CodeKeyTooLarge},
		{"get with value", Op{Kind: OpGet, Key: "k", Value: b("x")}, CodeBadArgs},
		{"put long key", Op{Kind: OpPut, Key: long, Value: b("v")}, CodeKeyTooLarge},
		{"put big value", Op{Kind: OpPut, Key: "k", Value: big}, CodeValueTooLarge},
		{"put with delta", Op{Kind: OpPut, Key: "k", Delta: 1}, CodeBadArgs},
		{"put with limit", Op{Kind: OpPut, Key: "k", Limit: 1}, CodeBadArgs},
		{"put with txn", Op{Kind: OpPut, Key: "k", Txn: &Txn{}}, CodeBadArgs},
		{"put with expected", Op{Kind: OpPut, Key: "k", Expected: b("v")}, CodeBadArgs},
		{"delete with absent", Op{Kind: OpDelete, Key: "k", ExpectAbsent: true}, CodeBadArgs},
		{"cas absent and expected", Op{Kind: OpCAS, Key: "k", ExpectAbsent: true, Expected: b("v")}, CodeBadArgs},
		{"cas big expected", Op{Kind: OpCAS, Key: "k", Expected: big}, CodeValueTooLarge},
		{"cas big value", Op{Kind: OpCAS, Key: "k", Expected: b("v"), Value: big}, CodeValueTooLarge},
		{"incr non-integer", Op{Kind: OpIncr, Key: "s", Delta: 1}, CodeNotInteger},
		{"incr overflow", Op{Kind: OpIncr, Key: "n", Delta: 1}, CodeOverflow},
		{"incr with value", Op{Kind: OpIncr, Key: "n", Value: b("1")}, CodeBadArgs},
		{"append too large", Op{Kind: OpAppend, Key: "big", Value: b("x")}, CodeValueTooLarge},
		{"scan over limit", Op{Kind: OpScan, Limit: 6}, CodeBadArgs},
		{"scan long prefix", Op{Kind: OpScan, Key: long}, CodeKeyTooLarge},
		{"enqueue big", Op{Kind: OpEnqueue, Key: "q", Value: big}, CodeValueTooLarge},
		{"enqueue long name", Op{Kind: OpEnqueue, Key: long, Value: b("t")}, CodeKeyTooLarge},
		{"dequeue with value", Op{Kind: OpDequeue, Key: "q", Value: b("t")}, CodeBadArgs},
		{"noop with key", Op{Kind: OpNoop, Key: "k"}, CodeBadArgs},
		{"txn with key", Op{Kind: OpTxn, Key: "k", Txn: &Txn{}}, CodeBadArgs},
		{"txn too many", Op{Kind: OpTxn, Txn: &Txn{Guards: []Guard{{Key: "k", Cmp: CmpExists}}, Then: make([]Write, 2)}}, CodeTooManyOps},
		{"txn long write key", Op{Kind: OpTxn, Txn: &Txn{Then: []Write{{Key: "k", Value: b("1")}, {Key: long}}}}, CodeKeyTooLarge},
		{"txn big write", Op{Kind: OpTxn, Txn: &Txn{Then: []Write{{Key: "k", Value: b("1")}, {Key: "x", Value: big}}}}, CodeValueTooLarge},
		{"txn big guard", Op{Kind: OpTxn, Txn: &Txn{Guards: []Guard{{Key: "k", Cmp: CmpEqual, Value: big}}}}, CodeValueTooLarge},
		{"txn bad cmp", Op{Kind: OpTxn, Txn: &Txn{Guards: []Guard{{Key: "k", Cmp: 99}}}}, CodeUnknownOp},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := s.Clone()
			hash := s.Hash()
			snap, _ := s.MarshalBinary()
			r, u := s.Apply(c.op)
			if !r.Equal(Result{Err: c.want}) {
				t.Fatalf("got %+v, want only Err %v", r, c.want)
			}
			if u.Changed() {
				t.Fatalf("error returned a non-zero Undo")
			}
			if !s.Equal(before) || s.Hash() != hash {
				t.Fatalf("state changed")
			}
			if got, _ := s.MarshalBinary(); !bytes.Equal(got, snap) {
				t.Fatalf("snapshot changed")
			}
			if err := c.op.Validate(l); c.want != CodeNotInteger && c.want != CodeOverflow && c.want != CodeValueTooLarge || err != nil {
				if CodeOf(err) != c.want || !errors.Is(err, c.want.Err()) {
					t.Fatalf("Validate = %v, want %v", err, c.want.Err())
				}
			}
		})
	}
}

// TestRevertUnderLaterWritePanics: a revert under a later write to the
// same key or queue, which would leave this state unlike every other
// replica's, panics; whatever the kind of the two writes.
func TestRevertUnderLaterWritePanics(t *testing.T) {
	for _, c := range []struct {
		name         string
		first, later Op
	}{
		{"put under put", Op{Kind: OpPut, Key: "a", Value: b("1")}, Op{Kind: OpPut, Key: "a", Value: b("2")}},
		{"put under delete", Op{Kind: OpPut, Key: "a", Value: b("1")}, Op{Kind: OpDelete, Key: "a"}},
		{"delete under put", Op{Kind: OpDelete, Key: "z"}, Op{Kind: OpPut, Key: "z", Value: b("2")}},
		{"txn under put", Op{Kind: OpTxn, Txn: &Txn{Then: []Write{{Key: "a", Value: b("1")}, {Key: "b", Value: b("1")}}}},
			Op{Kind: OpPut, Key: "b", Value: b("2")}},
		{"enqueue under enqueue", Op{Kind: OpEnqueue, Key: "q", Value: b("1")}, Op{Kind: OpEnqueue, Key: "q", Value: b("2")}},
		{"dequeue under dequeue", Op{Kind: OpDequeue, Key: "p"}, Op{Kind: OpDequeue, Key: "p"}},
		{"enqueue under dequeue", Op{Kind: OpEnqueue, Key: "q", Value: b("1")}, Op{Kind: OpDequeue, Key: "q"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := New(Limits{})
			s.Apply(Op{Kind: OpPut, Key: "z", Value: b("0")})
			s.Apply(Op{Kind: OpEnqueue, Key: "p", Value: b("x")})
			s.Apply(Op{Kind: OpEnqueue, Key: "p", Value: b("y")})
			_, u := s.Apply(c.first)
			if !u.Changed() {
				t.Fatal("first op changed nothing")
			}
			if _, later := s.Apply(c.later); !later.Changed() {
				t.Fatal("later op changed nothing")
			}
			defer func() {
				if recover() == nil {
					t.Fatal("Revert under a later write did not panic")
				}
			}()
			s.Revert(u)
		})
	}
}

// TestRevertCommutingOutOfOrder: operations on other keys and queues may
// stay applied while an earlier one is reverted (the replica's rollbacks
// only where necessary, Creek §4.4): the state is then the one the others
// alone give.
func TestRevertCommutingOutOfOrder(t *testing.T) {
	ops := []Op{
		{Kind: OpPut, Key: "a", Value: b("1")},
		{Kind: OpPut, Key: "b", Value: b("2")},
		{Kind: OpEnqueue, Key: "q", Value: b("x")},
		{Kind: OpTxn, Txn: &Txn{Then: []Write{{Key: "c", Value: b("3")}, {Key: "d", Delete: true}}}},
		{Kind: OpDelete, Key: "e"},
	}
	base := New(Limits{})
	base.Apply(Op{Kind: OpPut, Key: "d", Value: b("4")})
	base.Apply(Op{Kind: OpPut, Key: "e", Value: b("5")})
	// Revert each op first, with all the later ones still applied; the
	// result must equal applying all the others.
	for skip := range ops {
		s := base.Clone()
		var undos []Undo
		for _, op := range ops {
			_, u := s.Apply(op)
			undos = append(undos, u)
		}
		s.Revert(undos[skip])
		want := base.Clone()
		for i, op := range ops {
			if i != skip {
				want.Apply(op)
			}
		}
		if !s.Equal(want) {
			t.Fatalf("reverting op %d under the others: state differs from applying the others", skip)
		}
		for i := len(undos) - 1; i >= 0; i-- {
			if i != skip {
				s.Revert(undos[i])
			}
		}
		if !s.Equal(base) {
			t.Fatalf("reverting op %d, then the rest: not back at the base", skip)
		}
	}
}

// TestRevertOnClone: Undo records taken before a Clone revert the clone too,
// leaving the original alone.
func TestRevertOnClone(t *testing.T) {
	s := New(Limits{})
	s.Apply(Op{Kind: OpPut, Key: "a", Value: b("1")})
	before := s.Clone()
	_, u := s.Apply(Op{Kind: OpPut, Key: "a", Value: b("2")})
	c := s.Clone()
	c.Revert(u)
	if !c.Equal(before) || c.Equal(s) {
		t.Fatal("revert on clone")
	}
}

// TestApplyCopiesInput: the caller may reuse an op's buffers.
func TestApplyCopiesInput(t *testing.T) {
	s := New(Limits{})
	v := b("abc")
	s.Apply(Op{Kind: OpPut, Key: "k", Value: v})
	s.Apply(Op{Kind: OpEnqueue, Key: "q", Value: v})
	s.Apply(Op{Kind: OpTxn, Txn: &Txn{Then: []Write{{Key: "t", Value: v}}}})
	copy(v, "xyz")
	for _, op := range []Op{{Kind: OpGet, Key: "k"}, {Kind: OpDequeue, Key: "q"}, {Kind: OpGet, Key: "t"}} {
		if r, _ := s.Apply(op); string(r.Value) != "abc" {
			t.Fatalf("%v: stored value aliases the op: %q", op.Kind, r.Value)
		}
	}
}

// TestApplyOwnedKeepsOpsMemory: ApplyOwned stores the op's values as they
// are (no copy), and an append to a value a put stored writes into memory
// of its own, never past the end of the op's value.
func TestApplyOwnedKeepsOpsMemory(t *testing.T) {
	s := New(Limits{})
	v := make([]byte, 3, 16)
	copy(v, "abc")
	s.ApplyOwned(Op{Kind: OpPut, Key: "k", Value: v})
	if r, _ := s.Apply(Op{Kind: OpGet, Key: "k"}); string(r.Value) != "abc" || &r.Value[0] != &v[0] {
		t.Fatalf("get after an owned put: %q, a copy: %v", r.Value, &r.Value[0] != &v[0])
	}
	s.ApplyOwned(Op{Kind: OpAppend, Key: "k", Value: []byte("de")})
	if got := v[:5]; string(got) != "abc\x00\x00" {
		t.Fatalf("append wrote into the put's op memory: %q", got)
	}
	if r, _ := s.Apply(Op{Kind: OpGet, Key: "k"}); string(r.Value) != "abcde" {
		t.Fatalf("after append: %q", r.Value)
	}
}

// TestHashOrderIndependent: the same contents reached in different orders
// hash alike; a pinned value guards against the hash changing across
// versions or platforms.
func TestHashOrderIndependent(t *testing.T) {
	a, c := New(Limits{}), New(Limits{})
	ops := []Op{
		{Kind: OpPut, Key: "x", Value: b("1")},
		{Kind: OpPut, Key: "y", Value: b("2")},
		{Kind: OpEnqueue, Key: "q", Value: b("t")},
	}
	for i := range ops {
		a.Apply(ops[i])
		c.Apply(ops[len(ops)-1-i])
	}
	if a.Hash() != c.Hash() || !a.Equal(c) {
		t.Fatal("order-dependent hash")
	}
	if a.Hash() == 0 {
		t.Fatal("zero hash for non-empty state")
	}
	// Replicas of different builds compare hashes, and `snapshot save`
	// and `restore` print it: changing the hash is a change users see (it
	// last changed when values went in as their XXH64 digest).
	if got := a.Hash(); got != 0xc665c1d5439d4189 {
		t.Fatalf("hash changed: %#x", got)
	}
	// Same keys and values, but one is a queue item and one a key.
	d := New(Limits{})
	d.Apply(Op{Kind: OpPut, Key: "q", Value: b("t")})
	if d.Hash() == New(Limits{}).Hash() {
		t.Fatal("hash ignores content")
	}
}

func TestReadOnly(t *testing.T) {
	for _, c := range []struct {
		op   Op
		want bool
	}{
		{Op{Kind: OpGet}, true},
		{Op{Kind: OpScan}, true},
		{Op{Kind: OpNoop}, false},
		{Op{Kind: OpPut}, false},
		{Op{Kind: OpDequeue}, false},
		{Op{Kind: OpTxn, Txn: &Txn{Guards: []Guard{{Key: "a", Cmp: CmpExists}}}}, true},
		{Op{Kind: OpTxn, Txn: &Txn{Else: []Write{{Key: "a"}}}}, false},
	} {
		if got := c.op.ReadOnly(); got != c.want {
			t.Errorf("%+v.ReadOnly() = %v", c.op, got)
		}
	}
}

func TestLimits(t *testing.T) {
	var l Limits
	l.EnsureDefaults()
	if l != DefaultLimits() {
		t.Fatalf("EnsureDefaults = %+v", l)
	}
	if err := (Limits{MaxScan: -1}).Validate(); !errors.Is(err, ErrBadArgs) {
		t.Fatalf("negative limit: %v", err)
	}
	if New(Limits{MaxKey: 7}).Limits().MaxKey != 7 {
		t.Fatal("New ignores limits")
	}
}

func TestUnmarshalRejects(t *testing.T) {
	s := New(Limits{})
	s.Apply(Op{Kind: OpPut, Key: "a", Value: b("1")})
	s.Apply(Op{Kind: OpPut, Key: "b", Value: b("2")})
	s.Apply(Op{Kind: OpEnqueue, Key: "q", Value: b("t")})
	good, _ := s.MarshalBinary()
	before := s.Clone()
	for name, bad := range map[string][]byte{
		"empty":    nil,
		"version":  append([]byte{2}, good[1:]...),
		"trailing": append(append([]byte(nil), good...), 0),
		"short":    good[:len(good)-1],
		"order":    {1, 2, 1, 'b', 1, '2', 1, 'a', 1, '1', 0},
		"next":     {1, 0, 1, 1, 'q', 1, 0},
		"items":    {1, 0, 1, 1, 'q', 2, 2, 1, 'x', 1, 'y'},
	} {
		if err := s.UnmarshalBinary(bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: err = %v", name, err)
		}
		if !s.Equal(before) {
			t.Fatalf("%s: failed unmarshal changed the state", name)
		}
	}
	var z State
	if err := z.UnmarshalBinary(good); err != nil || !z.Equal(s) || z.Limits() != DefaultLimits() {
		t.Fatalf("unmarshal into zero State: %v", err)
	}
}

func TestStrings(t *testing.T) {
	if OpDequeue.String() != "dequeue" || Kind(0).String() != "Kind(0)" ||
		CmpLess.String() != "<" || CodeNotInteger.String() != "NotInteger" || Code(99).String() != "Code(99)" {
		t.Fatal("String")
	}
	if CodeOK.Err() != nil || Code(99).Err() != ErrUnknownOp || CodeOf(nil) != CodeOK || CodeOf(errors.New("x")) != CodeBadArgs {
		t.Fatal("codes")
	}
}
