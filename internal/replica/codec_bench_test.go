package replica

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/correctables/correctables/internal/state"
)

// benchOps returns n strong puts of 100-byte values with a three-origin
// causal context, as the write path of `bench load --workload w` carries.
func benchOps(n int) []*Req {
	ops := make([]*Req, n)
	for i := range ops {
		ops[i] = &Req{
			ID: OpID{Origin: 2, Seq: uint64(1000 + i)}, TS: uint64(1 << 40), Strong: true,
			Ctx: VV{1: 5000, 2: uint64(1000 + i), 3: 4000},
			Op:  state.Op{Kind: state.OpPut, Key: fmt.Sprintf("user%010d", i), Value: make([]byte, 100)},
		}
	}
	return ops
}

// BenchmarkCodec measures the encodings of the write path: the operations
// gossiped to a peer (MsgOps), a raft append carrying them in one entry,
// and decoding both, as a peer does.
func BenchmarkCodec(b *testing.B) {
	ops := benchOps(16)
	gossip := Message{Type: MsgOps, From: 2, To: 1, Ops: ops}
	ent := encodeEntry(entry{Proposer: 2, Ops: ops})
	app := Message{Type: MsgRaft, From: 1, To: 3, Raft: &raftpb.Message{
		Type: raftpb.MsgApp.Enum(), From: proto.Uint64(1), To: proto.Uint64(3), Term: proto.Uint64(2),
		LogTerm: proto.Uint64(2), Index: proto.Uint64(100), Commit: proto.Uint64(99),
		Entries: []*raftpb.Entry{{Term: proto.Uint64(2), Index: proto.Uint64(101), Type: raftpb.EntryNormal.Enum(), Data: ent}},
	}}
	for _, m := range []Message{gossip, app} {
		wire, err := EncodeMessage(m)
		if err != nil {
			b.Fatal(err)
		}
		b.Run("encode/"+m.Type.String(), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := EncodeMessage(m); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("decode/"+m.Type.String(), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := DecodeMessage(wire); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("encodeEntry", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			encodeEntry(entry{Proposer: 2, Ops: ops})
		}
	})
	b.Run("decodeEntry", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeEntry(ent); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestAppendReqLayout: AppendReq writes the documented layout (origin, seq,
// timestamp, strong flag, causal context by ascending origin, then the op's
// encoding behind its length), for ops whose length takes one to three
// varint bytes and contexts of more origins than appendVV sorts on the
// stack; and EncodeMessage ends with the raft message's proto encoding.
func TestAppendReqLayout(t *testing.T) {
	big := VV{}
	for o := uint64(20); o > 0; o-- {
		big[o] = o * 1000
	}
	for _, size := range []int{0, 100, 200, 70_000} {
		for _, ctx := range []VV{nil, {3: 7, 1: 9, 2: 300}, big} {
			q := &Req{ID: OpID{Origin: 3, Seq: 42}, TS: 1 << 50, Strong: ctx != nil, Ctx: ctx,
				Op: state.Op{Kind: state.OpPut, Key: "k", Value: make([]byte, size)}}
			want := binary.AppendUvarint(nil, 3)
			want = binary.AppendUvarint(want, 42)
			want = binary.AppendUvarint(want, 1<<50)
			if q.Strong {
				want = append(want, 1)
			} else {
				want = append(want, 0)
			}
			want = binary.AppendUvarint(want, uint64(len(ctx)))
			for _, o := range slices.Sorted(maps.Keys(ctx)) {
				want = binary.AppendUvarint(binary.AppendUvarint(want, o), ctx[o])
			}
			op := state.EncodeOp(q.Op)
			want = append(binary.AppendUvarint(want, uint64(len(op))), op...)
			prefix := []byte("prefix")
			if got := AppendReq(slices.Clone(prefix), q); !bytes.Equal(got, append(prefix, want...)) {
				t.Fatalf("value %d bytes, ctx %v: AppendReq differs from the layout", size, ctx)
			}
			if n := reqSizeHint(q); n < len(want) || n > len(want)+16 {
				t.Fatalf("value %d bytes, ctx %v: size hint %d for %d bytes", size, ctx, n, len(want))
			}
			got, rest, err := DecodeReq(want)
			if err != nil || len(rest) != 0 || got.ID != q.ID || got.TS != q.TS || !maps.Equal(got.Ctx, q.Ctx) || len(got.Op.Value) != size {
				t.Fatalf("value %d bytes, ctx %v: decoded %+v, rest %d, err %v", size, ctx, got, len(rest), err)
			}
		}
	}
	m := Message{Type: MsgRaft, From: 1, To: 3, VV: big, Raft: &raftpb.Message{
		Type: raftpb.MsgApp.Enum(), From: proto.Uint64(1), To: proto.Uint64(3), Term: proto.Uint64(2),
		Entries: []*raftpb.Entry{{Term: proto.Uint64(2), Index: proto.Uint64(101), Data: encodeEntry(entry{Proposer: 2, Ops: benchOps(3)})}},
	}}
	b, err := EncodeMessage(m)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := proto.Marshal(m.Raft)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(b, rb) {
		t.Fatal("EncodeMessage does not end with the raft message's encoding")
	}
	back, err := DecodeMessage(b)
	if err != nil || !proto.Equal(back.Raft, m.Raft) || !maps.Equal(back.VV, m.VV) {
		t.Fatalf("round trip: %v", err)
	}
}

// TestUvarintLen: uvarintLen is the length binary.AppendUvarint writes.
func TestUvarintLen(t *testing.T) {
	for _, x := range []uint64{0, 1, 127, 128, 16383, 16384, 1<<35 - 1, 1 << 35, 1<<63 - 1, 1 << 63, ^uint64(0)} {
		if got, want := uvarintLen(x), len(binary.AppendUvarint(nil, x)); got != want {
			t.Errorf("uvarintLen(%d) = %d, want %d", x, got, want)
		}
	}
}

// decodeEntryKnown returns the Req the replica holds for an operation with
// the same id, timestamp and strength, and decodes the others (a timestamp
// that differs means another operation: it is decoded, not trusted).
func TestDecodeEntryKnown(t *testing.T) {
	mk := func(origin, seq, ts uint64, strong bool, key string) *Req {
		q := &Req{ID: OpID{origin, seq}, TS: ts, Strong: strong,
			Op: state.Op{Kind: state.OpPut, Key: key, Value: []byte("v-" + key)}}
		if strong {
			q.Ctx = VV{origin: seq, 3: 9}
		}
		return q
	}
	a, b, c := mk(1, 1, 10, true, "a"), mk(2, 5, 11, false, "b"), mk(3, 7, 12, true, "c")
	held := map[OpID]*Req{
		a.ID: mk(1, 1, 10, true, "a"), // the same operation, held
		c.ID: mk(3, 7, 99, true, "c"), // same id, other timestamp
	}
	known := func(id OpID) (*Req, bool) { q, ok := held[id]; return q, ok }
	buf := encodeEntry(entry{Proposer: 2, Ops: []*Req{a, b, c}})
	e, err := decodeEntryKnown(buf, known)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := decodeEntry(buf)
	if err != nil {
		t.Fatal(err)
	}
	if e.Proposer != 2 || len(e.Ops) != 3 {
		t.Fatalf("entry %+v", e)
	}
	if e.Ops[0] != held[a.ID] {
		t.Fatalf("op 0 is %p, want the held Req %p", e.Ops[0], held[a.ID])
	}
	for i := 1; i < 3; i++ {
		if e.Ops[i] == held[e.Ops[i].ID] {
			t.Fatalf("op %d: the held Req, want a decoded one", i)
		}
		got, want := e.Ops[i], plain.Ops[i]
		if got.ID != want.ID || got.TS != want.TS || got.Strong != want.Strong || got.Op.Key != want.Op.Key ||
			string(got.Op.Value) != string(want.Op.Value) || !got.Ctx.Covers(want.Ctx) || !want.Ctx.Covers(got.Ctx) {
			t.Fatalf("op %d decoded as %+v, want %+v", i, got, want)
		}
	}
	// A truncated entry fails whether or not its operations are held.
	if _, err := decodeEntryKnown(buf[:len(buf)-3], known); err == nil {
		t.Fatal("truncated entry decoded")
	}
}
