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
		{Op: &api.Op{Kind: api.Kind_KIND_GET, Key: "k"}, Preliminary: true, MinVv: map[uint64]uint64{1: 3, 2: 0}},
		{Op: &api.Op{Kind: api.Kind_KIND_GET, Key: "k"}, Preliminary: true, ReadVv: true},
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
		// min_vv: only a weak read of the preliminary view may carry one;
		// what is accepted has no origin 0, no empty entry, at most
		// MaxMinVV entries.
		vv, err := minVVFromAPI(&req, op.ReadOnly())
		weakRead := op.ReadOnly() && !req.GetStrong() && !req.GetFinal()
		switch {
		case err == nil && len(req.GetMinVv()) > 0 && !weakRead:
			t.Fatalf("min_vv %v accepted on %+v", req.GetMinVv(), &req)
		case err == nil && len(vv) > MaxMinVV:
			t.Fatalf("min_vv of %d entries accepted", len(vv))
		case err == nil:
			for o, n := range vv {
				if o == 0 || n == 0 {
					t.Fatalf("min_vv %v accepted as %v", req.GetMinVv(), vv)
				}
			}
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
