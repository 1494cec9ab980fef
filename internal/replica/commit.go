package replica

import (
	"fmt"
	"math"
	"slices"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/correctables/correctables/internal/state"
)

// applyEntries delivers committed raft entries, in order. The operations
// that consecutive entries commit have their execution adjusted once, for
// the whole run (flushCommits): a replica catching up applies many entries
// in one Ready while its tentative stack holds the operations gossip
// brought meanwhile, and adjusting after each entry rolled that stack back
// and executed it again per entry (seconds of a busy loop per Ready on a
// hot key, with every client of the replica waiting).
func (r *Replica) applyEntries(ents []*raftpb.Entry) error {
	for _, ent := range ents {
		if err := r.apply(ent); err != nil {
			return err
		}
		if len(r.toCommit) >= flushCommitsEvery {
			if err := r.flushCommits(); err != nil {
				return err
			}
		}
	}
	return r.flushCommits()
}

// flushCommitsEvery bounds the operations one flushCommits takes: a
// restart replays its log 16 MiB at a time, over a hundred thousand small
// operations, and a flush builds scratch arrays as long as what it takes
// (kept for the next one). Flushing after the entry that reaches the bound
// commits the same operations in the same order (as the flush before a
// marker does).
const flushCommitsEvery = 4096

// apply delivers one committed raft entry. The operations it commits join
// r.toCommit; flushCommits finishes their commit.
func (r *Replica) apply(ent *raftpb.Entry) error {
	if ent.GetIndex() <= r.applied {
		return nil // covered by a snapshot restored at start
	}
	if ent.GetType() != raftpb.EntryNormal {
		if err := r.flushCommits(); err != nil {
			return err
		}
	}
	r.applied = ent.GetIndex()
	r.settle(ent.GetTerm())
	r.bytesSinceSnap += len(ent.GetData())
	switch ent.GetType() {
	case raftpb.EntryConfChange:
		var cc raftpb.ConfChange
		if err := proto.Unmarshal(ent.GetData(), &cc); err != nil {
			return fmt.Errorf("replica: conf change at %d: %w", ent.GetIndex(), err)
		}
		r.applyConfChange(ent.GetIndex(), &cc, true)
		return nil
	case raftpb.EntryConfChangeV2:
		var cc raftpb.ConfChangeV2
		if err := proto.Unmarshal(ent.GetData(), &cc); err != nil {
			return fmt.Errorf("replica: conf change at %d: %w", ent.GetIndex(), err)
		}
		r.applyConfChange(ent.GetIndex(), &cc, false)
		return nil
	}
	if len(ent.GetData()) == 0 {
		return nil // raft's empty entry at the start of a term
	}
	e, err := decodeEntryKnown(ent.GetData(), r.Op)
	if err != nil {
		return fmt.Errorf("replica: entry %d: %w", ent.GetIndex(), err)
	}
	if e.Marker != nil {
		if err := r.flushCommits(); err != nil {
			return err
		}
		r.applyMarker(ent.GetIndex(), e.Proposer, e.Marker)
		return nil
	}
	return r.commit(e.Ops)
}

// commit moves the operations of a delivered entry to the committed list
// (Creek Algorithm 1, commit) in four steps: choose what the entry commits,
// learn those operations, adjust execution to the new order, and answer
// the clients waiting for them. The last two wait in r.toCommit for
// flushCommits, with those of the entries applied after it before anything
// else.
func (r *Replica) commit(ops []*Req) error {
	fresh := r.committable(ops)
	if len(fresh) == 0 {
		return nil
	}
	if err := r.learnCommitted(fresh); err != nil {
		return err
	}
	r.toCommit = append(r.toCommit, fresh...)
	return nil
}

// flushCommits adjusts execution to the operations committed since the
// last flush, in their committed order, and answers their clients. The
// committed list, version vectors and log already hold them
// (learnCommitted); only the stack and the answers waited.
func (r *Replica) flushCommits() error {
	if len(r.toCommit) == 0 {
		return nil
	}
	fresh := r.toCommit
	results := r.adjustExecution(fresh)
	r.answerCommitted(fresh, results)
	clear(fresh)
	r.toCommit = fresh[:0]
	return nil
}

// committable returns what an entry commits, in (TS, ID) order: each
// operation that extends its origin's committed prefix and, if strong,
// whose causal context is committed by then (CAB's delivery condition). The
// rest (an entry that overtook the one before it from the same proposer, or
// a duplicate) is skipped; it comes again. The decision depends only on the
// committed prefix, the same at every replica at this point of the log.
//
// It sorts ops in place (the caller's entry, decoded for this call) and
// returns a prefix of it, and it extends committedVV with what it returns,
// as learnCommitted does next: the prefixes it checks the later operations
// of the entry against include the earlier ones.
func (r *Replica) committable(ops []*Req) []*Req {
	slices.SortFunc(ops, compareReq)
	fresh := ops[:0]
	for _, q := range ops {
		o := q.ID.Origin
		if q.ID.Seq <= r.committedVV[o] {
			r.stats.Duplicates++
			r.stats.DuplicateBytes += reqSize(q)
			continue
		}
		if q.ID.Seq != r.committedVV[o]+1 {
			continue
		}
		if q.Strong && !ctxCommitted(q, r.committedVV) {
			continue
		}
		r.committedVV[o] = q.ID.Seq
		fresh = append(fresh, q)
	}
	return fresh
}

