package replica

import (
	"fmt"
	"slices"

	"github.com/correctables/correctables/internal/state"
)

// The execution stack: Creek Algorithm 1's adjustTentativeOrder and
// adjustExecution, with rollbacks only where necessary (Creek §4.4).

// executed is one operation applied to the state above the base (the
// committed operations whose undo records were dropped).
type executed struct {
	req    *Req
	result state.Result
	undo   state.Undo
	// committed marks an operation already in the committed list, at
	// position cpos, kept in the stack (with its undo record) because
	// tentative operations it commutes with were executed below it.
	committed bool
	cpos      int
}

// before is the logical order of the stack: committed operations by their
// place in the committed list, then tentative ones by (TS, ID).
func before(a, b executed) int {
	switch {
	case a.committed && b.committed:
		return a.cpos - b.cpos
	case a.committed:
		return -1
	case b.committed:
		return 1
	}
	return compareReq(a.req, b.req)
}

// receive adds an operation that extends its origin's prefix by one to the
// tentative list (adjustTentativeOrder, Algorithm 1 line 36) and returns its
// tentative result.
func (r *Replica) receive(req *Req) (state.Result, bool) {
	if !r.admit(req) {
		return state.Result{}, false
	}
	x := executed{req: req}
	c := r.placeOf(x)
	r.place(c, []executed{x})
	for i := len(r.tentative) - 1; i >= c; i-- {
		if r.tentative[i].req == req {
			return r.tentative[i].result, true
		}
	}
	panic("replica: received operation not executed") // unreachable: it is in rest
}

// admit records an operation that extends its origin's prefix by one (it
// reports false for any other) in the version vector and the log; place
// then executes it.
func (r *Replica) admit(req *Req) bool {
	o := req.ID.Origin
	if req.ID.Seq != r.vv[o]+1 {
		return false
	}
	r.vv[o] = req.ID.Seq
	r.log[o] = append(r.log[o], req)
	r.arrived[req.ID] = r.ticks
	r.clk.Observe(req.TS)
	if req.TS > r.lastTS[o] {
		r.lastTS[o] = req.TS
	}
	return true
}

// placeOf returns the stack position from which x must be executed:
// Rollbacks only where necessary (Creek §4.4): operations ordered after it
// that touch none of its keys commute with it and stay executed; the first
// one that conflicts, and everything executed after it, is rolled back and
// re-executed in order with the newcomer.
func (r *Replica) placeOf(x executed) int {
	// The common case, an operation newer than every tentative one (every
	// operation this replica accepts, and gossip in timestamp order), goes
	// on top without a scan: latest bounds the tentative ones from above.
	if r.ntent > 0 && (r.latest == nil || compareReq(r.latest, x.req) > 0) {
		return r.firstConflictAfter(x)
	}
	return len(r.tentative)
}

// place inserts the admitted operations xs at their places in (TS, ID)
// order (adjustTentativeOrder, Algorithm 1 line 36): it rolls the stack
// back to c, the lowest of their placeOf, and executes what it rolled back
// with them, in order. Operations that arrive together (a gossip message)
// are placed together: one rollback for all of them.
func (r *Replica) place(c int, xs []executed) {
	r.reexecScratch(append(r.rollbackTo(c, r.undone[:0]), xs...))
	if n := r.TentativeLen(); n > r.stats.TentativeMaxDepth {
		r.stats.TentativeMaxDepth = n
	}
}

// firstConflictAfter returns the lowest stack position of an operation
// that conflicts with x and is ordered after it (len(tentative) if none).
// Operations that touch one key are executed in their logical order (the
// stack's invariant), so for each key of x those after it are the top of
// that key's positions: the walk stops at the first one before x.
func (r *Replica) firstConflictAfter(x executed) int {
	fp := x.req.footprint()
	c := len(r.tentative)
	if r.keys.wild > 0 || slices.Contains(fp, wildKey) {
		for i, e := range r.tentative {
			if before(e, x) > 0 && conflicts(e.req, x.req) {
				return i
			}
		}
		return c
	}
	for _, k := range fp {
		ps := r.keys.pos[k]
		for j := len(ps) - 1; j >= 0; j-- {
			i := ps[j] - r.keys.base
			if before(r.tentative[i], x) <= 0 {
				break
			}
			c = min(c, i)
		}
	}
	return c
}

