package history

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/correctables/correctables/internal/state"
)

// VisualizeEnv names the environment variable that asks CheckLinearizable to
// write porcupine's HTML visualization of a history that is not
// linearizable: a file path ending in ".html", or a directory to create a
// fresh file in.
const VisualizeEnv = "CORRECTABLES_PORCUPINE_VIS"

// ModelInput is the input of one operation in the porcupine model. The
// output is the state.Result the client saw, or nil when UnknownOutput.
type ModelInput struct {
	Op state.Op
	// UnknownOutput marks a write that may have taken effect but whose final
	// result the client never saw: the model accepts any output for it.
	UnknownOutput bool
}

// Model is the porcupine model of the store: the real state machine, so the
// checker and the replicas can never disagree on what an operation means.
// Its state is a *state.State. It partitions histories by the keys and
// queues operations touch (porcupine's P-compositionality), which keeps the
// search small.
func Model() porcupine.Model {
	return porcupine.Model{
		Partition: partitionByKey,
		Init:      func() any { return state.New(state.DefaultLimits()) },
		Step: func(s, in, out any) (bool, any) {
			st := s.(*state.State)
			input := in.(ModelInput)
			if input.Op.ReadOnly() {
				// A read-only op changes nothing, so skip the clone; Revert
				// anyway so the model stays pure whatever Apply caches.
				// Porcupine steps one partition from one goroutine.
				res, undo := st.Apply(input.Op)
				ok := input.UnknownOutput || res.Equal(out.(state.Result))
				st.Revert(undo)
				return ok, st
			}
			next := st.Clone()
			res, _ := next.Apply(input.Op)
			return input.UnknownOutput || res.Equal(out.(state.Result)), next
		},
		Equal: func(a, b any) bool { return a.(*state.State).Equal(b.(*state.State)) },
		Hash:  func(s any) uint64 { return s.(*state.State).Hash() },
		DescribeOperation: func(in, out any) string {
			input := in.(ModelInput)
			if input.UnknownOutput {
				return describeOp(input.Op) + " -> (unknown)"
			}
			return describeOp(input.Op) + " -> " + describeResult(out.(state.Result))
		},
		DescribeState: func(s any) string { return describeState(s.(*state.State)) },
		DescribeOperationMetadata: func(m any) string {
			if m == nil {
				return ""
			}
			return fmt.Sprintf("record %d", m.(int))
		},
	}
}

// describeState shows the plain keys (through a scan, the state's only
// enumeration) and the content hash, which also covers the queues.
func describeState(s *state.State) string {
	res, _ := s.Apply(state.Op{Kind: state.OpScan, Limit: maxShown})
	items := describeResult(state.Result{Items: res.Items})
	if !res.OK {
		items += " (more keys)"
	}
	return fmt.Sprintf("%s hash %016x", items, s.Hash())
}

// LinearizableOptions configures CheckLinearizableWith.
type LinearizableOptions struct {
	// Timeout bounds porcupine's search; zero means no bound. When it
	// expires the result is porcupine.Unknown and the error nil.
	Timeout time.Duration
	// VisualizePath, if set, is where porcupine's HTML visualization of a
	// history that is not linearizable is written. If empty, the
	// VisualizeEnv environment variable is consulted.
	VisualizePath string
	// Submitted gives the operations of committed IDs that no record holds
	// (such as the periodic strong no-op), so that the committed order can
	// be tried as the linearization before porcupine searches for one.
	Submitted []Submitted
}

// CheckLinearizable checks that the final views are linearizable; see
// CheckLinearizableWith.
func CheckLinearizable(records []Record, committed []OpID, timeout time.Duration) (porcupine.CheckResult, error) {
	return CheckLinearizableWith(records, committed, LinearizableOptions{Timeout: timeout})
}

