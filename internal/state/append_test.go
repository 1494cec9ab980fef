package state

import (
	"bytes"
	"testing"
)

// An append extends its value in place when it can (appendTo), but never
// writes bytes that are part of a value someone may still hold: a Get's
// result, a Clone, the value an Undo puts back. Each step below would have
// overwritten such bytes had the room after a value been taken twice.
func TestAppendNeverRewritesAHeldValue(t *testing.T) {
	s := New(Limits{})
	s.Apply(Op{Kind: OpPut, Key: "k", Value: []byte("v")})
	s.Apply(Op{Kind: OpAppend, Key: "k", Value: []byte("0")}) // k's array has room now
	_, ua := s.Apply(Op{Kind: OpAppend, Key: "k", Value: []byte("a")})
	held, _ := s.Apply(Op{Kind: OpGet, Key: "k"}) // "v0a", a tentative read's result
	s.Revert(ua)
	// The rollback put "v0" back; its array's room after it held "a".
	s.Apply(Op{Kind: OpAppend, Key: "k", Value: []byte("b")})
	if got := string(held.Value); got != "v0a" {
		t.Fatalf("a value read before a rollback became %q, want %q", got, "v0a")
	}
	if r, _ := s.Apply(Op{Kind: OpGet, Key: "k"}); string(r.Value) != "v0b" {
		t.Fatalf("k = %q, want %q", r.Value, "v0b")
	}

	// A clone shares the values; whichever appends first takes the room.
	c := s.Clone()
	s.Apply(Op{Kind: OpAppend, Key: "k", Value: []byte("c")})
	c.Apply(Op{Kind: OpAppend, Key: "k", Value: []byte("d")})
	rs, _ := s.Apply(Op{Kind: OpGet, Key: "k"})
	rc, _ := c.Apply(Op{Kind: OpGet, Key: "k"})
	if string(rs.Value) != "v0bc" || string(rc.Value) != "v0bd" {
		t.Fatalf("after appends to a state and its clone: %q and %q, want %q and %q", rs.Value, rc.Value, "v0bc", "v0bd")
	}
	// And the hashes are those of the values computed afresh.
	for _, st := range []*State{s, c} {
		fresh := New(Limits{})
		r, _ := st.Apply(Op{Kind: OpGet, Key: "k"})
		fresh.Apply(Op{Kind: OpPut, Key: "k", Value: r.Value})
		if st.Hash() != fresh.Hash() {
			t.Fatalf("hash of %q built by appends differs from the same value put", r.Value)
		}
	}
}

// A long run of appends to one key keeps the value and its hash exact.
func TestAppendRunMatchesPut(t *testing.T) {
	s := New(Limits{})
	var want []byte
	for i := range 5000 {
		add := bytes.Repeat([]byte{byte(i)}, i%7)
		want = append(want, add...)
		if r, _ := s.Apply(Op{Kind: OpAppend, Key: "k", Value: add}); r.Err != 0 || r.Int != int64(len(want)) {
			t.Fatalf("append %d: %+v, want length %d", i, r, len(want))
		}
	}
	fresh := New(Limits{})
	fresh.Apply(Op{Kind: OpPut, Key: "k", Value: want})
	r, _ := s.Apply(Op{Kind: OpGet, Key: "k"})
	if !bytes.Equal(r.Value, want) || s.Hash() != fresh.Hash() {
		t.Fatalf("after 5,000 appends: value equal %v, hash equal %v", bytes.Equal(r.Value, want), s.Hash() == fresh.Hash())
	}
}