// keyIndex maps every key touched by an operation of the stack to the
// positions of those operations, bottom first. Positions are absolute
// (base plus the index in the stack), so that dropping the bottom of the
// stack does not renumber them.
type keyIndex struct {
	base int
	pos  map[fkey][]int
	at   map[OpID]int // every operation's position
	wild int          // operations in the stack whose footprint is wildKey
	// free holds emptied position lists for keys that come next: most
	// keys enter and leave the index with one operation each.
	free [][]int
}

// maxFree bounds keyIndex.free, and maxFreeCap the lists it keeps.
const (
	maxFree    = 1024
	maxFreeCap = 64
)

func (x *keyIndex) reset() { *x = keyIndex{pos: map[fkey][]int{}, at: map[OpID]int{}} }

// index returns the stack index of an operation in the stack.
func (x *keyIndex) index(id OpID) (int, bool) {
	p, ok := x.at[id]
	return p - x.base, ok
}

// push records the operation just put on top, at index i.
func (x *keyIndex) push(q *Req, i int) {
	x.at[q.ID] = x.base + i
	for _, k := range q.footprint() {
		if k == wildKey {
			x.wild++
			continue
		}
		ps, ok := x.pos[k]
		if !ok && len(x.free) > 0 {
			ps = x.free[len(x.free)-1]
			x.free = x.free[:len(x.free)-1]
		}
		x.pos[k] = append(ps, x.base+i)
	}
}

// pop forgets the operation on top of the stack.
func (x *keyIndex) pop(q *Req) { x.forget(q, true) }

// dropBottom forgets the operation at the bottom of the stack.
func (x *keyIndex) dropBottom(q *Req) {
	x.forget(q, false)
	x.base++
}

// forget removes an operation at the top or the bottom of the stack: the
// last or the first position of each of its keys.
func (x *keyIndex) forget(q *Req, top bool) {
	delete(x.at, q.ID)
	for _, k := range q.footprint() {
		if k == wildKey {
			x.wild--
			continue
		}
		switch ps := x.pos[k]; {
		case len(ps) <= 1:
			delete(x.pos, k)
			if c := cap(ps); c > 0 && c <= maxFreeCap && len(x.free) < maxFree {
				x.free = append(x.free, ps[:0])
			}
		case top:
			x.pos[k] = ps[:len(ps)-1]
		default:
			x.pos[k] = ps[1:]
		}
	}
}

// rollbackTo undoes the stack from pos on, latest first, and returns what
// it undid, bottom first, appended to dst (which must not share the
// stack's array).
func (r *Replica) rollbackTo(pos int, dst []executed) []executed {
	for i := len(r.tentative) - 1; i >= pos; i-- {
		r.st.Revert(r.tentative[i].undo)
		r.stats.Rollbacks++
		r.keys.pop(r.tentative[i].req)
		if !r.tentative[i].committed {
			r.ntent--
		}
	}
	rest := append(dst, r.tentative[pos:]...)
	clear(r.tentative[pos:]) // no references kept past the top
	r.tentative = r.tentative[:pos]
	return rest
}

// pushExecuted puts e on top of the stack. The stack loses its bottom as
// operations commit (adjustExecution) and grows at the top, so its array
// would fill up and be copied again and again; when it is full and at
// least half of the array lies unused below its bottom, the stack moves
// down instead.
func (r *Replica) pushExecuted(e executed) {
	if n := len(r.tentative); n == cap(r.tentative) {
		// r.tentative always ends where r.tentArr ends (it is resliced
		// from either end or appended to): below it lie off unused slots.
		if off := cap(r.tentArr) - cap(r.tentative); off > 0 && off >= n {
			copy(r.tentArr[:n], r.tentative)
			clear(r.tentArr[off : off+n])
			r.tentative = r.tentArr[:n]
		} else {
			r.tentative = append(r.tentative, e)
			r.tentArr = r.tentative[:0]
			return
		}
	}
	r.tentative = append(r.tentative, e)
}

// dropBottom removes the n operations at the bottom of the stack.
func (r *Replica) dropBottom(n int) {
	clear(r.tentative[:n])
	r.tentative = r.tentative[n:]
}

// reexecScratch is reexec of es held in r.undone, which it then clears for
// the next use.
func (r *Replica) reexecScratch(es []executed) {
	r.reexec(es)
	clear(es)
	r.undone = es[:0]
}

