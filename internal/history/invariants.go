package history

import "fmt"

// CheckFinalOnce checks the Correctable contract (DESIGN §3) on what clients
// saw: each record has at most one final view and nothing after it (so views
// never go from final back to preliminary), views arrive in time order, none
// before the invocation, and Acked is set exactly when a view arrived.
func CheckFinalOnce(records []Record) error {
	vs := violations{check: "final once"}
	for i := range records {
		rec := &records[i]
		if rec.Acked != (len(rec.Views) > 0) {
			vs.add(i, -1, "%s: acked=%v with %d views", rec.describe(i), rec.Acked, len(rec.Views))
		}
		final := -1
		prev := rec.Invoke
		for j, v := range rec.Views {
			if v.At < prev {
				vs.add(i, j, "%s: view %d at %d arrived before %d (the invocation or the previous view)", rec.describe(i), j, v.At, prev)
			}
			prev = v.At
			if final >= 0 {
				vs.add(i, j, "%s: view %d (final=%v, %s) arrived after final view %d", rec.describe(i), j, v.Final, describeResult(v.Result), final)
				continue
			}
			if v.Final {
				final = j
			}
		}
	}
	return vs.err()
}

// CheckDurable checks that no acknowledged write was lost or applied twice:
// every acked record whose operation is not read-only has an ID that appears
// in committed exactly once, and no ID appears in committed twice. committed
// is the final committed order, taken once the cluster is quiet.
func CheckDurable(records []Record, committed []OpID) error {
	vs := violations{check: "durable"}
	pos := make(map[OpID]int, len(committed))
	for i, id := range committed {
		if id.IsZero() {
			vs.add(-1, -1, "committed[%d] is the zero id", i)
			continue
		}
		if first, dup := pos[id]; dup {
			vs.add(-1, -1, "op %v committed twice, at %d and at %d", id, first, i)
			continue
		}
		pos[id] = i
	}
	for i := range records {
		rec := &records[i]
		if !rec.Acked || rec.Op.ReadOnly() {
			continue
		}
		if rec.ID.IsZero() {
			vs.add(i, -1, "%s: acked write has no id, so its fate cannot be checked", rec.describe(i))
			continue
		}
		if _, ok := pos[rec.ID]; !ok {
			vs.add(i, -1, "%s: acked write is lost: not in the committed order (%d ops)", rec.describe(i), len(committed))
		}
	}
	return vs.err()
}

// ReplicaState is what a replica holds once the cluster is quiet.
type ReplicaState struct {
	ID        uint64
	Committed []OpID
	StateHash uint64
	Tentative []OpID
}

// CheckConverged checks eventual convergence (Creek §4.3): once no operation
// is in flight, all replicas hold the same committed list, the same tentative
// list and the same state. The error names the first difference from the
// first replica.
func CheckConverged(replicas []ReplicaState) error {
	vs := violations{check: "converged"}
	if len(replicas) == 0 {
		return nil
	}
	ref := &replicas[0]
	for i := 1; i < len(replicas); i++ {
		r := &replicas[i]
		if d := firstDiff(ref.Committed, r.Committed); d != "" {
			vs.add(-1, i, "replica %d and replica %d: committed lists differ: %s", ref.ID, r.ID, d)
		}
		if d := firstDiff(ref.Tentative, r.Tentative); d != "" {
			vs.add(-1, i, "replica %d and replica %d: tentative lists differ: %s", ref.ID, r.ID, d)
		}
		if ref.StateHash != r.StateHash {
			vs.add(-1, i, "replica %d and replica %d: state hashes differ: %#x and %#x", ref.ID, r.ID, ref.StateHash, r.StateHash)
		}
	}
	return vs.err()
}

// firstDiff describes the first position where a and b differ, or "".
func firstDiff(a, b []OpID) string {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return fmt.Sprintf("at %d: %v vs %v", i, a[i], b[i])
		}
	}
	if len(a) != len(b) {
		if len(a) > n {
			return fmt.Sprintf("lengths %d vs %d, first extra %v", len(a), len(b), a[n])
		}
		return fmt.Sprintf("lengths %d vs %d, first extra %v", len(a), len(b), b[n])
	}
	return ""
}
