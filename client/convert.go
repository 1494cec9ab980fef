package client

import (
	"fmt"
	"math"

	"github.com/correctables/correctables/api"
)

// This file is the one place where client types meet the wire's (api)
// types.

// toAPIOp encodes an Op. It fails, with ErrInvalidArgument, on what the
// wire cannot carry (the zero Op, a scan limit outside int32) and on an
// empty key, which servers refuse too (a scan's prefix may be empty).
func toAPIOp(o Op) (*api.Op, error) {
	if o.kind < KindGet || int(o.kind) >= len(kindNames) {
		return nil, fmt.Errorf("%w: %v", ErrInvalidArgument, o)
	}
	if o.key == "" && o.kind != KindScan && o.kind != KindTxn && o.kind != KindNoop {
		return nil, fmt.Errorf("%w: %v with an empty key", ErrInvalidArgument, o.kind)
	}
	if o.txn != nil {
		for _, g := range o.txn.guards {
			if g.Key == "" {
				return nil, fmt.Errorf("%w: txn guard with an empty key", ErrInvalidArgument)
			}
		}
		for _, w := range append(append([]Write(nil), o.txn.then...), o.txn.els...) {
			if w.Key == "" {
				return nil, fmt.Errorf("%w: txn write with an empty key", ErrInvalidArgument)
			}
		}
	}
	if o.limit < 0 || o.limit > math.MaxInt32 {
		return nil, fmt.Errorf("%w: scan limit %d", ErrInvalidArgument, o.limit)
	}
	// Kind numbers are the wire's: KindGet = api.Kind_KIND_GET and so on.
	p := &api.Op{
		Kind:         api.Kind(o.kind),
		Key:          o.key,
		Value:        o.value,
		Expected:     o.expected,
		ExpectAbsent: o.expectAbsent,
		Delta:        o.delta,
		Limit:        int32(o.limit),
	}
	if o.txn != nil {
		t := &api.Txn{
			Guards:     make([]*api.Guard, len(o.txn.guards)),
			ThenWrites: toAPIWrites(o.txn.then),
			ElseWrites: toAPIWrites(o.txn.els),
		}
		for i, g := range o.txn.guards {
			t.Guards[i] = &api.Guard{Key: g.Key, Cmp: api.Cmp(g.Cmp), Value: g.Value}
		}
		p.Txn = t
	}
	return p, nil
}

func toAPIWrites(ws []Write) []*api.Write {
	if len(ws) == 0 {
		return nil
	}
	out := make([]*api.Write, len(ws))
	for i, w := range ws {
		out[i] = &api.Write{Delete: w.Delete, Key: w.Key, Value: w.Value}
	}
	return out
}

// fromAPIResult decodes a result.
func fromAPIResult(p *api.Result) Result {
	r := Result{
		Found: p.GetFound(),
		Value: p.GetValue(),
		Int:   p.GetInt(),
		Len:   p.GetLen(),
		OK:    p.GetOk(),
		Err:   resultErr(p.GetErr()),
	}
	if items := p.GetItems(); len(items) > 0 {
		r.Items = make([]KV, len(items))
		for i, kv := range items {
			r.Items[i] = KV{Key: kv.GetKey(), Value: kv.GetValue()}
		}
	}
	return r
}

// fromAPIStamp decodes a stamp and the op id that came with it.
func fromAPIStamp(s *api.Stamp, id *api.OpID) Stamp {
	return Stamp{
		Replica:        s.GetReplica(),
		AppliedIndex:   s.GetAppliedIndex(),
		CommittedCount: s.GetCommittedCount(),
		VV:             s.GetVv(),
		StableTime:     s.GetStableTime(),
		ReadVV:         s.GetReadVv(),
		Op:             OpID{Origin: id.GetOrigin(), Seq: id.GetSeq()},
	}
}

// toAPIRequest builds the request for the requested levels (a non-empty
// subset of Levels, weakest first). weak selects the weak protocol for the
// final view too (a weak update's committed result).
func toAPIRequest(op *api.Op, levels levelSet, weak, noConfirm bool) *api.InvokeRequest {
	return &api.InvokeRequest{
		Op:             op,
		Preliminary:    levels.eventual,
		Final:          levels.strong,
		Strong:         levels.strong && !weak,
		NoConfirmation: noConfirm,
	}
}
