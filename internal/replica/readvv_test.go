package replica

import (
	"fmt"
	"testing"

	"pgregory.net/rapid"

	"github.com/correctables/correctables/internal/state"
)

// ReadVV is sound: a read's result, on any replica, is what the operations
// ReadVV counts give on their own, in that replica's order; the operations
// it leaves out (tentative ones of other keys) change nothing the read
// sees. That is what lets a quorum read return a replica's answer once
// another answer's ReadVV is covered (client.InvokeQuorum). Random weak
// puts, appends, increments, deletes and transactions that guard one key
// and write others, at random replicas, with messages delivered in random
// order per link and ticks that commit some of them; then every replica
// reads every key.
func TestReadVVCountsWhatTheResultDependsOn(t *testing.T) {
	keys := []string{"a", "b", "c", "d"}
	var committedSeen, txnsSeen int // runs whose reads saw commits, and transactions
	rapid.Check(t, func(rt *rapid.T) {
		tr := newTrio(t, func(c *Config) { c.NoopTicks = 2 })
		tr.elect()
		seq := uint64(0)
		steps := rapid.IntRange(5, 60).Draw(rt, "steps")
		for range steps {
			switch rapid.IntRange(0, 9).Draw(rt, "action") {
			case 0, 1, 2, 3: // an update at a replica
				id := uint64(rapid.IntRange(1, 3).Draw(rt, "at"))
				op := drawUpdate(rt, keys)
				if op.Kind == state.OpTxn {
					txnsSeen++
				}
				seq++
				if err := tr.r[id].Submit(ClientRequest{Client: 1, Seq: seq, Want: WantTentative, Op: op}); err != nil {
					rt.Fatalf("submit %v at %d: %v", op, id, err)
				}
				tr.mustDrive(id)
			case 4, 5, 6: // one message, the oldest of a random link
				if len(tr.q) == 0 {
					continue
				}
				i := rapid.IntRange(0, len(tr.q)-1).Draw(rt, "msg")
				from, to := tr.q[i].From, tr.q[i].To
				for j, m := range tr.q {
					if m.From == from && m.To == to {
						tr.q = append(tr.q[:j:j], tr.q[j+1:]...)
						_ = tr.r[m.To].Step(m)
						tr.mustDrive(m.To)
						break
					}
				}
			case 7, 8: // a tick at every replica, messages left queued
				for id := uint64(1); id <= 3; id++ {
					tr.r[id].Tick()
					tr.mustDrive(id)
				}
			default: // a tick, and every message delivered (commits)
				tr.tick()
			}
		}
		if len(tr.r[1].Committed())+len(tr.r[2].Committed())+len(tr.r[3].Committed()) > 0 {
			committedSeen++
		}
		for id := uint64(1); id <= 3; id++ {
			r := tr.r[id]
			for _, k := range keys {
				seq++
				get := state.Op{Kind: state.OpGet, Key: k}
				v, ok, err := r.ReadNow(ClientRequest{Client: 1, Seq: seq, Want: WantTentative, Op: get, ReadVV: true}, nil)
				if !ok || err != nil {
					rt.Fatalf("replica %d: ReadNow declined a get (%v, %v)", id, ok, err)
				}
				rv := v.Stamp.ReadVV
				if !r.vv.Covers(rv) {
					rt.Fatalf("replica %d, key %s: ReadVV %v over the vv %v", id, k, rv, r.vv)
				}
				all, only := replay(rt, r, get, nil), replay(rt, r, get, rv)
				if !all.Equal(v.Result) {
					rt.Fatalf("replica %d, key %s: replaying its order gives %v, the read %v (the test's model of the order is wrong)", id, k, all, v.Result)
				}
				if !only.Equal(v.Result) {
					rt.Fatalf("replica %d, key %s: the operations ReadVV %v counts give %v, the read %v (vv %v, committed %v, order %v then %v)",
						id, k, rv, only, v.Result, r.vv, r.committedVV, r.Committed(), r.Tentative())
				}
			}
		}
	})
	if committedSeen == 0 || txnsSeen == 0 {
		t.Errorf("%d runs had committed operations and %d transactions were drawn: the test did not exercise both", committedSeen, txnsSeen)
	}
}

// drawUpdate draws a weak update of keys.
func drawUpdate(rt *rapid.T, keys []string) state.Op {
	k := rapid.SampledFrom(keys).Draw(rt, "key")
	v := []byte(fmt.Sprint(rapid.IntRange(0, 3).Draw(rt, "value")))
	switch rapid.IntRange(0, 4).Draw(rt, "kind") {
	case 0:
		return state.Op{Kind: state.OpPut, Key: k, Value: v}
	case 1:
		return state.Op{Kind: state.OpAppend, Key: k, Value: v}
	case 2:
		return state.Op{Kind: state.OpIncr, Key: k, Delta: 1}
	case 3:
		return state.Op{Kind: state.OpDelete, Key: k}
	default: // guard one key, write another in either branch
		g := rapid.SampledFrom(keys).Draw(rt, "guard")
		w := rapid.SampledFrom(keys).Draw(rt, "write")
		return state.Op{Kind: state.OpTxn, Txn: &state.Txn{
			Guards: []state.Guard{{Key: g, Cmp: state.CmpEqual, Value: v}},
			Then:   []state.Write{{Key: w, Value: []byte("then")}},
			Else:   []state.Write{{Key: k, Value: []byte("else")}},
		}}
	}
}

// replay executes op on a fresh state after r's committed operations, in
// commit order, then its tentative ones, in the tentative order: those
// within upTo only, or all with upTo nil.
func replay(rt *rapid.T, r *Replica, op state.Op, upTo VV) state.Result {
	st := state.New(r.cfg.Limits)
	for _, id := range append(r.Committed(), r.Tentative()...) {
		if upTo != nil && id.Seq > upTo[id.Origin] {
			continue
		}
		q, ok := r.Op(id)
		if !ok {
			rt.Fatalf("replica %d does not hold %v of its order", r.cfg.ID, id)
		}
		st.Apply(q.Op)
	}
	res, _ := st.Apply(op)
	return res
}
