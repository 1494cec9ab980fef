package replica

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"

	"github.com/correctables/correctables/internal/state"
)

// Sizes at and one past every documented limit (state.Limits), and small
// ones. The codecs must carry all of them: validation, not decoding, is
// what refuses an oversized operation, and a decoder that refuses a valid
// one makes the replica fail-stop on its own log.
var (
	limitKeySizes   = []int{0, 1, state.DefaultMaxKey - 1, state.DefaultMaxKey, state.DefaultMaxKey + 1}
	limitValueSizes = []int{0, 1, state.DefaultMaxValue - 1, state.DefaultMaxValue, state.DefaultMaxValue + 1}
)

// drawBytes draws a byte string of one of the sizes, filled so that a
// decoder that cut or shifted it would be caught, yet cheap to build.
func drawBytes(t *rapid.T, sizes []int, label string) []byte {
	n := rapid.SampledFrom(sizes).Draw(t, label+"-len")
	if n == 0 {
		return nil // the codecs decode empty as nil
	}
	b := bytes.Repeat([]byte{rapid.Byte().Draw(t, label+"-fill")}, n)
	b[0], b[n-1] = 0xA5, 0x5A
	return b
}

func drawKey(t *rapid.T, label string) string { return string(drawBytes(t, limitKeySizes, label)) }

func drawWrites(t *rapid.T, label string) []state.Write {
	n := rapid.IntRange(0, 3).Draw(t, label+"-n")
	if n == 0 {
		return nil
	}
	ws := make([]state.Write, n)
	for i := range ws {
		ws[i].Key = drawKey(t, fmt.Sprint(label, i, "-key"))
		if ws[i].Delete = rapid.Bool().Draw(t, fmt.Sprint(label, i, "-del")); !ws[i].Delete {
			ws[i].Value = drawBytes(t, limitValueSizes, fmt.Sprint(label, i, "-value"))
		}
	}
	return ws
}

// drawOp draws an operation of any kind with keys and values at and around
// the limits. Transactions reach MaxOpBytes (three maximal values) and
// beyond.
func drawOp(t *rapid.T) state.Op {
	kind := rapid.SampledFrom([]state.Kind{state.OpGet, state.OpPut, state.OpDelete, state.OpCAS, state.OpIncr,
		state.OpAppend, state.OpScan, state.OpEnqueue, state.OpDequeue, state.OpTxn, state.OpNoop}).Draw(t, "kind")
	o := state.Op{Kind: kind}
	switch kind {
	case state.OpNoop:
	case state.OpTxn:
		tx := &state.Txn{Then: drawWrites(t, "then"), Else: drawWrites(t, "else")}
		for i := range rapid.IntRange(0, 2).Draw(t, "guards") {
			tx.Guards = append(tx.Guards, state.Guard{
				Key:   drawKey(t, fmt.Sprint("guard", i, "-key")),
				Cmp:   state.CmpEqual,
				Value: drawBytes(t, limitValueSizes, fmt.Sprint("guard", i, "-value")),
			})
		}
		o.Txn = tx
	default:
		o.Key = drawKey(t, "key")
		switch kind {
		case state.OpPut, state.OpAppend, state.OpEnqueue:
			o.Value = drawBytes(t, limitValueSizes, "value")
		case state.OpCAS:
			o.Value = drawBytes(t, limitValueSizes, "value")
			if o.ExpectAbsent = rapid.Bool().Draw(t, "absent"); !o.ExpectAbsent {
				o.Expected = drawBytes(t, limitValueSizes, "expected")
			}
		case state.OpIncr:
			o.Delta = rapid.Int64().Draw(t, "delta")
		case state.OpScan:
			o.Limit = rapid.SampledFrom([]int{0, state.DefaultMaxScan, state.DefaultMaxScan + 1}).Draw(t, "limit")
		}
	}
	return o
}

