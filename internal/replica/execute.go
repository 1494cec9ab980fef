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
	// slot is the operation's place in the key index (keyIndex), given
	// when it is executed: slots grow up the stack, and an operation keeps
	// its slot while rollbacks move it down over the gaps of those undone
	// below it (rollbackSome), so that only what is undone leaves the
	// index.
	slot int
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
	r.place([]executed{{req: req}})
	if i, ok := r.index(req.ID); ok && r.tentative[i].req == req {
		return r.tentative[i].result, true
	}
	panic("replica: received operation not executed") // unreachable: place executed it
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

// after reports whether x has operations of the stack ordered after it:
// the common case, an operation newer than every tentative one (every
// operation this replica accepts, and gossip in timestamp order), goes on
// top without a scan: latest bounds the tentative ones from above.
func (r *Replica) after(x executed) bool {
	return r.ntent > 0 && (r.latest == nil || compareReq(r.latest, x.req) > 0)
}

// place inserts the admitted operations xs at their places in (TS, ID)
// order (adjustTentativeOrder, Algorithm 1 line 36). Rollbacks only where
// necessary (Creek §4.4): of the operations ordered after one of them,
// those that touch one of its keys, and above them what touches theirs, are
// rolled back (rollbackSome) and executed again with xs, in order; the
// others commute with all of that and stay executed where they are.
// Operations that arrive together (a gossip message) are placed together:
// one rollback for all of them.
func (r *Replica) place(xs []executed) {
	seeds, wild, low := r.seeds[:0], false, len(r.tentative)
	for _, x := range xs {
		if !r.after(x) {
			continue
		}
		if r.keys.wild > 0 || slices.Contains(x.req.footprint(), wildKey) {
			wild, low = true, min(low, r.firstConflictAfter(x))
			continue
		}
		seeds = r.conflictsAfter(x, seeds)
	}
	var rest []executed
	if wild {
		// An operation that conflicts with everything: everything from the
		// lowest conflict up goes.
		for _, p := range seeds {
			low = min(low, p)
		}
		rest = r.rollbackTo(low, r.undone[:0])
	} else {
		rest = r.rollbackSome(seeds, r.undone[:0])
	}
	r.seeds = seeds[:0]
	r.reexecScratch(append(rest, xs...))
	if n := r.TentativeLen(); n > r.stats.TentativeMaxDepth {
		r.stats.TentativeMaxDepth = n
	}
}

// conflictsAfter appends to seeds, for each key of x, the lowest stack
// position of an operation on that key ordered after x, if any.
// Operations that touch one key are executed in their logical order (the
// stack's invariant), so those after x are the top of that key's
// positions: the walk stops at the first one before x. No operation
// involved may be a wildcard (wildKey).
func (r *Replica) conflictsAfter(x executed, seeds []int) []int {
	for _, k := range x.req.footprint() {
		ps := r.keys.slots(k)
		low := -1
		for j := len(ps) - 1; j >= 0; j-- {
			i := r.at(ps[j])
			if before(r.tentative[i], x) <= 0 {
				break
			}
			low = i
		}
		if low >= 0 {
			seeds = append(seeds, low)
		}
	}
	return seeds
}

// firstConflictAfter returns the lowest stack position of an operation
// that conflicts with x and is ordered after it (len(tentative) if none),
// by a scan of the stack: for when x or an operation of the stack is a
// wildcard (wildKey), which the key index does not follow.
func (r *Replica) firstConflictAfter(x executed) int {
	for i, e := range r.tentative {
		if before(e, x) > 0 && conflicts(e.req, x.req) {
			return i
		}
	}
	return len(r.tentative)
}

