package client

import (
	"context"
	"hash/fnv"
	"sync"
	"time"

	"github.com/correctables/correctables/correctable"
)

// TraceRecord is one register operation in a trace: a get and the value one
// of its views returned, or a put and the value it wrote, with the times it
// started and finished. Traces measure consistency as clients observe it,
// with the Γ metric of Golab et al. (Continuous Partial Quorums §2;
// `correctables check gamma`).
type TraceRecord struct {
	Key string
	// Write: a put of Value; otherwise a get that returned Value.
	Write bool
	// Value is ValueHash of the value written or read; 0 for a get that
	// found no key.
	Value uint64
	// Strong: the view was at correctable.Strong (for a put: its last
	// view).
	Strong bool
	// Start and Finish are Unix times in nanoseconds: when the invocation
	// started and when the view arrived. They come from the monotonic
	// clock, anchored at the wall time the process first recorded.
	Start, Finish int64
}

// ValueHash is the 64-bit FNV-1a hash of a value that traces record, never
// 0 (0 stands for "no value").
func ValueHash(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	if v := h.Sum64(); v != 0 {
		return v
	}
	return 1
}

// TraceRecorder records the gets and puts a Client invokes (WithTraceRecorder)
// into a buffer allocated up front, cheaply enough to stay on in benchmarks:
// one short lock and a copy per view. Every view of a get is a record (a
// preliminary and a final view are two reads with the same start); a put is
// one record, at its last view. Operations that failed, and results with an
// error, are not recorded. Once the buffer is full, further records are
// dropped and counted. A TraceRecorder may be shared by several Clients
// and is safe for concurrent use.
type TraceRecorder struct {
	mu      sync.Mutex
	recs    []TraceRecord
	dropped uint64
}

// MaxTraceRecords bounds a TraceRecorder's capacity (about 3 GB of records).
const MaxTraceRecords = 1 << 26

// NewTraceRecorder returns a recorder that holds up to capacity records
// (at least 1, at most MaxTraceRecords).
func NewTraceRecorder(capacity int) *TraceRecorder {
	capacity = min(max(capacity, 1), MaxTraceRecords)
	return &TraceRecorder{recs: make([]TraceRecord, 0, capacity)}
}

// Len is the number of records held.
func (r *TraceRecorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.recs)
}

// Dropped is the number of records dropped because the buffer was full.
func (r *TraceRecorder) Dropped() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dropped
}

// Records returns a copy of the records from index from on, in the order
// they were recorded (by finish time, roughly). Records(n) after Len() was
// n returns what came since.
func (r *TraceRecorder) Records(from int) []TraceRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	if from < 0 || from >= len(r.recs) {
		return nil
	}
	out := make([]TraceRecord, len(r.recs)-from)
	copy(out, r.recs[from:])
	return out
}

func (r *TraceRecorder) add(rec TraceRecord) {
	r.mu.Lock()
	if len(r.recs) < cap(r.recs) {
		r.recs = append(r.recs, rec)
	} else {
		r.dropped++
	}
	r.mu.Unlock()
}

// traceEpoch anchors trace times: wall time once, the monotonic clock from
// then on, so that a trace's intervals do not jump with the wall clock.
var traceEpoch = time.Now()

// traceNow is the trace time of now.
func traceNow() int64 { return traceEpoch.UnixNano() + int64(time.Since(traceEpoch)) }

// traceStartKey carries the trace start of an invocation that began before
// it reached submit (after an artificial delay).
type traceStartKey struct{}

// traceStart is the invocation's start in trace time: now, or when it
// began if ctx says.
func traceStart(ctx context.Context) int64 {
	if t, ok := ctx.Value(traceStartKey{}).(int64); ok {
		return t
	}
	return traceNow()
}

// traceEmitter wraps emit so that the views of op are recorded in r. last
// is the strongest requested level: a put is recorded at its view.
func (r *TraceRecorder) traceEmitter(op Op, start int64, last correctable.Level, emit correctable.Emitter[Result]) correctable.Emitter[Result] {
	if op.kind != KindGet && op.kind != KindPut {
		return emit
	}
	// The record goes in before the view reaches the caller: once an
	// operation's last view is delivered, its record is there to read.
	return func(v correctable.View[Result]) error {
		if v.Value.Err != nil {
			return emit(v)
		}
		rec := TraceRecord{Key: op.key, Strong: v.Level == correctable.Strong, Start: start, Finish: traceNow()}
		switch {
		case op.kind == KindPut && v.Level == last:
			rec.Write, rec.Value = true, ValueHash(op.value)
		case op.kind == KindGet && v.Value.Found:
			rec.Value = ValueHash(v.Value.Value)
		case op.kind == KindGet:
		default:
			return emit(v)
		}
		r.add(rec)
		return emit(v)
	}
}