// learnCommitted appends fresh to the committed list and extends the
// version vectors, the log and the clock with operations that the log
// brought before gossip did.
func (r *Replica) learnCommitted(fresh []*Req) error {
	for _, q := range fresh {
		o := q.ID.Origin
		r.committedVV[o] = q.ID.Seq
		if q.ID.Seq > r.vv[o] {
			if q.ID.Seq != r.vv[o]+1 {
				return fmt.Errorf("replica: %v committed while %d.%d is missing", q.ID, o, r.vv[o]+1)
			}
			r.vv[o] = q.ID.Seq
			if q.ID.Seq == r.logBase[o]+uint64(len(r.log[o]))+1 {
				r.log[o] = append(r.log[o], q)
			}
			r.clk.Observe(q.TS)
			if q.TS > r.lastTS[o] {
				r.lastTS[o] = q.TS
			}
		}
		r.committed = append(r.committed, q.ID)
		delete(r.arrived, q.ID)
		delete(r.proposedAt, q.ID)
	}
	r.stats.Committed += len(fresh)
	return nil
}

// adjustExecution brings the stack to the new logical order and returns
// the committed result of each fresh operation. The new order is the
// committed list (now with fresh at its end), then the remaining tentative
// operations by (TS, ID) (Creek Algorithm 1, line 53). The stack keeps its
// longest prefix in which no operation has a conflicting operation that
// must now precede it but is above it or not executed yet; the rest is
// rolled back and executed in the new order (adjustExecution, line 42).
// Rollbacks only where necessary: operations that commute keep their
// place, committed or not.
func (r *Replica) adjustExecution(fresh []*Req) []state.Result {
	base := r.committedCount() - len(fresh)
	// Mark the fresh operations the stack holds (found through the index,
	// not by walking the stack: each commit costs what it commits).
	missing := r.missing[:0]
	for i, q := range fresh {
		if j, ok := r.index(q.ID); ok {
			e := &r.tentative[j]
			e.committed, e.cpos = true, base+i
			r.ntent--
			continue
		}
		missing = append(missing, executed{req: q, committed: true, cpos: base + i})
	}
	var rest []executed
	if seeds, ok := r.mustFollow(fresh, missing, base, r.seeds[:0]); ok {
		rest = r.rollbackSome(seeds, r.undone[:0])
		r.seeds = seeds[:0]
	} else {
		posFresh := make(map[OpID]int, len(fresh))
		for i, q := range fresh {
			posFresh[q.ID] = base + i
		}
		rest = r.rollbackTo(r.keepLen(posFresh, missing), r.undone[:0])
	}
	r.reexecScratch(append(rest, missing...))
	clear(missing)
	r.missing = missing[:0]
	results := make([]state.Result, len(fresh))
	for i, q := range fresh {
		j, _ := r.index(q.ID)
		results[i] = r.tentative[j].result
	}
	// Committed operations at the bottom of the stack join the base: nothing
	// below them can be rolled back any more, so their undo records go.
	drop := 0
	for drop < len(r.tentative) && r.tentative[drop].committed {
		r.keys.dropBottom(r.tentative[drop].req)
		drop++
	}
	r.dropBottom(drop)
	for i, q := range fresh {
		r.rememberResult(q.ID, results[i])
	}
	return results
}

// answerCommitted sends the stable view to every client waiting for a
// fresh operation, and ends the retries of committed strong operations.
func (r *Replica) answerCommitted(fresh []*Req, results []state.Result) {
	for i, q := range fresh {
		delete(r.pendingStrong, q.ID)
		w, ok := r.waiting[q.ID]
		if !ok {
			continue
		}
		delete(r.waiting, q.ID)
		if q.Strong && q.ID.Origin == r.cfg.ID {
			r.stats.StrongCommitted++
			if results[i].Equal(w.tentative) {
				r.stats.StrongAccurate++
			}
		}
		r.emit(View{
			Client: w.client, Seq: w.seq, ID: q.ID, Result: results[i], Stable: true,
			Confirmed: w.sent && results[i].Equal(w.tentative), Last: true,
		})
	}
}