// keyIndex maps every key touched by an operation of the stack to the
// slots of those operations, bottom first (executed.slot). Slots are given
// in increasing order as operations are executed on top of the stack, and
// stay with an operation while it stays executed: undoing operations under
// others that commute with them (rollbackSome) takes out of the index only
// what it undoes; the others just move down in the stack, which abs
// records (a slice write each, no map update).
type keyIndex struct {
	next int // the slot of the next operation executed
	// abs[s-lo] is the absolute stack position (base plus the index in
	// the stack) of the operation in slot s, for every slot from lo (the
	// bottom's) to next; slots whose operation was undone hold garbage.
	// Absolute, so that dropping the bottom of the stack renumbers nothing.
	abs      []int
	lo, base int
	// pos holds each key's list behind a pointer, so that a push or a pop
	// costs one lookup. A list that empties stays in the map (most keys
	// come back soon); empty counts those, and once they are many, the
	// map sheds them (forget).
	pos   map[fkey]*[]int
	empty int
	at    map[OpID]int // every operation's slot
	wild  int          // operations in the stack whose footprint is wildKey
}

// minShed is the number of empty lists keyIndex.pos keeps at least before
// it sheds them: past it, as many as it holds non-empty ones.
const minShed = 1024

func (x *keyIndex) reset() { *x = keyIndex{pos: map[fkey]*[]int{}, at: map[OpID]int{}} }

// slots returns the slots of the operations of the stack that touch k,
// bottom first (nil if none). The list is the index's: not to be kept or
// changed.
func (x *keyIndex) slots(k fkey) []int {
	if p := x.pos[k]; p != nil {
		return *p
	}
	return nil
}

// index returns the stack position of an operation in the stack.
func (r *Replica) index(id OpID) (int, bool) {
	s, ok := r.keys.at[id]
	if !ok {
		return 0, false
	}
	return r.at(s), true
}

// at returns the stack position of the operation in slot s, which must be
// in the stack.
func (r *Replica) at(s int) int { return r.keys.abs[s-r.keys.lo] - r.keys.base }

// push records q, executed at stack position i (the top), in a new slot,
// which it returns (the caller keeps it in the stack's entry).
func (x *keyIndex) push(q *Req, i int) int {
	s := x.next
	x.next++
	if len(x.abs) == 0 {
		x.lo = s
	}
	x.abs = append(x.abs, x.base+i)
	x.add(q, s)
	return s
}

// moved records that the operation in slot s is now at stack position i.
func (x *keyIndex) moved(s, i int) { x.abs[s-x.lo] = x.base + i }

// droppedBottom records that the stack lost its n bottom entries (each
// forgotten with dropBottom); bottom is the slot of the new bottom, next if
// the stack is empty.
func (x *keyIndex) droppedBottom(n, bottom int) {
	x.base += n
	if bottom == x.next {
		x.abs, x.lo = x.abs[:0], x.next // from the array's start again
		return
	}
	x.abs = x.abs[bottom-x.lo:]
	x.lo = bottom
}

// add records q in slot s, above every slot the index holds.
func (x *keyIndex) add(q *Req, s int) {
	x.at[q.ID] = s
	for _, k := range q.footprint() {
		if k == wildKey {
			x.wild++
			continue
		}
		p := x.pos[k]
		switch {
		case p == nil:
			p = new([]int)
			x.pos[k] = p
		case len(*p) == 0:
			x.empty--
		}
		*p = append(*p, s)
	}
}

// pop forgets the operation on top of the stack.
func (x *keyIndex) pop(q *Req) { x.forget(q, true) }

// dropBottom forgets the operation at the bottom of the stack.
func (x *keyIndex) dropBottom(q *Req) { x.forget(q, false) }

