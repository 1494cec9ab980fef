package server

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/internal/state"
)

// FuzzDecodeRequest feeds arbitrary bytes through what the server does with
// a client request before the replica sees it: protobuf decoding, the
// conversion to a state operation, and validation. Nothing may panic; an
// operation that passes validation applies to a state and reverts cleanly,
// and one that fails changes nothing. CI runs it briefly (.ci/run).
func FuzzDecodeRequest(f *testing.F) {
	seeds := []*api.InvokeRequest{
		{Op: put("k", "v"), Preliminary: true, Final: true, Strong: true},
		{Op: &api.Op{Kind: api.Kind_KIND_GET, Key: "k"}, Preliminary: true},
		{Op: &api.Op{Kind: api.Kind_KIND_INCR, Key: "n", Delta: 5}, Final: true},
		{Op: &api.Op{Kind: api.Kind_KIND_SCAN, Key: "a", Limit: 10}, Final: true, Strong: true},
		{Op: &api.Op{Kind: api.Kind_KIND_DEQUEUE, Key: "q"}, Preliminary: true},
		{Op: &api.Op{Kind: api.Kind_KIND_TXN, Txn: &api.Txn{
			Guards:     []*api.Guard{{Key: "a", Cmp: api.Cmp_CMP_EQUAL, Value: []byte("1")}},
			ThenWrites: []*api.Write{{Key: "b", Value: []byte("2")}},
			ElseWrites: []*api.Write{{Key: "a", Delete: true}},
		}}, Final: true, Strong: true},
		{Op: &api.Op{Kind: 42}},
	}
	for _, s := range seeds {
		b, err := proto.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var req api.InvokeRequest
		if proto.Unmarshal(b, &req) != nil {
			return
		}
		op, err := opFromAPI(req.GetOp())
		if err != nil {
			return
		}
		st := state.New(state.DefaultLimits())
		st.Apply(state.Op{Kind: state.OpPut, Key: "a", Value: []byte("1")})
		before := st.Clone()
		if err := op.Validate(state.DefaultLimits()); err != nil {
			res, undo := st.Apply(op)
			if res.Err == state.CodeOK {
				t.Fatalf("invalid op %+v (%v) applied without error", op, err)
			}
			st.Revert(undo)
			if !st.Equal(before) {
				t.Fatalf("invalid op %+v changed the state", op)
			}
			return
		}
		_, undo := st.Apply(op)
		st.Revert(undo)
		if !st.Equal(before) {
			t.Fatalf("apply+revert of %+v did not restore the state", op)
		}
	})
}
