package history

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/correctables/correctables/internal/state"
)

// CheckWeakViews checks fluctuating eventual consistency (Creek §4.3,
// FEC(weak, F)) by reconstruction, which is stronger than FEC's "some serial
// order of some subset": each view must come from the exact order its stamp
// claims.
//
// For every preliminary view, and for the final view of a weak operation
// without an ID (a weak read), the claimed order is what Creek's replica
// executes (Algorithm 1, committed · tentative): first
// committed[:Stamp.CommittedCount], then every operation of submitted that
// Stamp.VV covers and that prefix lacks, sorted by (TS, Origin, Seq). The
// view's result must equal the record's result at its own place in that
// order, or, for a read-only operation outside the lists, its result at the
// end of it.
//
// For the final view of a strong read without an ID (served through
// ReadIndex from committed state) the order is committed[:CommittedCount]
// alone. For every final view of an operation with an ID, the result must
// be the operation's result at its place in the whole committed order, and
// the stamp must include that place.
//
// It also checks what the reconstruction relies on: submitted and committed
// hold no ID twice, committed holds only submitted operations, each stamp's
// committed count is within committed, its version vector covers every
// operation of its committed prefix and no operation beyond submitted, and
// a view of an operation with an ID covers the operation itself.
//
// submitted holds every operation that entered the lists, at any replica;
// committed is the final committed order once the cluster is quiet.
func CheckWeakViews(records []Record, submitted []Submitted, committed []OpID) error {
	c, err := newReconstruction(submitted, committed)
	if err != nil {
		return err
	}
	vs := violations{check: "weak views"}
	tasks := c.tasks(records, &vs)
	c.run(records, tasks, &vs)
	c.checkFinals(records, &vs)
	return vs.err()
}

// reconstruction replays the orders views claim, sharing work between
// views: views are visited by committed count, the committed prefix is
// executed once, forwards only, and the tentative suffix is kept on an undo
// stack so that a view whose order shares a prefix with the previous one
// re-executes only the difference (the rollback of Creek's adjustExecution).
type reconstruction struct {
	submitted []Submitted
	committed []OpID
	byID      map[OpID]int      // index in submitted
	commitPos map[OpID]int      // index in committed
	byOrigin  map[uint64][]int  // indices in submitted, by Seq
	origins   []uint64          // keys of byOrigin, sorted
	maxSeq    map[uint64]uint64 // highest submitted Seq per origin

	st       *state.State
	applied  int            // st holds committed[:applied], then stack
	results  []state.Result // result of committed[i], for i < applied
	prefixVV map[uint64]uint64
	next     map[uint64]int // per origin, first index in byOrigin not in committed[:applied]
	stack    []executed
	onStack  map[OpID]int
}

type executed struct {
	id   OpID
	res  state.Result
	undo state.Undo
}

func newReconstruction(submitted []Submitted, committed []OpID) (*reconstruction, error) {
	vs := violations{check: "weak views"}
	c := &reconstruction{
		submitted: submitted,
		committed: committed,
		byID:      make(map[OpID]int, len(submitted)),
		commitPos: make(map[OpID]int, len(committed)),
		byOrigin:  map[uint64][]int{},
		maxSeq:    map[uint64]uint64{},
		st:        state.New(state.DefaultLimits()),
		results:   make([]state.Result, len(committed)),
		prefixVV:  map[uint64]uint64{},
		next:      map[uint64]int{},
		onStack:   map[OpID]int{},
	}
	for i, s := range submitted {
		if s.ID.IsZero() || s.ID.Seq == 0 {
			vs.add(-1, -1, "submitted[%d] has id %v: ids start at sequence number 1", i, s.ID)
			continue
		}
		if j, dup := c.byID[s.ID]; dup {
			vs.add(-1, -1, "op %v submitted twice, at %d and at %d", s.ID, j, i)
			continue
		}
		c.byID[s.ID] = i
		c.byOrigin[s.ID.Origin] = append(c.byOrigin[s.ID.Origin], i)
		c.maxSeq[s.ID.Origin] = max(c.maxSeq[s.ID.Origin], s.ID.Seq)
	}
	for i, id := range committed {
		if j, dup := c.commitPos[id]; dup {
			vs.add(-1, -1, "op %v committed twice, at %d and at %d", id, j, i)
			continue
		}
		if _, ok := c.byID[id]; !ok {
			vs.add(-1, -1, "committed[%d] = %v was never submitted", i, id)
		}
		c.commitPos[id] = i
	}
	if err := vs.err(); err != nil {
		return nil, err
	}
	c.origins = slices.Sorted(maps.Keys(c.byOrigin))
	for _, o := range c.origins {
		slices.SortFunc(c.byOrigin[o], func(a, b int) int {
			return cmp.Compare(submitted[a].ID.Seq, submitted[b].ID.Seq)
		})
	}
	return c, nil
}

