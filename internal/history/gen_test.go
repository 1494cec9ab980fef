package history

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/correctables/correctables/internal/state"
)

func put(k, v string) state.Op { return state.Op{Kind: state.OpPut, Key: k, Value: []byte(v)} }
func get(k string) state.Op    { return state.Op{Kind: state.OpGet, Key: k} }
func incr(k string) state.Op   { return state.Op{Kind: state.OpIncr, Key: k, Delta: 1} }
func scan(p string) state.Op   { return state.Op{Kind: state.OpScan, Key: p} }

// found is the result of a get (or put) that saw v.
func found(v string) state.Result { return state.Result{Found: true, Value: []byte(v)} }

// naiveExec is the oracle the generator answers with: a fresh state, the
// given order executed from the start, and the result of op at index at (or
// of extra executed at the end, if at < 0). The checker's incremental
// reconstruction must agree with it.
func naiveExec(ops []state.Op, at int, extra state.Op) state.Result {
	st := state.New(state.DefaultLimits())
	for i, op := range ops {
		res, _ := st.Apply(op)
		if i == at {
			return cloneResult(res)
		}
	}
	res, _ := st.Apply(extra)
	return cloneResult(res)
}

// genHistory is a run of a small Creek model (Algorithm 1 without the
// network): replicas accept weak and strong ops, gossip FIFO per origin, and
// strong ops commit with their causal context in one global order. Every view
// is computed by naiveExec over the order the replica holds, so a correct
// checker must accept the history.
type genHistory struct {
	records   []Record
	submitted []Submitted
	committed []OpID
	replicas  []ReplicaState
}

type genReplica struct {
	vv        map[uint64]uint64
	committed int
}

type genOp struct {
	sub    Submitted
	strong bool
	rec    int // record index, or -1
	ctx    map[uint64]uint64
}