// forget removes an operation that holds the last slot of each of its
// keys (top) or the first: the operation on top of the stack or at its
// bottom, or one that rollbackSome undoes (every operation above it on
// one of its keys is undone, and forgotten, before it).
func (x *keyIndex) forget(q *Req, top bool) {
	delete(x.at, q.ID)
	for _, k := range q.footprint() {
		if k == wildKey {
			x.wild--
			continue
		}
		switch p := x.pos[k]; {
		case len(*p) == 1:
			*p = (*p)[:0] // the next push reuses what is left of the array
			x.empty++
		case top:
			*p = (*p)[:len(*p)-1]
		default:
			*p = (*p)[1:]
		}
	}
	if x.empty > minShed && x.empty > len(x.pos)-x.empty {
		for k, p := range x.pos {
			if len(*p) == 0 {
				delete(x.pos, k)
			}
		}
		x.empty = 0
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

// rollbackSome undoes the operations at the stack positions seeds and,
// above each of them, every operation that touches one of its keys or
// queues, transitively (what must be executed again after them to keep
// every conflicting pair in its order), latest first, and returns them,
// bottom first, appended to dst (which must not share the stack's array).
// The other operations above the lowest seed commute with everything it
// undoes: they stay executed, in their order, moved down over the gaps.
// Undoing an operation under ones that commute with it is exact
// (state.Revert checks it). No operation of the stack may be a wildcard
// (wildKey): the key index finds what conflicts.
func (r *Replica) rollbackSome(seeds []int, dst []executed) []executed {
	if len(seeds) == 0 {
		return dst
	}
	lo := slices.Min(seeds)
	n := len(r.tentative)
	marks := r.marks[:0]
	if cap(marks) < n-lo {
		marks = make([]bool, 0, n-lo)
	}
	marks = marks[:n-lo]
	for _, p := range seeds {
		marks[p-lo] = true
	}
	// Mark, bottom up, what lies above a marked operation on one of its
	// keys. A key's slots above a marked one are all marked once that one
	// is reached, so the walk up a key's list stops at the first mark.
	for i := lo; i < n; i++ {
		if !marks[i-lo] {
			continue
		}
		for _, k := range r.tentative[i].req.footprint() {
			// Above i: a footprint may name a key twice (a transaction's
			// guard and write), and the list holds i's slot as often.
			ps := r.keys.slots(k)
			at, _ := slices.BinarySearch(ps, r.tentative[i].slot+1)
			for _, s := range ps[at:] {
				j := r.at(s)
				if marks[j-lo] {
					break
				}
				marks[j-lo] = true
			}
		}
	}
	// Undo the marked ones, latest first. On each of its keys, what is
	// marked is the top of the key's list (above a marked operation,
	// everything on its keys is marked), so each one undone holds the last
	// slot of its keys when it is forgotten. What stays keeps its slot.
	for i := n - 1; i >= lo; i-- {
		if !marks[i-lo] {
			continue
		}
		e := &r.tentative[i]
		r.keys.pop(e.req)
		r.st.Revert(e.undo)
		r.stats.Rollbacks++
		if !e.committed {
			r.ntent--
		}
	}
	w := lo
	for i := lo; i < n; i++ {
		if marks[i-lo] {
			dst = append(dst, r.tentative[i])
			continue
		}
		if w != i {
			r.tentative[w] = r.tentative[i]
			r.keys.moved(r.tentative[w].slot, w)
		}
		w++
	}
	clear(r.tentative[w:n]) // no references kept past the top
	r.tentative = r.tentative[:w]
	clear(marks)
	r.marks = marks[:0]
	return dst
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

// dropBottom removes the n operations at the bottom of the stack, each
// forgotten by the key index already (keyIndex.dropBottom).
func (r *Replica) dropBottom(n int) {
	clear(r.tentative[:n])
	r.tentative = r.tentative[n:]
	bottom := r.keys.next
	if len(r.tentative) > 0 {
		bottom = r.tentative[0].slot
	}
	r.keys.droppedBottom(n, bottom)
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
	defer r.compactIndex()
	for _, e := range es {
		res, undo := r.st.ApplyOwned(e.req.Op)
		r.stats.Executions++
		e.result, e.undo = res, undo
		e.slot = r.keys.push(e.req, len(r.tentative))
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
			_, u := r.st.ApplyOwned(e.req.Op)
			undos = append(undos, u)
		}
	}
	f(r.st)
	for i := len(undos) - 1; i >= 0; i-- {
		r.st.Revert(undos[i])
	}
	for _, e := range rest {
		e.result, e.undo = r.st.ApplyOwned(e.req.Op)
		e.slot = r.keys.push(e.req, len(r.tentative))
		r.pushExecuted(e)
	}
	r.stats, r.ntent = saved, ntent
	r.compactIndex()
}

// compactIndex gives the stack's operations their slots afresh, from 0,
// once most of the key index's slots are of operations undone (each
// execution takes a slot, and an undone one leaves a hole until the
// bottom of the stack passes it: a replica that cannot commit, its stack
// rolled back and executed again and again, would grow abs without
// bound). Amortized: it runs after more executions than the stack holds.
func (r *Replica) compactIndex() {
	if len(r.keys.abs) <= 2*len(r.tentative)+1024 {
		return
	}
	r.keys.reset()
	for i := range r.tentative {
		r.tentative[i].slot = r.keys.push(r.tentative[i].req, i)
	}
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
	for i, e := range r.tentative {
		if i > 0 && e.slot <= r.tentative[i-1].slot {
			return fmt.Errorf("replica %d: slot %d at %d in the stack, over %d", r.cfg.ID, e.slot, i, r.tentative[i-1].slot)
		}
		if e.slot >= r.keys.next {
			return fmt.Errorf("replica %d: slot %d at %d in the stack, not given yet (next %d)", r.cfg.ID, e.slot, i, r.keys.next)
		}
		if !e.committed {
			n++
			if r.latest == nil || compareReq(e.req, r.latest) > 0 {
				return fmt.Errorf("replica %d: tentative %v after latest %v", r.cfg.ID, e.req.ID, r.latest)
			}
		}
		want.add(e.req, e.slot)
		for _, y := range r.tentative[i+1:] {
			if before(y, e) < 0 && conflicts(e.req, y.req) {
				return fmt.Errorf("replica %d: %v executed before %v, which conflicts with it and precedes it", r.cfg.ID, e.req.ID, y.req.ID)
			}
		}
	}
	if n != r.ntent {
		return fmt.Errorf("replica %d: %d tentative operations, counted %d", r.cfg.ID, n, r.ntent)
	}
	if len(r.keys.abs) != r.keys.next-r.keys.lo || (len(r.tentative) > 0 && r.tentative[0].slot < r.keys.lo) {
		return fmt.Errorf("replica %d: key index positions from slot %d, %d of them, next %d", r.cfg.ID, r.keys.lo, len(r.keys.abs), r.keys.next)
	}
	empty := 0
	for _, p := range r.keys.pos {
		if len(*p) == 0 {
			empty++
		}
	}
	if empty != r.keys.empty {
		return fmt.Errorf("replica %d: key index holds %d empty lists, counted %d", r.cfg.ID, empty, r.keys.empty)
	}
	if want.wild != r.keys.wild || len(want.pos) != len(r.keys.pos)-empty {
		return fmt.Errorf("replica %d: key index has %d keys, %d wildcards; the stack %d, %d", r.cfg.ID, len(r.keys.pos)-empty, r.keys.wild, len(want.pos), want.wild)
	}
	for k, p := range want.pos {
		if !slices.Equal(*p, r.keys.slots(k)) {
			return fmt.Errorf("replica %d: key %v at %v in the index, at %v in the stack", r.cfg.ID, k, r.keys.slots(k), *p)
		}
	}
	if len(r.keys.at) != len(r.tentative) {
		return fmt.Errorf("replica %d: %d operations indexed, %d in the stack", r.cfg.ID, len(r.keys.at), len(r.tentative))
	}
	for i, e := range r.tentative {
		if j, ok := r.index(e.req.ID); !ok || j != i {
			return fmt.Errorf("replica %d: %v at %d in the stack, indexed at %d", r.cfg.ID, e.req.ID, i, j)
		}
	}
	return nil
}