// reexec executes operations on top of the stack in the logical order.
// Every pair that conflicts ends up executed in that order, which is what
// makes each result the one the logical order gives.
func (r *Replica) reexec(es []executed) {
	slices.SortStableFunc(es, before)
	for _, e := range es {
		res, undo := r.st.Apply(e.req.Op)
		r.stats.Executions++
		e.result, e.undo = res, undo
		r.keys.push(e.req, len(r.tentative))
		r.pushExecuted(e)
		if !e.committed {
			r.ntent++
			if r.latest == nil || compareReq(e.req, r.latest) > 0 {
				r.latest = e.req
			}
		}
	}
}

// withCommitted runs f on the committed state: it rolls the stack back,
// applies the committed operations that were in it (in stack order, which
// keeps every conflicting pair in order), runs f, and restores the stack.
// Batched per Ready for strong reads.
func (r *Replica) withCommitted(f func(*state.State)) {
	if len(r.tentative) == 0 {
		f(r.st)
		return
	}
	// None of this is a reordering: keep it out of the counters.
	saved, ntent := r.stats, r.ntent
	rest := r.rollbackTo(0, nil)
	var undos []state.Undo
	for _, e := range rest {
		if e.committed {
			_, u := r.st.Apply(e.req.Op)
			undos = append(undos, u)
		}
	}
	f(r.st)
	for i := len(undos) - 1; i >= 0; i-- {
		r.st.Revert(undos[i])
	}
	for _, e := range rest {
		e.result, e.undo = r.st.Apply(e.req.Op)
		r.keys.push(e.req, len(r.tentative))
		r.pushExecuted(e)
	}
	r.stats, r.ntent = saved, ntent
}

// conflicts reports whether two operations touch a common key or queue:
// operations that do not commute, whose relative order matters. Every
// operation in the lists may write, so a common key is a conflict.
func conflicts(a, b *Req) bool {
	fa, fb := a.footprint(), b.footprint()
	for _, x := range fa {
		for _, y := range fb {
			if x == y || x == wildKey || y == wildKey {
				return true
			}
		}
	}
	return false
}

// CheckInvariants verifies the execution stack against its bookkeeping: the
// count of tentative operations, the bound latest, the key index, and that
// every pair of conflicting operations is executed in the logical order
// (which is what makes every result the one that order gives). Quadratic in
// the stack: for tests and the simulation, not for production paths.
func (r *Replica) CheckInvariants() error {
	n := 0
	want := keyIndex{}
	want.reset()
	want.base = r.keys.base
	for i, e := range r.tentative {
		if !e.committed {
			n++
			if r.latest == nil || compareReq(e.req, r.latest) > 0 {
				return fmt.Errorf("replica %d: tentative %v after latest %v", r.cfg.ID, e.req.ID, r.latest)
			}
		}
		want.push(e.req, i)
		for _, y := range r.tentative[i+1:] {
			if before(y, e) < 0 && conflicts(e.req, y.req) {
				return fmt.Errorf("replica %d: %v executed before %v, which conflicts with it and precedes it", r.cfg.ID, e.req.ID, y.req.ID)
			}
		}
	}
	if n != r.ntent {
		return fmt.Errorf("replica %d: %d tentative operations, counted %d", r.cfg.ID, n, r.ntent)
	}
	if want.wild != r.keys.wild || len(want.pos) != len(r.keys.pos) {
		return fmt.Errorf("replica %d: key index has %d keys, %d wildcards; the stack %d, %d", r.cfg.ID, len(r.keys.pos), r.keys.wild, len(want.pos), want.wild)
	}
	for k, ps := range want.pos {
		if !slices.Equal(ps, r.keys.pos[k]) {
			return fmt.Errorf("replica %d: key %v at %v in the index, at %v in the stack", r.cfg.ID, k, r.keys.pos[k], ps)
		}
	}
	if len(r.keys.at) != len(r.tentative) {
		return fmt.Errorf("replica %d: %d operations indexed, %d in the stack", r.cfg.ID, len(r.keys.at), len(r.tentative))
	}
	for i, e := range r.tentative {
		if j, ok := r.keys.index(e.req.ID); !ok || j != i {
			return fmt.Errorf("replica %d: %v at %d in the stack, indexed at %d", r.cfg.ID, e.req.ID, i, j)
		}
	}
	return nil
}
