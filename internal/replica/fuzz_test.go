package replica

import (
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/correctables/correctables/internal/state"
)

// FuzzDecodeMessage: whatever a peer sends, decoding never panics, and what
// decodes re-encodes to something that decodes to the same message.
func FuzzDecodeMessage(f *testing.F) {
	for _, m := range []Message{
		{Type: MsgOps, From: 1, To: 2, Ops: []*Req{{ID: OpID{1, 1}, TS: 5, Op: state.Op{Kind: state.OpPut, Key: "k", Value: []byte("v")}}}},
		{Type: MsgSync, From: 2, To: 1, VV: VV{1: 3, 2: 4}, Clock: 99},
		{Type: MsgRaft, From: 1, To: 3, Raft: &raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), To: proto.Uint64(3), From: proto.Uint64(1)}},
		{Type: MsgOps, From: 3, To: 1, Ops: []*Req{{ID: OpID{3, 2}, TS: 7, Strong: true, Ctx: VV{3: 2}, Op: state.Op{Kind: state.OpIncr, Key: "n", Delta: 2}}}},
	} {
		b, err := EncodeMessage(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMessage(b)
		if err != nil {
			return
		}
		b2, err := EncodeMessage(m)
		if err != nil {
			t.Fatalf("re-encoding a decoded message: %v", err)
		}
		m2, err := DecodeMessage(b2)
		if err != nil {
			t.Fatalf("decoding a re-encoded message: %v", err)
		}
		if m2.Type != m.Type || m2.From != m.From || m2.To != m.To || len(m2.Ops) != len(m.Ops) {
			t.Fatalf("round trip changed the message: %+v vs %+v", m, m2)
		}
	})
}