type taskKind uint8

const (
	// claimedOrder: committed prefix, then the covered tentative ops.
	claimedOrder taskKind = iota
	// committedOnly: a strong read served from committed state.
	committedOnly
)

type task struct {
	rec, view int
	kind      taskKind
	stamp     *Stamp
	at        int64
}

// tasks lists the views to reconstruct, in the order that shares the most
// work: by committed count, then by replica and time (a replica's tentative
// list changes little between two of its views).
func (c *reconstruction) tasks(records []Record, vs *violations) []task {
	var tasks []task
	for i := range records {
		rec := &records[i]
		if !rec.ID.IsZero() {
			if j, ok := c.byID[rec.ID]; !ok {
				if len(rec.Views) > 0 {
					vs.add(i, -1, "%s: has views but its id was never submitted", rec.describe(i))
				}
				continue
			} else if s := c.submitted[j].Op; s.Kind != rec.Op.Kind || s.Key != rec.Op.Key {
				vs.add(i, -1, "%s: id %v was submitted as %s", rec.describe(i), rec.ID, describeOp(s))
				continue
			}
		}
		for j := range rec.Views {
			v := &rec.Views[j]
			kind := claimedOrder
			switch {
			case v.Final && !rec.ID.IsZero():
				continue // checkFinals
			case v.Final && rec.Strong:
				kind = committedOnly
			}
			if rec.ID.IsZero() && !rec.Op.ReadOnly() {
				vs.add(i, j, "%s: view %d of a write without an id cannot be placed in any order", rec.describe(i), j)
				continue
			}
			if k := v.Stamp.CommittedCount; k < 0 || k > len(c.committed) {
				vs.add(i, j, "%s: %s: committed count %d is not a prefix of the committed order (%d ops)", rec.describe(i), describeView(j, v), k, len(c.committed))
				continue
			}
			tasks = append(tasks, task{rec: i, view: j, kind: kind, stamp: &v.Stamp, at: v.At})
		}
	}
	slices.SortFunc(tasks, func(a, b task) int {
		return cmp.Or(
			cmp.Compare(a.stamp.CommittedCount, b.stamp.CommittedCount),
			cmp.Compare(a.kind, b.kind),
			cmp.Compare(a.stamp.Replica, b.stamp.Replica),
			cmp.Compare(a.at, b.at),
			cmp.Compare(a.rec, b.rec),
			cmp.Compare(a.view, b.view),
		)
	})
	return tasks
}

func describeView(j int, v *View) string {
	kind := "preliminary"
	if v.Final {
		kind = "final"
	}
	return fmt.Sprintf("view %d (%s, at %d, %v)", j, kind, v.At, v.Stamp)
}

func (c *reconstruction) run(records []Record, tasks []task, vs *violations) {
	for _, t := range tasks {
		rec := &records[t.rec]
		v := &rec.Views[t.view]
		c.advance(t.stamp.CommittedCount)
		if t.kind == committedOnly {
			c.setTentative(nil)
			got := c.readAtEnd(rec.Op)
			if !got.Equal(v.Result) {
				vs.add(t.rec, t.view, "%s: %s: got %s, but the committed state it claims gives %s; committed order %s",
					rec.describe(t.rec), describeView(t.view, v), describeResult(v.Result), describeResult(got), describeOrder(c.committed[:c.applied]))
			}
			continue
		}
		tentative, problem := c.claimedTentative(t.stamp)
		if problem != "" {
			vs.add(t.rec, t.view, "%s: %s: %s", rec.describe(t.rec), describeView(t.view, v), problem)
			continue
		}
		c.setTentative(tentative)
		var want state.Result
		if rec.ID.IsZero() {
			want = c.readAtEnd(rec.Op)
		} else if r, ok := c.resultInClaimedOrder(rec.ID); ok {
			want = r
		} else {
			vs.add(t.rec, t.view, "%s: %s: the stamp does not cover the op itself", rec.describe(t.rec), describeView(t.view, v))
			continue
		}
		if !want.Equal(v.Result) {
			vs.add(t.rec, t.view, "%s: %s: got %s, but the order it claims gives %s; claimed order: committed[:%d] then tentative %s",
				rec.describe(t.rec), describeView(t.view, v), describeResult(v.Result), describeResult(want), c.applied, describeOrder(tentative))
		}
	}
	c.advance(len(c.committed))
}

// resultInClaimedOrder returns the result of id at its place in the order
// now executed: the committed prefix, then the tentative stack.
func (c *reconstruction) resultInClaimedOrder(id OpID) (state.Result, bool) {
	if p, ok := c.commitPos[id]; ok && p < c.applied {
		return c.results[p], true
	}
	if p, ok := c.onStack[id]; ok {
		return c.stack[p].res, true
	}
	return state.Result{}, false
}