func generate(seed uint64, nops int) *genHistory {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	const nrep = 3
	keys := []string{"a", "b", "c", "ab", "q"}
	h := &genHistory{}
	reps := make([]*genReplica, nrep+1) // 1-based, like raft ids
	for r := 1; r <= nrep; r++ {
		reps[r] = &genReplica{vv: map[uint64]uint64{}}
	}
	skew := []int64{0, 0, 7, -5} // clock skew per replica: causes reorderings
	var ops []*genOp             // all submitted ops, in submission order
	byID := map[OpID]*genOp{}
	perOrigin := map[uint64][]*genOp{}
	var entries [][]OpID // committed order, as CAB entries
	isCommitted := map[OpID]bool{}
	finalSent := map[OpID]bool{}
	now := int64(100)

	stamp := func(r int) Stamp {
		rep := reps[r]
		vv := map[uint64]uint64{}
		for o, s := range rep.vv {
			vv[o] = s
		}
		return Stamp{Replica: uint64(r), CommittedCount: rep.committed, VV: vv}
	}
	// order returns the ops replica r executes: committed prefix, then the
	// covered ops sorted by (TS, ID).
	order := func(r int) []*genOp {
		rep := reps[r]
		var out []*genOp
		in := map[OpID]bool{}
		for _, id := range h.committed[:rep.committed] {
			out = append(out, byID[id])
			in[id] = true
		}
		var tent []*genOp
		for _, op := range ops {
			if !in[op.sub.ID] && op.sub.ID.Seq <= rep.vv[op.sub.ID.Origin] {
				tent = append(tent, op)
			}
		}
		slices.SortFunc(tent, func(a, b *genOp) int { return compareTentative(&a.sub, &b.sub) })
		return append(out, tent...)
	}
	viewAt := func(r int, rec *Record, final bool) View {
		o := order(r)
		sops := make([]state.Op, len(o))
		at := -1
		for i, op := range o {
			sops[i] = op.sub.Op
			if op.sub.ID == rec.ID && !rec.ID.IsZero() {
				at = i
			}
		}
		return View{At: now, Result: naiveExec(sops, at, rec.Op), Final: final, Stamp: stamp(r)}
	}
	randOp := func() state.Op {
		k := keys[rng.IntN(len(keys))]
		switch rng.IntN(6) {
		case 0, 1:
			return get(k)
		case 2:
			return put(k, fmt.Sprint(rng.IntN(5)))
		case 3:
			return incr(k + "n")
		case 4:
			return scan(k[:1])
		default:
			return state.Op{Kind: state.OpAppend, Key: k, Value: []byte{byte('a' + rng.IntN(26))}}
		}
	}
	// sendFinals gives the final view of every committed op whose origin now
	// has it in its committed prefix.
	sendFinals := func(r int) {
		for _, id := range h.committed[:reps[r].committed] {
			op := byID[id]
			if id.Origin != uint64(r) || finalSent[id] || op.rec < 0 {
				continue
			}
			finalSent[id] = true
			rec := &h.records[op.rec]
			rec.Views = append(rec.Views, viewAt(r, rec, true))
		}
	}

	commit := func(g *genOp) {
		var ext []*genOp
		for _, w := range ops {
			if !w.strong && !isCommitted[w.sub.ID] && w.sub.ID.Seq <= g.ctx[w.sub.ID.Origin] && compareTentative(&w.sub, &g.sub) < 0 {
				ext = append(ext, w)
			}
		}
		slices.SortFunc(ext, func(a, b *genOp) int { return compareTentative(&a.sub, &b.sub) })
		var entry []OpID
		for _, w := range append(ext, g) {
			entry = append(entry, w.sub.ID)
			isCommitted[w.sub.ID] = true
			h.committed = append(h.committed, w.sub.ID)
		}
		entries = append(entries, entry)
	}

	for len(h.records) < nops {
		now += int64(1 + rng.IntN(3))
		r := 1 + rng.IntN(nrep)
		rep := reps[r]
		switch x := rng.IntN(10); {
		case x < 4: // a client invokes an op at replica r
			op := randOp()
			strong := rng.IntN(3) == 0
			client := rng.IntN(8)
			rec := Record{Client: client, Op: op, Strong: strong, Invoke: now}
			if op.ReadOnly() {
				if !strong {
					rec.Views = []View{viewAt(r, &rec, true)}
				} else {
					// Preliminary from r, final through ReadIndex on an
					// up-to-date replica.
					rec.Views = []View{viewAt(r, &rec, false)}
					best := 1
					for q := 2; q <= nrep; q++ {
						if reps[q].committed > reps[best].committed {
							best = q
						}
					}
					if reps[best].committed == len(h.committed) {
						now++
						rec.Views = append(rec.Views, View{At: now, Result: naiveExec(committedOps(h.committed, byID), -1, op), Final: true, Stamp: stamp(best)})
					}
				}
				rec.Acked = true
				h.records = append(h.records, rec)
				continue
			}
			seq := rep.vv[uint64(r)] + 1
			rep.vv[uint64(r)] = seq
			g := &genOp{sub: Submitted{ID: OpID{uint64(r), seq}, TS: uint64(now + skew[r]), Op: op}, strong: strong, rec: len(h.records)}
			if strong {
				g.ctx = stamp(r).VV
			}
			ops = append(ops, g)
			byID[g.sub.ID] = g
			perOrigin[uint64(r)] = append(perOrigin[uint64(r)], g)
			h.submitted = append(h.submitted, g.sub)
			rec.ID = g.sub.ID
			h.records = append(h.records, rec)
			last := &h.records[len(h.records)-1]
			if rng.IntN(20) > 0 { // some writes are never acknowledged
				last.Views = []View{viewAt(r, last, false)}
				last.Acked = true
			} else {
				g.rec = -1 // the client never hears of it
			}
		case x < 7: // gossip: r receives the next op of some origin
			o := uint64(1 + rng.IntN(nrep))
			if n := rep.vv[o]; n < uint64(len(perOrigin[o])) {
				rep.vv[o] = n + 1
			}
		case x < 8: // CAB: the oldest uncommitted strong op whose context is held by its origin commits
			for _, g := range ops {
				if g.strong && !isCommitted[g.sub.ID] {
					commit(g)
					break
				}
			}
		default: // r delivers whole CAB entries whose ops it holds
			done := 0
			for _, e := range entries {
				if done < rep.committed {
					done += len(e)
					continue
				}
				held := true
				for _, id := range e {
					held = held && id.Seq <= rep.vv[id.Origin]
				}
				if !held {
					break
				}
				done += len(e)
				rep.committed = done
				if rng.IntN(3) == 0 {
					// A preliminary view in between, to exercise stamps
					// with a fresh committed prefix.
					for i := len(h.records) - 1; i >= 0 && i > len(h.records)-5; i-- {
						rec := &h.records[i]
						if !rec.ID.IsZero() && rec.ID.Origin == uint64(r) && len(rec.Views) > 0 && !slices.ContainsFunc(rec.Views, func(v View) bool { return v.Final }) && !isCommitted[rec.ID] {
							rec.Views = append(rec.Views, viewAt(r, rec, false))
						}
					}
				}
			}
			sendFinals(r)
		}
	}
	// Quiesce: everyone receives everything, the remaining strong ops
	// commit, and a strong no-op (Creek §4.4) commits the weak ones left.
	now++
	for r := 1; r <= nrep; r++ {
		for o := uint64(1); o <= nrep; o++ {
			reps[r].vv[o] = uint64(len(perOrigin[o]))
		}
	}
	for _, g := range ops {
		if g.strong && !isCommitted[g.sub.ID] {
			commit(g)
		}
	}
	seq := reps[1].vv[1] + 1
	noop := &genOp{sub: Submitted{ID: OpID{1, seq}, TS: uint64(now + 1000), Op: state.Op{Kind: state.OpNoop}}, strong: true, rec: -1, ctx: stamp(1).VV}
	ops = append(ops, noop)
	byID[noop.sub.ID] = noop
	perOrigin[1] = append(perOrigin[1], noop)
	h.submitted = append(h.submitted, noop.sub)
	for r := 1; r <= nrep; r++ {
		reps[r].vv[1] = seq
	}
	commit(noop)
	for r := 1; r <= nrep; r++ {
		reps[r].committed = len(h.committed)
		sendFinals(r)
	}
	final := state.New(state.DefaultLimits())
	for _, g := range order(1) {
		final.Apply(g.sub.Op)
	}
	for r := 1; r <= nrep; r++ {
		var tent []OpID
		for _, g := range order(r)[len(h.committed):] {
			tent = append(tent, g.sub.ID)
		}
		h.replicas = append(h.replicas, ReplicaState{ID: uint64(r), Committed: slices.Clone(h.committed), StateHash: final.Hash(), Tentative: tent})
	}
	return h
}