func drawReq(t *rapid.T) *Req {
	q := &Req{
		ID:     OpID{Origin: rapid.Uint64Min(1).Draw(t, "origin"), Seq: rapid.Uint64Min(1).Draw(t, "seq")},
		TS:     rapid.Uint64().Draw(t, "ts"),
		Strong: rapid.Bool().Draw(t, "strong"),
		Op:     drawOp(t),
	}
	if q.Strong {
		q.Ctx = VV{q.ID.Origin: q.ID.Seq}
		for range rapid.IntRange(0, 3).Draw(t, "ctx") {
			q.Ctx[rapid.Uint64Min(1).Draw(t, "ctx-origin")] = rapid.Uint64().Draw(t, "ctx-seq")
		}
	}
	return q
}

func drawReqs(t *rapid.T) []*Req {
	n := rapid.IntRange(0, 3).Draw(t, "ops")
	if n == 0 {
		return nil
	}
	qs := make([]*Req, n)
	for i := range qs {
		qs[i] = drawReq(t)
	}
	return qs
}

// TestCodecRoundTripAtLimits: whatever operations the limits allow (and
// some they do not), the log entry, the message between replicas and the
// persisted own operations decode to exactly what was encoded. A put of a
// value of exactly DefaultMaxValue used to pass validation and then fail
// to decode from the replica's own log ("count too large"), which
// fail-stopped the leader.
func TestCodecRoundTripAtLimits(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ops := drawReqs(t)

		// Log entry.
		e := entry{Proposer: rapid.Uint64().Draw(t, "proposer"), Ops: ops}
		got, err := decodeEntry(encodeEntry(e))
		if err != nil {
			t.Fatalf("decode entry of %s: %v", describeReqs(ops), err)
		}
		if !reflect.DeepEqual(got, e) {
			t.Fatalf("entry round trip of %s changed it", describeReqs(ops))
		}

		// Messages between replicas: operations, and a raft append that
		// carries the entry.
		for _, m := range []Message{
			{Type: MsgOps, From: 1, To: 2, Ops: ops},
			{Type: MsgSync, From: 2, To: 3, VV: VV{1: 7, 2: 9}, Clock: 42},
			{Type: MsgRaft, From: 3, To: 1, Raft: &raftpb.Message{
				Type: raftpb.MsgApp.Enum(), From: proto.Uint64(3), To: proto.Uint64(1),
				Entries: []*raftpb.Entry{{Index: proto.Uint64(5), Term: proto.Uint64(2), Data: encodeEntry(e)}},
			}},
		} {
			b, err := EncodeMessage(m)
			if err != nil {
				t.Fatalf("encode %v message: %v", m.Type, err)
			}
			got, err := DecodeMessage(b)
			if err != nil {
				t.Fatalf("decode %v message of %s: %v", m.Type, describeReqs(m.Ops), err)
			}
			if !proto.Equal(got.Raft, m.Raft) {
				t.Fatalf("%v message: raft message changed", m.Type)
			}
			got.Raft, m.Raft = nil, nil
			if !reflect.DeepEqual(got, m) {
				t.Fatalf("%v message round trip of %s changed it", m.Type, describeReqs(m.Ops))
			}
		}

		// Persisted own operations: one record each (internal/storage).
		for _, q := range ops {
			got, rest, err := DecodeReq(AppendReq(nil, q))
			if err != nil {
				t.Fatalf("decode own op %s: %v", describeReqs([]*Req{q}), err)
			}
			if len(rest) != 0 || !reflect.DeepEqual(got, q) {
				t.Fatalf("own op round trip of %s changed it (%d bytes left)", describeReqs([]*Req{q}), len(rest))
			}
		}
	})
}

// describeReqs names operations by kind and sizes, not contents (megabytes).
func describeReqs(qs []*Req) string {
	s := "["
	for i, q := range qs {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%v(key %d, value %d, expected %d, size %d)", q.Op.Kind, len(q.Op.Key), len(q.Op.Value), len(q.Op.Expected), q.Op.Size())
	}
	return s + "]"
}