// advance executes the committed order up to k (never backwards: tasks are
// sorted by committed count). The tentative stack is rolled back first.
func (c *reconstruction) advance(k int) {
	if k == c.applied {
		return
	}
	c.setTentative(nil)
	for ; c.applied < k; c.applied++ {
		id := c.committed[c.applied]
		res, _ := c.st.Apply(c.submitted[c.byID[id]].Op)
		c.results[c.applied] = cloneResult(res)
		c.prefixVV[id.Origin] = max(c.prefixVV[id.Origin], id.Seq)
	}
}

// claimedTentative returns the tentative list a replica with the stamp held
// (committed count already applied): the covered ops that are not in the
// committed prefix, in (TS, Origin, Seq) order. It returns a description of
// the problem instead if the stamp cannot be right.
func (c *reconstruction) claimedTentative(s *Stamp) ([]OpID, string) {
	for _, o := range slices.Sorted(maps.Keys(c.prefixVV)) {
		if s.VV[o] < c.prefixVV[o] {
			return nil, fmt.Sprintf("the version vector does not cover %v, which is in its own committed prefix (it covers origin %d up to %d)", OpID{o, c.prefixVV[o]}, o, s.VV[o])
		}
	}
	for _, o := range slices.Sorted(maps.Keys(s.VV)) {
		if s.VV[o] > c.maxSeq[o] {
			return nil, fmt.Sprintf("the version vector covers %v, but origin %d submitted only up to sequence number %d", OpID{o, s.VV[o]}, o, c.maxSeq[o])
		}
	}
	var ops []int
	for _, o := range c.origins {
		list := c.byOrigin[o]
		// Skip the ops of o that are all in the committed prefix: this
		// pointer only moves forwards as the prefix grows.
		n := c.next[o]
		for n < len(list) {
			if p, ok := c.commitPos[c.submitted[list[n]].ID]; !ok || p >= c.applied {
				break
			}
			n++
		}
		c.next[o] = n
		for _, i := range list[n:] {
			id := c.submitted[i].ID
			if id.Seq > s.VV[o] {
				break
			}
			if p, ok := c.commitPos[id]; ok && p < c.applied {
				continue
			}
			ops = append(ops, i)
		}
	}
	slices.SortFunc(ops, func(a, b int) int { return compareTentative(&c.submitted[a], &c.submitted[b]) })
	ids := make([]OpID, len(ops))
	for j, i := range ops {
		ids[j] = c.submitted[i].ID
	}
	return ids, ""
}

// setTentative makes the undo stack hold exactly ids on top of the committed
// prefix, keeping the common prefix with what it holds now.
func (c *reconstruction) setTentative(ids []OpID) {
	keep := 0
	for keep < len(ids) && keep < len(c.stack) && c.stack[keep].id == ids[keep] {
		keep++
	}
	for len(c.stack) > keep {
		top := c.stack[len(c.stack)-1]
		c.st.Revert(top.undo)
		delete(c.onStack, top.id)
		c.stack = c.stack[:len(c.stack)-1]
	}
	for _, id := range ids[keep:] {
		res, undo := c.st.Apply(c.submitted[c.byID[id]].Op)
		c.onStack[id] = len(c.stack)
		c.stack = append(c.stack, executed{id: id, res: cloneResult(res), undo: undo})
	}
}

// readAtEnd executes op on the current state and takes it back.
func (c *reconstruction) readAtEnd(op state.Op) state.Result {
	res, undo := c.st.Apply(op)
	res = cloneResult(res)
	c.st.Revert(undo)
	return res
}

// checkFinals checks every final view of an op with an ID against the op's
// result at its place in the committed order.
func (c *reconstruction) checkFinals(records []Record, vs *violations) {
	for i := range records {
		rec := &records[i]
		if rec.ID.IsZero() {
			continue
		}
		if _, ok := c.byID[rec.ID]; !ok {
			continue // reported by tasks
		}
		for j := range rec.Views {
			v := &rec.Views[j]
			if !v.Final {
				continue
			}
			p, ok := c.commitPos[rec.ID]
			if !ok {
				vs.add(i, j, "%s: %s: final view of an op that is not in the committed order", rec.describe(i), describeView(j, v))
				continue
			}
			if v.Stamp.CommittedCount <= p {
				vs.add(i, j, "%s: %s: final view stamped with committed count %d, but the op is committed at position %d", rec.describe(i), describeView(j, v), v.Stamp.CommittedCount, p)
			}
			if !c.results[p].Equal(v.Result) {
				vs.add(i, j, "%s: %s: got %s, but its place in the committed order (%d) gives %s; committed order up to it: %s",
					rec.describe(i), describeView(j, v), describeResult(v.Result), p, describeResult(c.results[p]), describeOrder(c.committed[:p+1]))
			}
		}
	}
}