func committedOps(committed []OpID, byID map[OpID]*genOp) []state.Op {
	out := make([]state.Op, len(committed))
	for i, id := range committed {
		out[i] = byID[id].sub.Op
	}
	return out
}

func TestGeneratedHistoriesPass(t *testing.T) {
	for seed := range uint64(20) {
		h := generate(seed, 300)
		if err := CheckWeakViews(h.records, h.submitted, h.committed); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if err := CheckFinalOnce(h.records); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if err := CheckDurable(h.records, h.committed); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if err := CheckConverged(h.replicas); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		res, err := CheckLinearizableWith(h.records, h.committed, LinearizableOptions{Submitted: h.submitted})
		if err != nil || res != porcupine.Ok {
			t.Fatalf("seed %d: linearizable: %v %v", seed, res, err)
		}
	}
}

// TestGeneratedHistoriesPorcupine runs porcupine's search itself (not the
// committed-order witness) on small generated histories, so that the model
// is known to accept what the store does.
func TestGeneratedHistoriesPorcupine(t *testing.T) {
	for seed := range uint64(10) {
		h := generate(seed, 60)
		ops, err := linearizableOps(h.records, h.committed)
		if err != nil {
			t.Fatal(err)
		}
		if res := porcupine.CheckOperationsTimeout(Model(), ops, 10*time.Second); res != porcupine.Ok {
			t.Fatalf("seed %d: porcupine says %v", seed, res)
		}
	}
}

func BenchmarkCheckers(b *testing.B) {
	h := generate(1, 1000)
	b.ResetTimer()
	for b.Loop() {
		if err := CheckWeakViews(h.records, h.submitted, h.committed); err != nil {
			b.Fatal(err)
		}
		if _, err := CheckLinearizableWith(h.records, h.committed, LinearizableOptions{Submitted: h.submitted}); err != nil {
			b.Fatal(err)
		}
	}
}
