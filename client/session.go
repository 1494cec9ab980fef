package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/correctables/correctables/correctable"
)

// Consistency is one of the six guarantees of Pileus (SOSP'13 §3.2): a
// standard level of package correctable and, for bounded staleness, the
// bound. See docs/consistency.md for what each promises.
type Consistency struct {
	// Level is one of correctable.Eventual, MonotonicReads, ReadMyWrites,
	// Causal, BoundedStaleness and Strong.
	Level correctable.Level
	// Bound is the staleness bound t of bounded(t); zero for other levels.
	Bound time.Duration
}

// Bounded returns bounded staleness with bound t.
func Bounded(t time.Duration) Consistency {
	return Consistency{Level: correctable.BoundedStaleness, Bound: t}
}

// Guarantee returns the Consistency of a standard level without a bound.
func Guarantee(l correctable.Level) Consistency { return Consistency{Level: l} }

// String returns the guarantee's name, with the bound for bounded(t).
func (c Consistency) String() string {
	if c.Level == correctable.BoundedStaleness {
		return fmt.Sprintf("bounded(%v)", c.Bound)
	}
	return c.Level.String()
}

// Validate reports whether c is one of the six guarantees.
func (c Consistency) Validate() error {
	switch c.Level {
	case correctable.Eventual, correctable.MonotonicReads, correctable.ReadMyWrites,
		correctable.Causal, correctable.Strong:
		if c.Bound != 0 {
			return fmt.Errorf("%w: %v takes no bound", ErrInvalidArgument, c.Level)
		}
		return nil
	case correctable.BoundedStaleness:
		if c.Bound < 0 {
			return fmt.Errorf("%w: bounded staleness with a negative bound %v", ErrInvalidArgument, c.Bound)
		}
		return nil
	}
	return fmt.Errorf("%w: %v is not one of the six guarantees", ErrInvalidArgument, c.Level)
}

// ParseConsistency parses a guarantee's name: eventual, monotonic-reads (or
// monotonic), read-my-writes, causal, strong, or bounded(T) where T is a Go
// duration ("300s") or a number of seconds ("300", as in Pileus Figure 5).
func ParseConsistency(s string) (Consistency, error) {
	s = strings.TrimSpace(strings.ToLower(s))
	switch s {
	case "eventual":
		return Guarantee(correctable.Eventual), nil
	case "monotonic", "monotonic-reads":
		return Guarantee(correctable.MonotonicReads), nil
	case "read-my-writes":
		return Guarantee(correctable.ReadMyWrites), nil
	case "causal":
		return Guarantee(correctable.Causal), nil
	case "strong":
		return Guarantee(correctable.Strong), nil
	}
	if rest, ok := strings.CutPrefix(s, "bounded("); ok {
		if arg, ok := strings.CutSuffix(rest, ")"); ok {
			if d, err := time.ParseDuration(arg); err == nil && d >= 0 {
				return Bounded(d), nil
			}
			if n, err := strconv.ParseFloat(arg, 64); err == nil && n >= 0 && n < 1e9 {
				return Bounded(time.Duration(n * float64(time.Second))), nil
			}
			return Consistency{}, fmt.Errorf("%w: consistency %q: bound %q is neither a duration nor a number of seconds", ErrInvalidArgument, s, arg)
		}
	}
	return Consistency{}, fmt.Errorf("%w: unknown consistency %q (want eventual, monotonic-reads, read-my-writes, causal, bounded(T) or strong)", ErrInvalidArgument, s)
}

// Guarantees is what one view satisfies for its session: the result of
// Session.Check. Eventual consistency always holds.
type Guarantees struct {
	Strong         bool
	Causal         bool
	ReadMyWrites   bool
	MonotonicReads bool
	// Bounded reports that Staleness bounds the view's staleness: the view
	// includes every write that completed more than Staleness before it
	// was checked. bounded(t) holds for every t >= Staleness.
	Bounded   bool
	Staleness time.Duration
}

// Satisfies reports whether the view satisfies c.
func (g Guarantees) Satisfies(c Consistency) bool {
	switch c.Level {
	case correctable.Eventual:
		return true
	case correctable.MonotonicReads:
		return g.MonotonicReads
	case correctable.ReadMyWrites:
		return g.ReadMyWrites
	case correctable.Causal:
		return g.Causal
	case correctable.BoundedStaleness:
		return g.Bounded && g.Staleness <= c.Bound
	case correctable.Strong:
		return g.Strong
	}
	return false
}

