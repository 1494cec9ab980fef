package history

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/correctables/correctables/internal/state"
)

// OpID is the replica-assigned identifier of an operation that entered the
// replicated lists: the origin replica and that replica's event counter.
// Seq starts at 1, so that a version vector entry of 0 means "nothing from
// this origin". The zero OpID means "no identifier" (read-only operations
// served without entering the lists).
type OpID struct{ Origin, Seq uint64 }

// IsZero reports whether id is the zero OpID.
func (id OpID) IsZero() bool { return id == OpID{} }

func (id OpID) String() string { return fmt.Sprintf("(%d,%d)", id.Origin, id.Seq) }

// Submitted is an operation as it entered the replicated lists at its origin
// (weak and strong operations, and the periodic strong no-ops).
type Submitted struct {
	ID OpID
	// TS is the hybrid logical clock timestamp the origin assigned. The
	// tentative order is by (TS, ID.Origin, ID.Seq).
	TS uint64
	Op state.Op
}

// compareTentative orders operations as the tentative list does (Creek
// Algorithm 1, line 3: (timestamp, id)).
func compareTentative(a, b *Submitted) int {
	return cmp.Or(cmp.Compare(a.TS, b.TS), cmp.Compare(a.ID.Origin, b.ID.Origin), cmp.Compare(a.ID.Seq, b.ID.Seq))
}

// Stamp says which state of which replica a view was computed on.
type Stamp struct {
	Replica uint64
	// CommittedCount is the length of the replica's committed list when the
	// view was computed.
	CommittedCount int
	// VV is the replica's version vector: it had received operation (o, s)
	// for every s <= VV[o] (gossip is FIFO per origin), weak and strong
	// alike. It therefore covers the committed prefix, and the tentative list
	// is exactly the covered operations outside that prefix.
	VV map[uint64]uint64
}

// covers reports whether the stamp's version vector includes id.
func (s Stamp) covers(id OpID) bool { return id.Seq <= s.VV[id.Origin] }

func (s Stamp) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "replica %d, committed %d, vv {", s.Replica, s.CommittedCount)
	for i, o := range slices.Sorted(maps.Keys(s.VV)) {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%d:%d", o, s.VV[o])
	}
	b.WriteString("}")
	return b.String()
}

// View is one result a client received for an operation.
type View struct {
	At     int64 // virtual (or wall) nanoseconds, from the Recorder's clock
	Result state.Result
	Final  bool
	Stamp  Stamp
}

// Record is everything one client saw of one operation.
type Record struct {
	Client int
	Op     state.Op
	Strong bool
	// ID is zero for read-only operations that never enter the lists (weak
	// reads, strong reads served through ReadIndex).
	ID     OpID
	Invoke int64
	Views  []View // in arrival order
	// Acked: the client got at least one view. For a write this means its
	// origin persisted it before replying, so it must never be lost.
	Acked bool
}

// final returns the index of the record's first final view, or -1.
func (r *Record) final() int {
	return slices.IndexFunc(r.Views, func(v View) bool { return v.Final })
}

func (r *Record) describe(i int) string {
	id := "no id"
	if !r.ID.IsZero() {
		id = "id " + r.ID.String()
	}
	return fmt.Sprintf("record %d (client %d, %s %s, %s, invoked at %d)", i, r.Client, strongness(r.Strong), describeOp(r.Op), id, r.Invoke)
}

func strongness(strong bool) string {
	if strong {
		return "strong"
	}
	return "weak"
}

// Recorder collects the records of a run. It is safe for concurrent use.
type Recorder struct {
	now func() int64

	mu      sync.Mutex
	records []Record
}

// NewRecorder returns a Recorder that timestamps invocations and views with
// now (the simulation's virtual clock, or wall-clock nanoseconds in
// multi-process tests). One clock for everything keeps intervals comparable.
func NewRecorder(now func() int64) *Recorder {
	return &Recorder{now: now}
}

// Handle is one in-flight operation of a Recorder.
type Handle struct {
	r *Recorder
	i int
}

// Invoke records that client invoked op. Call it before the operation is
// sent, so that the recorded interval contains the operation's effect. The
// Recorder keeps op as given: the caller must not modify it afterwards.
func (r *Recorder) Invoke(client int, op state.Op, strong bool) *Handle {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, Record{Client: client, Op: op, Strong: strong, Invoke: r.now()})
	return &Handle{r: r, i: len(r.records) - 1}
}

// SetID records the identifier the origin replica assigned to the operation.
func (h *Handle) SetID(id OpID) {
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	h.r.records[h.i].ID = id
}

// View records that the client received v. v.At is set from the Recorder's
// clock; v.Stamp.VV is copied, so the caller may reuse its map.
func (h *Handle) View(v View) {
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	v.At = h.r.now()
	v.Stamp.VV = maps.Clone(v.Stamp.VV)
	rec := &h.r.records[h.i]
	rec.Views = append(rec.Views, v)
	rec.Acked = true
}

// Index is the position of the handle's record in Records.
func (h *Handle) Index() int { return h.i }

// Len returns the number of records so far.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.records)
}

// Records returns a copy of the records, in invocation order.
func (r *Recorder) Records() []Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Record, len(r.records))
	for i, rec := range r.records {
		rec.Views = slices.Clone(rec.Views)
		for j := range rec.Views {
			rec.Views[j].Stamp.VV = maps.Clone(rec.Views[j].Stamp.VV)
		}
		out[i] = rec
	}
	return out
}