// mustFollow appends to seeds, for each fresh operation y and each of its
// keys, the lowest stack position of an operation on that key that y must
// now precede but that was executed before it (below it, or anywhere if y
// was never executed here): a tentative one, or one committed by this
// entry after y. rollbackSome then takes those and what lies above them on
// their keys, y included, and executes them again in the new order; the
// rest keeps its place. Entries on one key are executed in their logical
// order, so the walk up the key's list stops at the first. (A fresh
// operation executed here precedes, on its keys, only entries it preceded
// before; one learnt from the log may precede fresh operations executed
// here.) It reports false when an operation that conflicts with everything
// is involved (then keepLen decides). base is the committed position of the
// first fresh operation.
func (r *Replica) mustFollow(fresh []*Req, missing []executed, base int, seeds []int) ([]int, bool) {
	if r.keys.wild > 0 {
		return seeds, false
	}
	// Per key, what the walks of earlier fresh operations learnt: the
	// entries at the bottom of its list that were committed before this
	// Ready never qualify (skipped), and nothing at or above a position
	// already seeded needs a seed of its own (rollbackSome takes it with
	// the one below). So a hot key's committed entries are walked once per
	// Ready, not once per fresh operation on it.
	walks := r.walks
	if walks == nil {
		walks = map[fkey]keyWalk{}
		r.walks = walks
	}
	defer func() {
		// clear costs what the map ever held: one that a large catch-up
		// grew goes.
		if len(walks) > 1024 {
			r.walks = nil
		} else {
			clear(walks)
		}
	}()
	consider := func(q *Req, cpos, below int) bool {
		for _, k := range q.footprint() {
			if k == wildKey {
				return false
			}
			ps := r.keys.slots(k)
			w, ok := walks[k]
			if !ok {
				w = keyWalk{seeded: len(r.tentative)}
			}
			for i := w.skipped; i < len(ps); i++ {
				j := r.at(ps[i])
				if j >= below || j >= w.seeded {
					break
				}
				e := r.tentative[j]
				if !e.committed || (e.cpos >= base && e.cpos > cpos) {
					seeds = append(seeds, j)
					w.seeded = j
					break
				}
				if e.cpos < base && i == w.skipped {
					w.skipped++
				}
			}
			walks[k] = w
		}
		return true
	}
	for _, y := range missing {
		if !consider(y.req, y.cpos, len(r.tentative)) {
			return seeds, false
		}
	}
	for i, q := range fresh {
		if j, ok := r.index(q.ID); ok && !consider(q, base+i, j) {
			return seeds, false
		}
	}
	return seeds, true
}

// keyWalk is what mustFollow learnt of one key's list: the index up to
// which its entries were committed before the Ready, and the lowest stack
// position seeded on it.
type keyWalk struct{ skipped, seeded int }

// keepLen returns how much of the bottom of the stack stays executed as it
// is once the operations in posFresh are committed: the stack below the
// lowest operation that a conflicting newly committed operation must now
// precede but that was executed before it (the fresh one sits above it, or
// is missing from the stack). Only newly committed operations change place
// in the logical order, so only pairs with one of them can be out of order.
// One walk from the top down, with the smallest committed position of the
// fresh operations seen so far per key: linear in the stack, not quadratic.
func (r *Replica) keepLen(posFresh map[OpID]int, missing []executed) int {
	const none = math.MaxInt
	minPos := map[fkey]int{} // per key: smallest cpos of a fresh op above
	anyPos, wildPos := none, none
	note := func(q *Req, cpos int) {
		anyPos = min(anyPos, cpos)
		for _, k := range q.footprint() {
			if k == wildKey {
				wildPos = min(wildPos, cpos)
			} else if p, ok := minPos[k]; !ok || cpos < p {
				minPos[k] = cpos
			}
		}
	}
	// first returns the smallest cpos of a fresh op seen so far that
	// conflicts with q.
	first := func(q *Req) int {
		p := wildPos
		for _, k := range q.footprint() {
			if k == wildKey {
				return anyPos
			}
			if v, ok := minPos[k]; ok {
				p = min(p, v)
			}
		}
		return p
	}
	for _, y := range missing {
		note(y.req, y.cpos)
	}
	keep := len(r.tentative)
	for i := len(r.tentative) - 1; i >= 0; i-- {
		x := r.tentative[i]
		cpos, fresh := posFresh[x.req.ID]
		switch {
		case !x.committed:
			// Every fresh op precedes a tentative one.
			if first(x.req) != none {
				keep = i
			}
		case fresh:
			if first(x.req) < cpos {
				keep = i
			}
			note(x.req, cpos)
		}
		// Operations committed earlier precede every fresh one: in order.
	}
	return keep
}

// ctxCommitted reports whether a strong operation's causal context (itself
// excepted) is within the committed prefixes upto.
func ctxCommitted(q *Req, upto VV) bool {
	for o, s := range q.Ctx {
		if o == q.ID.Origin {
			s-- // the context includes the operation itself
		}
		if upto[o] < s {
			return false
		}
	}
	return true
}