// CheckLinearizableWith checks linearizability of the stable results (Creek
// §4.3, Lin(strong, F); Creek's weak operations become linearizable too once
// committed, since their final view is their result at their committed
// position). It feeds porcupine:
//
//   - every record with a final view, except weak reads (checked by
//     CheckWeakViews instead), over
//     [Invoke, time of the final view] with the final view's result;
//   - every write without a final view that may have taken effect, as
//     pending: it may take effect at any time after its invocation, with any
//     result. committed is the final committed order: a write whose ID is
//     not in it never took effect and is left out. A nil committed means
//     unknown: every such write is pending.
//
// Reads without a final view tell nothing and are left out.
//
// The committed order itself (with each strong read without an ID after the
// committed prefix its final stamp names) is tried first, in linear time: if
// it is a linearization, the answer is porcupine.Ok without a search. Only
// otherwise does porcupine search, bounded by opts.Timeout.
//
// It returns porcupine.Ok with a nil error; porcupine.Illegal with an error
// wrapping ErrViolation that shows the longest linearizable prefix, the
// operations that could not follow it, and why the committed order is not a
// linearization; or porcupine.Unknown on timeout, with an error wrapping
// ErrInconclusive that says why the committed order is not one.
func CheckLinearizableWith(records []Record, committed []OpID, opts LinearizableOptions) (porcupine.CheckResult, error) {
	ops, err := linearizableOps(records, committed)
	if err != nil {
		return porcupine.Illegal, err
	}
	why := "no committed order given"
	if committed != nil {
		if why = checkWitness(records, committed, opts.Submitted); why == "" {
			return porcupine.Ok, nil
		}
	}
	model := Model()
	res := porcupine.CheckOperationsTimeout(model, ops, opts.Timeout)
	switch res {
	case porcupine.Ok:
		return res, nil
	case porcupine.Unknown:
		return res, fmt.Errorf("%w: porcupine timed out after %v, and the committed order is not a linearization: %s; by partition:%s",
			ErrInconclusive, opts.Timeout, why, checkParts(model, ops, records, opts.Timeout))
	}
	// Search again, keeping the partial linearizations for the report. It
	// finds the same violation (the search is deterministic in its input).
	res, info := porcupine.CheckOperationsVerbose(model, ops, opts.Timeout)
	if res != porcupine.Illegal {
		return porcupine.Illegal, fmt.Errorf("%w: not linearizable (the report's second search ended %v); the committed order fails because %s", ErrViolation, res, why)
	}
	msg := explainIllegal(model, info, model.Partition(ops), records)
	if committed != nil {
		msg += "\n  the committed order fails because " + why
	}
	if path, err := visualize(model, info, opts.VisualizePath); err != nil {
		msg += fmt.Sprintf("\n  (visualization not written: %v)", err)
	} else if path != "" {
		msg += "\n  visualization: " + path
	}
	return res, fmt.Errorf("%w: not linearizable: %s", ErrViolation, msg)
}

// linearizableOps turns records into porcupine operations; Metadata is the
// record index.
func linearizableOps(records []Record, committed []OpID) ([]porcupine.Operation, error) {
	var inCommitted map[OpID]bool
	if committed != nil {
		inCommitted = make(map[OpID]bool, len(committed))
		for _, id := range committed {
			inCommitted[id] = true
		}
	}
	var end int64
	for i := range records {
		end = max(end, records[i].Invoke)
		for _, v := range records[i].Views {
			end = max(end, v.At)
		}
	}
	if end == math.MaxInt64 {
		return nil, fmt.Errorf("history: a time is math.MaxInt64, so pending writes cannot be placed after it")
	}
	end++
	var ops []porcupine.Operation
	for i := range records {
		rec := &records[i]
		if !rec.Strong && rec.ID.IsZero() && rec.Op.ReadOnly() {
			continue // a weak read: CheckWeakViews checks it
		}
		if f := rec.final(); f >= 0 {
			if rec.Views[f].At < rec.Invoke {
				return nil, fmt.Errorf("history: %s: final view at %d before the invocation", rec.describe(i), rec.Views[f].At)
			}
			ops = append(ops, porcupine.Operation{
				ClientId: rec.Client,
				Input:    ModelInput{Op: rec.Op},
				Call:     rec.Invoke,
				Output:   rec.Views[f].Result,
				Return:   rec.Views[f].At,
				Metadata: i,
			})
			continue
		}
		if rec.Op.ReadOnly() || (inCommitted != nil && !rec.ID.IsZero() && !inCommitted[rec.ID]) {
			continue
		}
		ops = append(ops, porcupine.Operation{
			ClientId: rec.Client,
			Input:    ModelInput{Op: rec.Op, UnknownOutput: true},
			Call:     rec.Invoke,
			Return:   end,
			Metadata: i,
		})
	}
	return ops, nil
}