// TestSnapshotOverOneMiBRoundTrips: a replica whose committed state holds
// several values of exactly DefaultMaxValue (several MiB in all) takes a
// snapshot, compacts its log, and a replica restarted from that storage
// restores the snapshot and holds the same state. The snapshot's byte
// lengths used to be capped at 1 MiB by the decoder; with values of half
// the limit the log entries decoded but the snapshot did not.
func TestSnapshotOverOneMiBRoundTrips(t *testing.T) {
	for _, size := range []int{state.DefaultMaxValue / 2, state.DefaultMaxValue} {
		t.Run(fmt.Sprint(size), func(t *testing.T) { testSnapshotRoundTrip(t, size) })
	}
}

func testSnapshotRoundTrip(t *testing.T, size int) {
	const values = 4
	stor := raft.NewMemoryStorage()
	cfg := Config{
		ID: 1, Peers: []uint64{1}, Storage: stor,
		Clock: func() int64 { return 1e12 }, Rand: rand.New(rand.NewPCG(1, 1)),
		SnapshotEntries: 1,
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var snaps int
	var stable []View
	drive := func() {
		t.Helper()
		for r.HasReady() {
			rd, err := r.Ready()
			if err != nil {
				t.Fatalf("replica fail-stops: %v", err)
			}
			if rd.HardState != nil && !raft.IsEmptyHardState(rd.HardState) {
				if err := stor.SetHardState(proto.Clone(rd.HardState).(*raftpb.HardState)); err != nil {
					t.Fatal(err)
				}
			}
			if err := stor.Append(rd.Entries); err != nil {
				t.Fatal(err)
			}
			if cs := rd.CreateSnapshot; cs != nil {
				data, err := cs.Data()
				if err != nil {
					t.Fatal(err)
				}
				if _, err := stor.CreateSnapshot(cs.Index, cs.ConfState, data); err != nil && err != raft.ErrSnapOutOfDate {
					t.Fatal(err)
				}
				if err := stor.Compact(cs.Index); err != nil && err != raft.ErrCompacted {
					t.Fatal(err)
				}
				snaps++
			}
			for _, v := range rd.Views {
				if v.Stable {
					stable = append(stable, v)
				}
			}
			r.Advance(rd)
		}
	}
	// A single replica elects itself within 2*ElectionTicks ticks.
	for i := 0; !r.IsLeader(); i++ {
		if i > 100 {
			t.Fatal("single replica did not become leader in 100 ticks")
		}
		r.Tick()
		drive()
	}
	want := map[string][]byte{}
	for i := range values {
		k := fmt.Sprint("big", i)
		v := bytes.Repeat([]byte{byte('a' + i)}, size)
		want[k] = v
		if err := r.Submit(ClientRequest{Client: 1, Seq: uint64(i + 1), Strong: true, Want: WantStable,
			Op: state.Op{Kind: state.OpPut, Key: k, Value: v}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; len(stable) < values; i++ {
		if i > 200 {
			t.Fatalf("%d of %d strong puts of %d bytes committed in 200 ticks", len(stable), values, size)
		}
		r.Tick()
		drive()
	}
	if snaps == 0 {
		t.Fatal("no snapshot taken")
	}
	snap, err := stor.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if n := len(snap.GetData()); n <= values*size {
		t.Fatalf("snapshot of %d bytes; want over %d", n, values*size)
	}

	// Restart from the storage: the snapshot is the starting point.
	cfg.Rand = rand.New(rand.NewPCG(1, 2))
	r2, err := New(cfg)
	if err != nil {
		t.Fatalf("restart from a %d-byte snapshot: %v", len(snap.GetData()), err)
	}
	if got, want := r2.CommittedStateHash(), r.CommittedStateHash(); got != want {
		t.Fatalf("restored state hash %x, want %x", got, want)
	}
	for k, v := range want {
		if got := r2.execRead(state.Op{Kind: state.OpGet, Key: k}); !bytes.Equal(got.Value, v) {
			t.Fatalf("restored %s: %d bytes, want %d", k, len(got.Value), len(v))
		}
	}
}
