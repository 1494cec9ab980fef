package gamma

import (
	"cmp"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"time"
)

// Absent is the value of a read that found no key: the key's initial value.
// Hash never returns it.
const Absent uint64 = 0

// Hash is the 64-bit value a trace records for a value: FNV-1a, with 0
// (Absent) mapped to 1.
func Hash(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	if v := h.Sum64(); v != Absent {
		return v
	}
	return 1
}

// Op is one operation of a trace.
type Op struct {
	Key string
	// Write: a write of Value; otherwise a read that returned Value.
	Write bool
	// Value identifies the value (Hash of its bytes); Absent for a read
	// that found no key. A write of Absent is not allowed.
	Value uint64
	// Start and Finish are in nanoseconds since any fixed epoch (all the
	// operations of a trace share it); Finish >= Start.
	Start, Finish int64
	// Strong records the level the operation ran at; scores ignore it.
	Strong bool
}

func (o Op) String() string {
	kind := "read"
	if o.Write {
		kind = "write"
	}
	return fmt.Sprintf("%s(%q, %016x) [%d, %d]", kind, o.Key, o.Value, o.Start, o.Finish)
}

// ErrBadTrace is returned for a trace Score cannot score: a value written
// twice to a key, a write of Absent, an operation that finishes before it
// starts.
var ErrBadTrace = errors.New("gamma: bad trace")

// Options tune Score.
type Options struct {
	// Threshold: scores at or under it do not count as positive (noise from
	// unsynchronized clocks; the CPQ paper drops scores under 2 ms). Zero
	// counts every positive score.
	Threshold time.Duration
	// Scores asks for every value's score in the Report, not only the
	// counts.
	Scores bool
}

// ValueScore is the score of one value.
type ValueScore struct {
	Key   string
	Value uint64
	// Score is the value's Γ score (0 if its operations are consistent
	// with linearizability as far as this value is concerned).
	Score time.Duration
	// Reads is the number of reads that returned the value.
	Reads int
	// WriteStart is when the value's write started (the trace's first
	// start for a key's initial value).
	WriteStart int64
}

// Report is the result of scoring a trace.
type Report struct {
	// Reads and Writes count the trace's operations.
	Reads, Writes int
	// Unmatched counts the reads of a value that no write of the trace
	// wrote (the write is missing from the trace); they are left out.
	Unmatched int
	// Values is the number of values scored: one per write, and a key's
	// initial value if a read found the key absent.
	Values int
	// Positive is the number of values whose score is over the threshold.
	Positive int
	// Gamma is Γ of the whole trace: the largest score (whatever the
	// threshold). Zero exactly when the trace is linearizable.
	Gamma time.Duration
	// Scores holds every value's score when Options.Scores is set, sorted
	// by key and then by the write's start.
	Scores []ValueScore
}

// Proportion is the fraction of values with a positive score (over the
// threshold); 0 without values.
func (r Report) Proportion() float64 {
	if r.Values == 0 {
		return 0
	}
	return float64(r.Positive) / float64(r.Values)
}

// cluster is a value's write and reads, summarized by what the scores need.
// Times are in nanoseconds relative to the trace's base.
type cluster struct {
	value         uint64
	written       bool // a write of the value is known (or it is the initial value)
	wStart        int64
	wFinish       int64
	minFinish     int64 // over the write and the reads
	maxStart      int64
	minReadFinish int64 // math.MaxInt64 without reads
	reads         int
	score2        int64 // twice the score, in nanoseconds
}

func newCluster(v uint64) *cluster {
	return &cluster{value: v, minFinish: math.MaxInt64, maxStart: math.MinInt64, minReadFinish: math.MaxInt64}
}

func (c *cluster) add(o Op, base int64) {
	s, f := o.Start-base, o.Finish-base
	c.minFinish = min(c.minFinish, f)
	c.maxStart = max(c.maxStart, s)
	if o.Write {
		c.written, c.wStart, c.wFinish = true, s, f
	} else {
		c.reads++
		c.minReadFinish = min(c.minReadFinish, f)
	}
}

// centre2 and length are the zone's 2c = f+s and signed length d = s-f
// (positive for a forward zone).
func (c *cluster) centre2() int64 { return c.minFinish + c.maxStart }
func (c *cluster) length() int64  { return c.maxStart - c.minFinish }

// older reports whether a's write started before b's (ties: finished
// before, then by value, so that the order is total). The initial value is
// older than any other.
func older(a, b *cluster) bool {
	if a.value == Absent || b.value == Absent {
		return a.value == Absent && b.value != Absent
	}
	return cmp.Or(cmp.Compare(a.wStart, b.wStart), cmp.Compare(a.wFinish, b.wFinish), cmp.Compare(a.value, b.value)) < 0
}