// partitionByKey splits a history into independent sub-histories: two
// operations are in the same one if they touch a common key or queue, or a
// key under a scanned prefix. Operations in different sub-histories commute
// and see disjoint parts of the state, so the history is linearizable if
// and only if each sub-history is.
func partitionByKey(ops []porcupine.Operation) [][]porcupine.Operation {
	uf := newUnionFind()
	var keys, prefixes []string
	seen := map[string]bool{}
	note := func(node string, list *[]string, name string) {
		if !seen[node] {
			seen[node] = true
			*list = append(*list, name)
		}
	}
	nodes := make([][]string, len(ops))
	for i, o := range ops {
		op := o.Input.(ModelInput).Op
		switch op.Kind {
		case state.OpNoop:
			nodes[i] = []string{"noop"}
		case state.OpEnqueue, state.OpDequeue:
			nodes[i] = []string{"q\x00" + op.Key}
		case state.OpScan:
			nodes[i] = []string{"p\x00" + op.Key}
			note(nodes[i][0], &prefixes, op.Key)
		case state.OpTxn:
			if op.Txn == nil {
				nodes[i] = []string{"invalid"}
				break
			}
			for _, g := range op.Txn.Guards {
				nodes[i] = append(nodes[i], "k\x00"+g.Key)
			}
			for _, w := range slices.Concat(op.Txn.Then, op.Txn.Else) {
				nodes[i] = append(nodes[i], "k\x00"+w.Key)
			}
			if len(nodes[i]) == 0 {
				nodes[i] = []string{"noop"}
			}
			for _, n := range nodes[i] {
				note(n, &keys, strings.TrimPrefix(n, "k\x00"))
			}
		default:
			nodes[i] = []string{"k\x00" + op.Key}
			note(nodes[i][0], &keys, op.Key)
		}
		for _, n := range nodes[i][1:] {
			uf.union(nodes[i][0], n)
		}
	}
	// A scan reads every key under its prefix, and two scans with nested
	// prefixes read common keys.
	for i, p := range prefixes {
		for _, k := range keys {
			if strings.HasPrefix(k, p) {
				uf.union("p\x00"+p, "k\x00"+k)
			}
		}
		for _, q := range prefixes[i+1:] {
			if strings.HasPrefix(q, p) || strings.HasPrefix(p, q) {
				uf.union("p\x00"+p, "p\x00"+q)
			}
		}
	}
	index := map[string]int{}
	var parts [][]porcupine.Operation
	for i, o := range ops {
		root := uf.find(nodes[i][0])
		j, ok := index[root]
		if !ok {
			j = len(parts)
			index[root] = j
			parts = append(parts, nil)
		}
		parts[j] = append(parts[j], o)
	}
	return parts
}

type unionFind map[string]string

func newUnionFind() unionFind { return unionFind{} }

func (u unionFind) find(x string) string {
	for {
		p, ok := u[x]
		if !ok || p == x {
			return x
		}
		if gp, ok := u[p]; ok {
			u[x] = gp // path halving
		}
		x = p
	}
}

func (u unionFind) union(a, b string) {
	ra, rb := u.find(a), u.find(b)
	if ra != rb {
		u[ra] = rb
	}
}

// maxCandidates bounds how many operations the report tries after the
// longest linearizable prefix.
const maxCandidates = 8

// explainIllegal describes, for the first sub-history that is not
// linearizable, its longest linearizable prefix and why none of the
// operations that must come next fits after it. parts are the sub-histories
// as Model().Partition made them, in the same order as info's.
func explainIllegal(model porcupine.Model, info porcupine.LinearizationInfo, parts [][]porcupine.Operation, records []Record) string {
	partials := info.PartialLinearizationsOperations()
	for p, all := range parts {
		if p >= len(partials) {
			break
		}
		// Porcupine gives a set of maximal prefixes; show the longest, the
		// lowest record indices first among equals, so reports are stable.
		var longest []porcupine.Operation
		if len(partials[p]) > 0 {
			longest = slices.MaxFunc(partials[p], func(a, b []porcupine.Operation) int {
				return cmp.Or(cmp.Compare(len(a), len(b)), -slices.CompareFunc(a, b, func(x, y porcupine.Operation) int {
					return cmp.Compare(x.Metadata.(int), y.Metadata.(int))
				}))
			})
		}
		if len(longest) == len(all) {
			continue // this sub-history is linearizable
		}
		return explainPartition(model, all, longest, records)
	}
	return "porcupine found no linearization (and no partial one to show)"
}

