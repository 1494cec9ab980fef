package server

import (
	"fmt"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/internal/replica"
	"github.com/correctables/correctables/internal/state"
)

// The wire enums and the state machine's share their numbering (both start
// at 1 for the first real value); these tables make that explicit and fail
// loudly on anything else.
var kinds = map[api.Kind]state.Kind{
	api.Kind_KIND_GET: state.OpGet, api.Kind_KIND_PUT: state.OpPut, api.Kind_KIND_DELETE: state.OpDelete,
	api.Kind_KIND_CAS: state.OpCAS, api.Kind_KIND_INCR: state.OpIncr, api.Kind_KIND_APPEND: state.OpAppend,
	api.Kind_KIND_SCAN: state.OpScan, api.Kind_KIND_ENQUEUE: state.OpEnqueue, api.Kind_KIND_DEQUEUE: state.OpDequeue,
	api.Kind_KIND_TXN: state.OpTxn, api.Kind_KIND_NOOP: state.OpNoop,
}

var cmps = map[api.Cmp]state.Cmp{
	api.Cmp_CMP_EQUAL: state.CmpEqual, api.Cmp_CMP_NOT_EQUAL: state.CmpNotEqual, api.Cmp_CMP_EXISTS: state.CmpExists,
	api.Cmp_CMP_ABSENT: state.CmpAbsent, api.Cmp_CMP_LESS: state.CmpLess, api.Cmp_CMP_GREATER: state.CmpGreater,
}

// opFromAPI converts a wire operation. Structural problems (unknown kind or
// comparison, an empty key) are ErrInvalidRequest; the other argument
// checks are the state machine's (Op.Validate), done by the replica.
func opFromAPI(o *api.Op) (state.Op, error) {
	if o == nil {
		return state.Op{}, fmt.Errorf("%w: no operation", ErrInvalidRequest)
	}
	k, ok := kinds[o.GetKind()]
	if !ok {
		return state.Op{}, fmt.Errorf("%w: %w: kind %v", ErrInvalidRequest, state.ErrUnknownOp, o.GetKind())
	}
	op := state.Op{
		Kind: k, Key: o.GetKey(), Value: o.GetValue(), Expected: o.GetExpected(),
		ExpectAbsent: o.GetExpectAbsent(), Delta: o.GetDelta(), Limit: int(o.GetLimit()),
	}
	// Every key names something: only a scan's prefix may be empty (all
	// keys).
	if o.GetKey() == "" && k != state.OpScan && k != state.OpTxn && k != state.OpNoop {
		return state.Op{}, fmt.Errorf("%w: %v with an empty key", ErrInvalidRequest, k)
	}
	if t := o.GetTxn(); t != nil {
		op.Txn = &state.Txn{}
		for _, g := range t.GetGuards() {
			if g.GetKey() == "" {
				return state.Op{}, fmt.Errorf("%w: txn guard with an empty key", ErrInvalidRequest)
			}
			c, ok := cmps[g.GetCmp()]
			if !ok {
				return state.Op{}, fmt.Errorf("%w: guard comparison %v", ErrInvalidRequest, g.GetCmp())
			}
			op.Txn.Guards = append(op.Txn.Guards, state.Guard{Key: g.GetKey(), Cmp: c, Value: g.GetValue()})
		}
		for _, w := range append(t.GetThenWrites(), t.GetElseWrites()...) {
			if w.GetKey() == "" {
				return state.Op{}, fmt.Errorf("%w: txn write with an empty key", ErrInvalidRequest)
			}
		}
		op.Txn.Then = writesFromAPI(t.GetThenWrites())
		op.Txn.Else = writesFromAPI(t.GetElseWrites())
	}
	return op, nil
}

func writesFromAPI(ws []*api.Write) []state.Write {
	out := make([]state.Write, len(ws))
	for i, w := range ws {
		out[i] = state.Write{Delete: w.GetDelete(), Key: w.GetKey(), Value: w.GetValue()}
	}
	return out
}

func resultToAPI(r state.Result) *api.Result {
	out := &api.Result{Err: uint32(r.Err), Found: r.Found, Value: r.Value, Int: r.Int, Len: r.Len, Ok: r.OK}
	for _, kv := range r.Items {
		out.Items = append(out.Items, &api.KV{Key: kv.Key, Value: kv.Value})
	}
	return out
}

// stampToAPI converts a view's stamp. The reply shares the stamp's VV: the
// replica never writes a VV it put in a stamp (views taken while its VV
// stayed the same share one), and nothing else does.
func stampToAPI(s replica.Stamp) *api.Stamp {
	return &api.Stamp{
		Replica: s.Replica, AppliedIndex: s.AppliedIndex, CommittedCount: uint64(s.CommittedCount),
		Vv: map[uint64]uint64(s.VV), StableTime: s.StableTime, ReadVv: map[uint64]uint64(s.ReadVV),
	}
}

// viewToAPI converts a view. A confirmed final view goes without its result:
// the client already has it from the preliminary view (Correctables §5.2),
// unless the client asked for no confirmations (noConfirm), in which case
// every view carries its result and none is marked confirmed.
func viewToAPI(v replica.View, noConfirm bool) *api.ViewReply {
	if noConfirm {
		v.Confirmed = false
	}
	out := &api.ViewReply{Final: v.Stable, Confirmed: v.Confirmed, Stamp: stampToAPI(v.Stamp)}
	if !v.ID.IsZero() {
		out.Id = &api.OpID{Origin: v.ID.Origin, Seq: v.ID.Seq}
	}
	if !v.Confirmed {
		out.Result = resultToAPI(v.Result)
	}
	return out
}
