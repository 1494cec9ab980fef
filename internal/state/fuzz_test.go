package state

import (
	"bytes"
	"errors"
	"testing"
)

func seedOps() []Op {
	return []Op{
		{},
		{Kind: OpGet, Key: "k"},
		{Kind: OpPut, Key: "k", Value: b("v")},
		{Kind: OpCAS, Key: "k", Expected: b("a"), Value: b("b")},
		{Kind: OpCAS, Key: "k", ExpectAbsent: true, Value: b("b")},
		{Kind: OpIncr, Key: "n", Delta: -12345},
		{Kind: OpScan, Key: "p/", Limit: 10},
		{Kind: OpEnqueue, Key: "q", Value: b("ticket")},
		{Kind: OpDequeue, Key: "q"},
		{Kind: OpNoop},
		{Kind: OpTxn, Txn: &Txn{
			Guards: []Guard{{Key: "a", Cmp: CmpEqual, Value: b("1")}, {Key: "b", Cmp: CmpAbsent}},
			Then:   []Write{{Key: "a", Value: b("2")}},
			Else:   []Write{{Delete: true, Key: "a"}},
		}},
	}
}

// FuzzDecodeOp: DecodeOp never panics, errors wrap ErrCorrupt, and whatever
// decodes re-encodes to the same bytes (the encoding is canonical) and can be
// applied.
func FuzzDecodeOp(f *testing.F) {
	for _, op := range seedOps() {
		f.Add(EncodeOp(op))
	}
	f.Add([]byte{})
	f.Add([]byte{2, 0, 0x80, 0x00, 0, 0, 0, 0})       // overlong varint
	f.Add([]byte{2, 0, 0xff, 0xff, 0xff, 0xff, 0x0f}) // huge length
	f.Fuzz(func(t *testing.T, in []byte) {
		op, err := DecodeOp(in)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		if out := EncodeOp(op); !bytes.Equal(out, in) {
			t.Fatalf("re-encode differs:\n in %x\nout %x", in, out)
		}
		s := New(Limits{})
		before := s.Clone()
		r, u := s.Apply(op)
		if r.Err != CodeOK && !s.Equal(before) {
			t.Fatalf("failed op changed the state")
		}
		s.Revert(u)
		if !s.Equal(before) {
			t.Fatalf("revert did not restore the state")
		}
	})
}

// FuzzDecodeResult: DecodeResult never panics and round-trips canonically.
func FuzzDecodeResult(f *testing.F) {
	for _, r := range []Result{
		{},
		{Err: CodeNotInteger},
		{Found: true, Value: b("v")},
		{OK: true, Value: b("t"), Int: 42, Len: 7},
		{Int: -1},
		{OK: true, Items: []KV{{"a", b("1")}, {"b", nil}}},
	} {
		f.Add(EncodeResult(r))
	}
	f.Add([]byte{0, 4, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		r, err := DecodeResult(in)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		if out := EncodeResult(r); !bytes.Equal(out, in) {
			t.Fatalf("re-encode differs:\n in %x\nout %x", in, out)
		}
	})
}

// FuzzUnmarshal: a snapshot from the network never panics the decoder, a
// failed one leaves the state alone, and a good one is a valid state.
func FuzzUnmarshal(f *testing.F) {
	s := New(Limits{})
	for _, op := range seedOps() {
		s.Apply(op)
	}
	s.Apply(Op{Kind: OpEnqueue, Key: "q", Value: b("2")})
	snap, _ := s.MarshalBinary()
	f.Add(snap)
	f.Add([]byte{1, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		st := New(Limits{})
		st.Apply(Op{Kind: OpPut, Key: "x", Value: b("y")})
		before := st.Clone()
		if err := st.UnmarshalBinary(in); err != nil {
			if !errors.Is(err, ErrCorrupt) || !st.Equal(before) {
				t.Fatalf("failed unmarshal: %v, state changed: %v", err, !st.Equal(before))
			}
			return
		}
		checkInvariants(t, st)
		if out, _ := st.MarshalBinary(); !bytes.Equal(out, in) {
			t.Fatalf("re-marshal differs")
		}
	})
}
