package state

import (
	"strconv"
	"testing"
)

func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "key/" + strconv.Itoa(i)
	}
	return keys
}

func filled(b *testing.B, keys []string) *State {
	s := New(Limits{})
	for _, k := range keys {
		s.Apply(Op{Kind: OpPut, Key: k, Value: []byte("value-0123456789")})
	}
	return s
}

func BenchmarkApplyPut(b *testing.B) {
	keys := benchKeys(1 << 16)
	s := filled(b, keys)
	v := []byte("value-abcdefghij")
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		s.Apply(Op{Kind: OpPut, Key: keys[i&(len(keys)-1)], Value: v})
	}
}

// BenchmarkApplyPutLarge: a put of a 256 KiB value (the state copies and
// hashes it).
func BenchmarkApplyPutLarge(b *testing.B) {
	keys := benchKeys(64)
	s := filled(b, keys)
	v := make([]byte, 256<<10)
	b.SetBytes(int64(len(v)))
	for i := 0; b.Loop(); i++ {
		s.Apply(Op{Kind: OpPut, Key: keys[i&(len(keys)-1)], Value: v})
	}
}

func BenchmarkApplyGet(b *testing.B) {
	keys := benchKeys(1 << 16)
	s := filled(b, keys)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if r, _ := s.Apply(Op{Kind: OpGet, Key: keys[i&(len(keys)-1)]}); !r.Found {
			b.Fatal("missing key")
		}
	}
}

// BenchmarkApplyRevert: the cost of one tentative execution rolled back, as
// Creek does on reordering.
func BenchmarkApplyRevert(b *testing.B) {
	keys := benchKeys(1 << 16)
	s := filled(b, keys)
	v := []byte("value-abcdefghij")
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		_, u := s.Apply(Op{Kind: OpPut, Key: keys[i&(len(keys)-1)], Value: v})
		s.Revert(u)
	}
}

// BenchmarkApplyRevertSuffix: roll back and re-execute a 100-op suffix.
func BenchmarkApplyRevertSuffix(b *testing.B) {
	keys := benchKeys(1 << 16)
	s := filled(b, keys)
	v := []byte("value-abcdefghij")
	undos := make([]Undo, 100)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		for j := range undos {
			_, undos[j] = s.Apply(Op{Kind: OpPut, Key: keys[(i*100+j)&(len(keys)-1)], Value: v})
		}
		for j := len(undos) - 1; j >= 0; j-- {
			s.Revert(undos[j])
		}
	}
}

// BenchmarkDequeue: dequeue (and its revert) from a queue of 1e5 items costs
// O(1), not O(length).
func BenchmarkDequeue(b *testing.B) {
	s := New(Limits{})
	for i := 0; i < 100_000; i++ {
		s.Apply(Op{Kind: OpEnqueue, Key: "tickets", Value: []byte(strconv.Itoa(i))})
	}
	b.ReportAllocs()
	for b.Loop() {
		r, u := s.Apply(Op{Kind: OpDequeue, Key: "tickets"})
		if !r.OK {
			b.Fatal("empty")
		}
		s.Revert(u)
	}
}

// BenchmarkDrain: dequeue without revert, refilling when empty.
func BenchmarkDrain(b *testing.B) {
	s := New(Limits{})
	v := []byte("ticket")
	b.ReportAllocs()
	for b.Loop() {
		if r, _ := s.Apply(Op{Kind: OpDequeue, Key: "tickets"}); !r.OK {
			b.StopTimer()
			for i := 0; i < 100_000; i++ {
				s.Apply(Op{Kind: OpEnqueue, Key: "tickets", Value: v})
			}
			b.StartTimer()
		}
	}
}

func BenchmarkScan(b *testing.B) {
	keys := benchKeys(1 << 16)
	s := filled(b, keys)
	b.ReportAllocs()
	for b.Loop() {
		if r, _ := s.Apply(Op{Kind: OpScan, Key: "key/1234", Limit: 100}); len(r.Items) != 11 {
			b.Fatalf("scan returned %d items", len(r.Items))
		}
	}
}

func BenchmarkEncodeDecodeOp(b *testing.B) {
	op := Op{Kind: OpCAS, Key: "key/1234", Expected: []byte("old"), Value: []byte("new-value")}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeOp(EncodeOp(op)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkApplyAppendRollback: what a replica does when an older append
// to a key arrives (Creek §4.4): the 64 appends of 32 bytes executed on a
// value of about 256 KiB are undone, newest first, and executed again over
// the newcomer. One op is the whole round (65 appends, 64 undos).
func BenchmarkApplyAppendRollback(b *testing.B) {
	s := New(Limits{})
	s.Apply(Op{Kind: OpPut, Key: "k", Value: make([]byte, 256<<10)})
	add := make([]byte, 32)
	undos := make([]Undo, 0, 64)
	for range 64 {
		_, u := s.Apply(Op{Kind: OpAppend, Key: "k", Value: add})
		undos = append(undos, u)
	}
	b.ReportAllocs()
	for b.Loop() {
		for i := len(undos) - 1; i >= 0; i-- {
			s.Revert(undos[i])
		}
		undos = undos[:0]
		s.Apply(Op{Kind: OpAppend, Key: "k", Value: add}) // the newcomer, kept
		for range 64 {
			_, u := s.Apply(Op{Kind: OpAppend, Key: "k", Value: add})
			undos = append(undos, u)
		}
		if e, _ := s.get("k"); len(e.value) > 320<<10 {
			for i := len(undos) - 1; i >= 0; i-- {
				s.Revert(undos[i])
			}
			undos = undos[:0]
			s.Apply(Op{Kind: OpPut, Key: "k", Value: make([]byte, 256<<10)})
			for range 64 {
				_, u := s.Apply(Op{Kind: OpAppend, Key: "k", Value: add})
				undos = append(undos, u)
			}
		}
	}
}

// BenchmarkApplyAppendRun: a run of appends of 32 bytes to one key (a
// replica executing a stream of them), from a 256 KiB value.
func BenchmarkApplyAppendRun(b *testing.B) {
	s := New(Limits{})
	s.Apply(Op{Kind: OpPut, Key: "k", Value: make([]byte, 256<<10)})
	add := make([]byte, 32)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		s.Apply(Op{Kind: OpAppend, Key: "k", Value: add})
		if i%8192 == 8191 {
			s.Apply(Op{Kind: OpPut, Key: "k", Value: make([]byte, 256<<10)})
		}
	}
}