// String lists the guarantees that hold.
func (g Guarantees) String() string {
	var out []string
	if g.Strong {
		out = append(out, "strong")
	}
	if g.Bounded {
		out = append(out, fmt.Sprintf("bounded(%v)", g.Staleness.Round(time.Millisecond)))
	}
	if g.Causal {
		out = append(out, "causal")
	}
	if g.ReadMyWrites {
		out = append(out, "read-my-writes")
	}
	if g.MonotonicReads {
		out = append(out, "monotonic-reads")
	}
	return strings.Join(append(out, "eventual"), ",")
}

// vv is a version vector: origin replica to the highest sequence number.
type vv map[uint64]uint64

func (v vv) covers(o vv) bool {
	for origin, seq := range o {
		if v[origin] < seq {
			return false
		}
	}
	return true
}

func (v vv) merge(o map[uint64]uint64) {
	for origin, seq := range o {
		if seq > v[origin] {
			v[origin] = seq
		}
	}
}

// content is what a set of earlier views held, as a requirement on a later
// view: tentative is the union of preliminary views' version vectors,
// committed the longest committed prefix of a final view.
type content struct {
	Tentative vv     `json:"tentative,omitempty"`
	Committed uint64 `json:"committed,omitempty"`
}

// writes is what a set of the session's writes requires of a later view.
type writes struct {
	// IDs are the writes' op ids, as a version vector.
	IDs vv `json:"ids,omitempty"`
	// Committed is the largest committed count seen with their final
	// views; Pending counts writes whose final view has not arrived.
	Committed uint64 `json:"committed,omitempty"`
	Pending   int    `json:"pending,omitempty"`
}

// Session records the stamps of the reads and writes of one sequence of
// operations (Pileus §3.1), never their values, and decides which
// guarantees a new view satisfies (Check). Invoke through a session with
// Client.InvokeSession; it is safe for concurrent use, although the
// guarantees are defined for a sequence of operations. A session's memory
// grows with the number of keys it touches.
type Session struct {
	mu sync.Mutex
	// now is the clock bounded staleness is measured against.
	now func() time.Time
	// reads and writes per key; allReads and allWrites over every key.
	reads     map[string]*content
	writes    map[string]*writes
	allReads  content
	allWrites writes
	// pending maps a write in flight to the keys it writes, until its
	// final view.
	pending map[OpID][]string
}

// NewSession returns an empty session.
func NewSession() *Session {
	return &Session{
		now:       time.Now,
		reads:     map[string]*content{},
		writes:    map[string]*writes{},
		allReads:  content{Tentative: vv{}},
		allWrites: writes{IDs: vv{}},
		pending:   map[OpID][]string{},
	}
}

// keyOf returns the single key op reads, and false for operations that
// read many keys (scans, transactions), whose per-key guarantees are checked
// against every key of the session.
func keyOf(op Op) (string, bool) {
	switch op.kind {
	case KindScan, KindTxn, KindNoop:
		return "", false
	case KindEnqueue, KindDequeue:
		return queueKey(op.key), true
	}
	return op.key, true
}

// Check returns the guarantees a view of op with stamp st satisfies for the
// session, from the stamp alone (docs/consistency.md). stable says that the
// view was computed on the committed order (a final view, level Strong);
// otherwise it is a preliminary view on the tentative state. Check does not
// record the view: Observe does.
func (s *Session) Check(op Op, st Stamp, stable bool) Guarantees {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.checkLocked(op, st, stable, s.now())
}