// scoreKey sets score2 of every cluster of one key. Clusters without a
// known write are skipped (their reads are unmatched).
func scoreKey(cs []*cluster) {
	live := make([]*cluster, 0, len(cs))
	dmax := int64(math.MinInt64)
	var init *cluster
	for _, c := range cs {
		if c.value == Absent {
			init = c
			continue
		}
		if !c.written {
			continue
		}
		c.score2 = 0
		if c.minReadFinish < c.wStart {
			// A read finished before its value's write started.
			c.score2 = 2 * (c.wStart - c.minReadFinish)
		}
		live = append(live, c)
		dmax = max(dmax, c.length())
	}
	if init != nil {
		// The initial value's virtual write precedes everything, however
		// far the operations widen: its zone is (-inf, s0], s0 the latest
		// start of a read of it. It conflicts with another value u, forward
		// or backward, while u's earliest finish f is before s0, and
		// widening closes the gap s0-f at rate Γ.
		init.score2 = 0
		for _, c := range live {
			init.score2 = max(init.score2, 2*(init.maxStart-c.minFinish))
		}
	}
	slices.SortFunc(live, func(a, b *cluster) int { return cmp.Compare(a.centre2(), b.centre2()) })
	for i, a := range live {
		ca, da := a.centre2(), a.length()
		for _, b := range live[i+1:] {
			// 2g = d1 + d2 - |2c1 - 2c2|; sorted by centre, so once the
			// gap exceeds da + dmax no later b can conflict with a.
			gap := b.centre2() - ca
			if gap >= da+dmax {
				break
			}
			g2 := da + b.length() - gap
			if g2 <= 0 {
				continue
			}
			if older(a, b) {
				a.score2 = max(a.score2, g2)
			} else {
				b.score2 = max(b.score2, g2)
			}
		}
	}
}

// score converts twice a score in nanoseconds to a duration, rounding up so
// that a positive score stays positive.
func score(score2 int64) time.Duration { return time.Duration((score2 + 1) / 2) }

// Score computes the per-value Γ scores of a trace (see the package
// documentation). It fails with ErrBadTrace, changing nothing, if a value
// is written twice to one key, a write is of Absent, or an operation
// finishes before it starts.
func Score(ops []Op, opts Options) (Report, error) {
	var rep Report
	if len(ops) == 0 {
		return rep, nil
	}
	base := int64(math.MaxInt64)
	for _, o := range ops {
		if o.Finish < o.Start {
			return Report{}, fmt.Errorf("%w: %v finishes before it starts", ErrBadTrace, o)
		}
		if o.Write && o.Value == Absent {
			return Report{}, fmt.Errorf("%w: %v writes the absent value", ErrBadTrace, o)
		}
		base = min(base, o.Start)
	}
	keys := map[string]map[uint64]*cluster{}
	for _, o := range ops {
		vs := keys[o.Key]
		if vs == nil {
			vs = map[uint64]*cluster{}
			keys[o.Key] = vs
		}
		c := vs[o.Value]
		if c == nil {
			c = newCluster(o.Value)
			vs[o.Value] = c
		}
		if o.Write {
			if c.written {
				return Report{}, fmt.Errorf("%w: value %016x written twice to %q", ErrBadTrace, o.Value, o.Key)
			}
			rep.Writes++
		} else {
			rep.Reads++
		}
		c.add(o, base)
	}
	names := make([]string, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	slices.Sort(names)
	thr := opts.Threshold.Nanoseconds()
	for _, k := range names {
		vs := keys[k]
		cs := make([]*cluster, 0, len(vs))
		for _, c := range vs {
			if c.value == Absent {
				c.written = true // by the virtual initial write
			}
			cs = append(cs, c)
		}
		scoreKey(cs)
		slices.SortFunc(cs, func(a, b *cluster) int {
			if older(a, b) {
				return -1
			}
			return 1
		})
		for _, c := range cs {
			if !c.written {
				rep.Unmatched += c.reads
				continue
			}
			s := score(c.score2)
			rep.Values++
			rep.Gamma = max(rep.Gamma, s)
			if s.Nanoseconds() > thr {
				rep.Positive++
			}
			if opts.Scores {
				rep.Scores = append(rep.Scores, ValueScore{Key: k, Value: c.value, Score: s, Reads: c.reads, WriteStart: c.wStart + base})
			}
		}
	}
	return rep, nil
}