func explainPartition(model porcupine.Model, all, prefix []porcupine.Operation, records []Record) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d operations on the same keys linearize at most", len(prefix), len(all))
	s := model.Init()
	done := map[int]bool{}
	for _, o := range prefix {
		_, s = model.Step(s, o.Input, o.Output)
		done[o.Metadata.(int)] = true
	}
	const tail = 5
	if len(prefix) > 0 {
		b.WriteString("; the longest linearizable prefix ends with:")
		for _, o := range prefix[max(0, len(prefix)-tail):] {
			fmt.Fprintf(&b, "\n    %s -> %s, returned at %d", records[o.Metadata.(int)].describe(o.Metadata.(int)), describeOutput(o), o.Return)
		}
	}
	var rest []porcupine.Operation
	for _, o := range all {
		if !done[o.Metadata.(int)] {
			rest = append(rest, o)
		}
	}
	if len(rest) == 0 {
		return b.String()
	}
	// Whatever comes next must be invoked before the earliest remaining
	// return, or that operation's real-time order would be broken.
	first := slices.MinFunc(rest, func(a, b porcupine.Operation) int { return cmp.Compare(a.Return, b.Return) })
	fmt.Fprintf(&b, "\n  record %d returned at %d, so one of these must come next, and none fits:", first.Metadata.(int), first.Return)
	shown := 0
	for _, o := range rest {
		if o.Call > first.Return {
			continue
		}
		if shown == maxCandidates {
			b.WriteString("\n    ...")
			break
		}
		shown++
		i := o.Metadata.(int)
		got, _ := s.(*state.State).Clone().Apply(o.Input.(ModelInput).Op)
		fmt.Fprintf(&b, "\n    %s: saw %s, the state machine gives %s", records[i].describe(i), describeOutput(o), describeResult(got))
	}
	return b.String()
}

func describeOutput(o porcupine.Operation) string {
	if o.Input.(ModelInput).UnknownOutput {
		return "(unknown)"
	}
	return describeResult(o.Output.(state.Result))
}

// visualize writes porcupine's visualization if path or the VisualizeEnv
// variable asks for it, and returns the file written.
func visualize(model porcupine.Model, info porcupine.LinearizationInfo, path string) (string, error) {
	if path == "" {
		path = os.Getenv(VisualizeEnv)
	}
	if path == "" {
		return "", nil
	}
	if !strings.HasSuffix(path, ".html") {
		if err := os.MkdirAll(path, 0o755); err != nil {
			return "", err
		}
		f, err := os.CreateTemp(path, "linearizability-*.html")
		if err != nil {
			return "", err
		}
		path = f.Name()
		if err := f.Close(); err != nil {
			return "", err
		}
	} else if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", err
	}
	if err := porcupine.VisualizePath(model, info, path); err != nil {
		return "", err
	}
	return path, nil
}

// checkParts checks each partition of ops (a key, or keys linked by
// transactions and scans) on its own, each bounded by a share of timeout, and
// describes the outcome of each: after a timeout of the whole check, it names
// the partitions that are hard or not linearizable, with the longest
// linearizable prefix of each one that is not.
func checkParts(model porcupine.Model, ops []porcupine.Operation, records []Record, timeout time.Duration) string {
	parts := model.Partition(ops)
	budget := max(timeout/time.Duration(max(len(parts), 1)), time.Second)
	var b strings.Builder
	for _, part := range parts {
		keys := map[string]bool{}
		pending := 0
		for _, o := range part {
			keys[o.Input.(ModelInput).Op.Key] = true
			if o.Input.(ModelInput).UnknownOutput {
				pending++
			}
		}
		res := porcupine.CheckOperationsTimeout(model, part, budget)
		fmt.Fprintf(&b, "\n    keys %q: %d ops (%d pending): %v", slices.Sorted(maps.Keys(keys)), len(part), pending, res)
		if res == porcupine.Illegal {
			if vres, info := porcupine.CheckOperationsVerbose(model, part, budget); vres == porcupine.Illegal {
				b.WriteString(": " + strings.ReplaceAll(explainIllegal(model, info, [][]porcupine.Operation{part}, records), "\n", "\n      "))
			}
		}
	}
	return b.String()
}