func (s *Session) checkLocked(op Op, st Stamp, stable bool, now time.Time) Guarantees {
	var g Guarantees
	key, one := keyOf(op)
	reads, ws := &s.allReads, &s.allWrites
	if one {
		reads, ws = s.reads[key], s.writes[key]
	}
	g.ReadMyWrites = ws == nil || includesWrites(st, stable, ws)
	g.MonotonicReads = reads == nil || includesContent(st, stable, reads)
	g.Causal = includesContent(st, stable, &s.allReads) && includesWrites(st, stable, &s.allWrites)
	g.Strong = stable
	switch {
	case stable:
		// A final view is linearizable: it includes every write that
		// completed (committed) before it was invoked.
		g.Bounded = true
	case st.StableTime != 0:
		// Every operation with a timestamp below the stable time had
		// arrived, so the view includes every write that completed before
		// the stable time's physical part (clocks approximately in sync).
		stale := now.Sub(time.UnixMilli(int64(st.StableTime >> hlcLogicalBits)))
		g.Bounded, g.Staleness = true, max(stale, 0)
	}
	return g
}

// hlcLogicalBits is the width of the logical counter in a replica's hybrid
// logical clock timestamp; the rest is milliseconds since the Unix epoch.
const hlcLogicalBits = 16

func includesWrites(st Stamp, stable bool, w *writes) bool {
	if stable {
		return w.Pending == 0 && st.CommittedCount >= w.Committed
	}
	return vv(st.VV).covers(w.IDs)
}

func includesContent(st Stamp, stable bool, c *content) bool {
	if st.CommittedCount < c.Committed {
		return false
	}
	if stable {
		// The committed prefix may lack tentative operations an earlier
		// preliminary view held.
		return len(c.Tentative) == 0
	}
	return vv(st.VV).covers(c.Tentative)
}

// Observe records a view of op in the session: a read's content, a write's
// id and, with its final view, its place in the committed order. Views
// without a stamp are ignored.
func (s *Session) Observe(op Op, st Stamp, stable bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.observeLocked(op, st, stable)
}

func (s *Session) observeLocked(op Op, st Stamp, stable bool) {
	if !op.ReadOnly() && !st.Op.IsZero() {
		s.observeWrite(op, st, stable)
	}
	// Every view is also a read of what it was computed on.
	key, one := keyOf(op)
	cs := []*content{&s.allReads}
	if one {
		r := s.reads[key]
		if r == nil {
			r = &content{Tentative: vv{}}
			s.reads[key] = r
		}
		cs = append(cs, r)
	}
	for _, c := range cs {
		if stable {
			c.Committed = max(c.Committed, st.CommittedCount)
		} else {
			c.Tentative.merge(st.VV)
		}
	}
}

// observeWrite records a view of a write: its id at the first view, its
// place in the committed order at the final one.
func (s *Session) observeWrite(op Op, st Stamp, stable bool) {
	id := st.Op
	keys, inFlight := s.pending[id]
	if !inFlight {
		keys = writtenKeys(op)
	}
	if !stable && !inFlight {
		s.pending[id] = keys
	}
	for _, w := range s.writeRecords(keys) {
		w.IDs.merge(vv{id.Origin: id.Seq})
		switch {
		case stable && inFlight:
			w.Pending--
		case !stable && !inFlight:
			w.Pending++
		}
		if stable {
			w.Committed = max(w.Committed, st.CommittedCount)
		}
	}
	if stable {
		delete(s.pending, id)
	}
}

// writeRecords returns the records of keys and the session-wide record.
func (s *Session) writeRecords(keys []string) []*writes {
	out := []*writes{&s.allWrites}
	for _, k := range keys {
		w := s.writes[k]
		if w == nil {
			w = &writes{IDs: vv{}}
			s.writes[k] = w
		}
		out = append(out, w)
	}
	return out
}

// writtenKeys lists the keys an update may write; queues are a namespace
// of their own.
func writtenKeys(op Op) []string {
	switch op.kind {
	case KindTxn:
		var keys []string
		for _, ws := range [][]Write{op.txn.then, op.txn.els} {
			for _, w := range ws {
				keys = append(keys, w.Key)
			}
		}
		return keys
	case KindEnqueue, KindDequeue:
		return []string{queueKey(op.key)}
	case KindNoop:
		return nil
	}
	return []string{op.key}
}

func queueKey(q string) string { return "\x00queue:" + q }

// InvokeSession runs op like Invoke, within session s: every view carries,
// in its Stamp's Guarantees, what it satisfies for s (checked before the
// view is recorded in s), and s records each view.
func (c *Client) InvokeSession(ctx context.Context, s *Session, op Op, levels ...correctable.Level) *correctable.Correctable[Result] {
	return correctable.Invoke(ctx, sessionBinding{c: c, s: s}, op, levels...)
}

