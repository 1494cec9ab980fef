package history

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/correctables/correctables/internal/state"
)

// witnessItem is one operation of the candidate linearization.
type witnessItem struct {
	rec        int // record index, or -1 for a committed op nobody recorded
	op         state.Op
	call, ret  int64
	output     *state.Result // nil: any output
	readOnlyAt bool          // a read placed between committed ops
}

// checkWitness tries the linearization the store itself claims: the
// committed order, with each strong read without an ID placed after the
// committed prefix its stamp names. If that sequence executes to the results
// the clients saw and respects real time, the history is linearizable, and
// porcupine's search (exponential in the worst case, and histories with
// long-lived weak writes are that case) is not needed. It returns "" on
// success, or why the claimed order is not a linearization; that does not
// prove there is none.
func checkWitness(records []Record, committed []OpID, submitted []Submitted) string {
	recByID := make(map[OpID]int, len(records))
	for i := range records {
		if id := records[i].ID; !id.IsZero() {
			recByID[id] = i
		}
	}
	subByID := make(map[OpID]state.Op, len(submitted))
	for _, s := range submitted {
		subByID[s.ID] = s.Op
	}
	inCommitted := make(map[OpID]bool, len(committed))
	for _, id := range committed {
		if inCommitted[id] {
			return fmt.Sprintf("op %v is committed twice", id)
		}
		inCommitted[id] = true
	}
	reads := make([][]witnessItem, len(committed)+1) // by committed count
	for i := range records {
		rec := &records[i]
		f := rec.final()
		switch {
		case f < 0 || (!rec.Strong && rec.ID.IsZero()):
			continue
		case !rec.ID.IsZero():
			if !inCommitted[rec.ID] {
				return fmt.Sprintf("%s has a final view but is not in the committed order", rec.describe(i))
			}
		case !rec.Op.ReadOnly():
			return fmt.Sprintf("%s is a write with a final view but no id", rec.describe(i))
		default:
			k := rec.Views[f].Stamp.CommittedCount
			if k < 0 || k > len(committed) {
				return fmt.Sprintf("%s: final view's committed count %d is outside the committed order (%d ops)", rec.describe(i), k, len(committed))
			}
			res := rec.Views[f].Result
			reads[k] = append(reads[k], witnessItem{rec: i, op: rec.Op, call: rec.Invoke, ret: rec.Views[f].At, output: &res, readOnlyAt: true})
		}
	}
	var seq []witnessItem
	for k := range len(committed) + 1 {
		// Reads at one place in any order are equivalent; by invocation
		// time none of them precedes one that returned before it.
		slices.SortFunc(reads[k], func(a, b witnessItem) int { return cmp.Compare(a.call, b.call) })
		seq = append(seq, reads[k]...)
		if k == len(committed) {
			break
		}
		id := committed[k]
		i, ok := recByID[id]
		if !ok {
			op, ok := subByID[id]
			if !ok {
				return fmt.Sprintf("committed[%d] = %v belongs to no record and no submitted op", k, id)
			}
			seq = append(seq, witnessItem{rec: -1, op: op, call: math.MinInt64, ret: math.MaxInt64})
			continue
		}
		rec := &records[i]
		it := witnessItem{rec: i, op: rec.Op, call: rec.Invoke, ret: math.MaxInt64}
		if f := rec.final(); f >= 0 {
			res := rec.Views[f].Result
			it.output, it.ret = &res, rec.Views[f].At
		}
		seq = append(seq, it)
	}
	// Real time: no operation may come after one that returned before it
	// was invoked.
	minRet := int64(math.MaxInt64)
	minAt := -1
	for j := len(seq) - 1; j >= 0; j-- {
		if minAt >= 0 && seq[j].call > minRet {
			return fmt.Sprintf("the committed order puts %s before %s, which returned at %d, before it was invoked",
				describeItem(records, seq[j]), describeItem(records, seq[minAt]), minRet)
		}
		if seq[j].ret < minRet {
			minRet, minAt = seq[j].ret, j
		}
	}
	st := state.New(state.DefaultLimits())
	for j, it := range seq {
		res, undo := st.Apply(it.op)
		if it.output != nil && !res.Equal(*it.output) {
			return fmt.Sprintf("%s saw %s, but at its place in the committed order (item %d) it gives %s",
				describeItem(records, it), describeResult(*it.output), j, describeResult(res))
		}
		if it.readOnlyAt {
			st.Revert(undo)
		}
	}
	return ""
}

func describeItem(records []Record, it witnessItem) string {
	if it.rec < 0 {
		return "an unrecorded " + describeOp(it.op)
	}
	return records[it.rec].describe(it.rec)
}