// sessionBinding is the Client's binding with every view checked against
// and recorded in a session.
type sessionBinding struct {
	c *Client
	s *Session
}

func (b sessionBinding) Levels() []correctable.Level { return levels }

func (b sessionBinding) Submit(ctx context.Context, op Op, ls []correctable.Level, emit correctable.Emitter[Result]) error {
	return b.c.submit(ctx, op, ls, false, b.s.wrap(op, emit))
}

// wrap returns an emitter that checks each view against s, puts the
// guarantees in its stamp and records it before passing it on.
func (s *Session) wrap(op Op, emit correctable.Emitter[Result]) correctable.Emitter[Result] {
	return func(v correctable.View[Result]) error {
		st, ok := v.Stamp.(Stamp)
		if !ok {
			return emit(v)
		}
		stable := v.Level == correctable.Strong
		s.mu.Lock()
		g := s.checkLocked(op, st, stable, s.now())
		s.observeLocked(op, st, stable)
		s.mu.Unlock()
		st.Guarantees = &g
		v.Stamp = st
		return emit(v)
	}
}

// GuaranteesOf returns what a view delivered through a session satisfies,
// and false for a view from outside a session.
func GuaranteesOf(v correctable.View[Result]) (Guarantees, bool) {
	st, ok := StampOf(v)
	if !ok || st.Guarantees == nil {
		return Guarantees{}, false
	}
	return *st.Guarantees, true
}

// sessionJSON is a session's saved form.
type sessionJSON struct {
	Reads     map[string]*content `json:"reads,omitempty"`
	Writes    map[string]*writes  `json:"writes,omitempty"`
	AllReads  content             `json:"all_reads"`
	AllWrites writes              `json:"all_writes"`
	Pending   map[string][]string `json:"pending,omitempty"` // "origin.seq" to keys
}

// MarshalJSON saves the session (stamps only), so that a session can span
// processes, for example several `correctables invoke --session FILE`.
func (s *Session) MarshalJSON() ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := sessionJSON{Reads: s.reads, Writes: s.writes, AllReads: s.allReads, AllWrites: s.allWrites, Pending: map[string][]string{}}
	for id, k := range s.pending {
		j.Pending[fmt.Sprintf("%d.%d", id.Origin, id.Seq)] = k
	}
	return json.Marshal(j)
}

// UnmarshalJSON restores a session saved by MarshalJSON. On error the
// session is unchanged.
func (s *Session) UnmarshalJSON(b []byte) error {
	var j sessionJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return fmt.Errorf("%w: session: %w", ErrInvalidArgument, err)
	}
	fresh := NewSession()
	for k, c := range j.Reads {
		if c == nil {
			return fmt.Errorf("%w: session: empty read record for %q", ErrInvalidArgument, k)
		}
		if c.Tentative == nil {
			c.Tentative = vv{}
		}
		fresh.reads[k] = c
	}
	for k, w := range j.Writes {
		if w == nil || w.Pending < 0 {
			return fmt.Errorf("%w: session: bad write record for %q", ErrInvalidArgument, k)
		}
		if w.IDs == nil {
			w.IDs = vv{}
		}
		fresh.writes[k] = w
	}
	fresh.allReads, fresh.allWrites = j.AllReads, j.AllWrites
	if fresh.allReads.Tentative == nil {
		fresh.allReads.Tentative = vv{}
	}
	if fresh.allWrites.IDs == nil {
		fresh.allWrites.IDs = vv{}
	}
	for id, k := range j.Pending {
		var o, q uint64
		if _, err := fmt.Sscanf(id, "%d.%d", &o, &q); err != nil {
			return fmt.Errorf("%w: session: bad pending write id %q", ErrInvalidArgument, id)
		}
		fresh.pending[OpID{Origin: o, Seq: q}] = k
	}
	if fresh.allWrites.Pending != len(fresh.pending) {
		return errors.Join(ErrInvalidArgument, fmt.Errorf("session: %d pending writes counted, %d listed", fresh.allWrites.Pending, len(fresh.pending)))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads, s.writes, s.allReads, s.allWrites, s.pending = fresh.reads, fresh.writes, fresh.allReads, fresh.allWrites, fresh.pending
	return nil
}
