package gamma

import (
	"slices"
	"sync"
	"time"
)

// Online is a running estimate of the proportion of positive Γ scores over a
// stream of operations, for a controller or a progress line. A value is
// counted once, against the values of its key that Online still holds: as
// positive at the first Collect that finds its score over the threshold
// (a score only grows as operations are added, so a value found stale
// stays stale: a read that returned it after a newer value's write had
// finished makes it stale at once), otherwise Settle after its write
// started (the reads that make a value stale come soon after the write
// that overwrites it). Then it is kept for a while to be matched by later
// reads. Memory is bounded: a key keeps at most KeepPerKey scored values,
// and scored values are dropped after Horizon.
//
// Counting a stale value when its stale read arrives, rather than Settle
// after its write, makes a period's positive count that of the reads of
// that period: a change in staleness shows in the next Collect, where
// scoring every value at Settle showed it one to two periods later.
//
// Scores agree with Score on the operations Online holds when it scores a
// value; a stale read arriving after its value was scored is missed, and a
// read of a value already dropped counts as unmatched. Online is safe for
// concurrent use.
type Online struct {
	threshold, settle, horizon int64
	keep                       int

	mu      sync.Mutex
	keys    map[string]*onlineKey
	pending []pendingValue  // written values not yet scored, in arrival order
	read    map[string]bool // keys read since the last Collect
	total   OnlineCounts
}

type onlineKey struct {
	clusters map[uint64]*onlineCluster
}

type onlineCluster struct {
	cluster
	scored bool
}

type pendingValue struct {
	key string
	c   *onlineCluster
}

// OnlineCounts are counts of scored values.
type OnlineCounts struct {
	// Values scored and, of them, Positive over the threshold.
	Values, Positive int
	// Unmatched counts reads whose value Online never saw written (or had
	// dropped).
	Unmatched int
}

// Proportion is Positive/Values, 0 without values.
func (c OnlineCounts) Proportion() float64 {
	if c.Values == 0 {
		return 0
	}
	return float64(c.Positive) / float64(c.Values)
}

// OnlineConfig configures NewOnline. Zero fields get the defaults.
type OnlineConfig struct {
	// Threshold as in Options (default 0).
	Threshold time.Duration
	// Settle is how long after its write starts a value that is not
	// stale is counted (default 1s); a stale one is counted at once.
	Settle time.Duration
	// Horizon is how long a scored value stays to match later reads
	// (default 10s).
	Horizon time.Duration
	// KeepPerKey bounds the scored values a key keeps (default 4).
	KeepPerKey int
}

// NewOnline returns an empty estimator.
func NewOnline(cfg OnlineConfig) *Online {
	if cfg.Settle <= 0 {
		cfg.Settle = time.Second
	}
	if cfg.Horizon <= 0 {
		cfg.Horizon = 10 * time.Second
	}
	if cfg.KeepPerKey <= 0 {
		cfg.KeepPerKey = 4
	}
	return &Online{
		threshold: max(cfg.Threshold.Nanoseconds(), 0), settle: cfg.Settle.Nanoseconds(),
		horizon: cfg.Horizon.Nanoseconds(), keep: cfg.KeepPerKey,
		keys: map[string]*onlineKey{}, read: map[string]bool{},
	}
}

// Add records a completed operation. Writes of Absent and operations that
// finish before they start are ignored.
func (o *Online) Add(op Op) {
	if op.Finish < op.Start || (op.Write && op.Value == Absent) {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	k := o.keys[op.Key]
	if k == nil {
		k = &onlineKey{clusters: map[uint64]*onlineCluster{}}
		o.keys[op.Key] = k
	}
	c := k.clusters[op.Value]
	if c == nil {
		if !op.Write && op.Value != Absent && len(k.clusters) >= 4*o.keep+64 {
			// Reads of values never written: do not let them grow the key.
			o.total.Unmatched++
			return
		}
		c = &onlineCluster{cluster: *newCluster(op.Value)}
		if op.Value == Absent {
			c.written = true
		}
		k.clusters[op.Value] = c
	}
	if op.Write && c.written {
		return // a value written twice: keep the first
	}
	c.add(op, 0)
	if op.Write {
		o.pending = append(o.pending, pendingValue{op.Key, c})
	} else {
		o.read[op.Key] = true
	}
}

// Collect scores the values whose write started at least Settle before now
// (nanoseconds, the operations' epoch) and, among the keys read since the
// last Collect, the values already over the threshold; drops what is past
// the horizon, and returns the counts of the values it scored. Call it
// periodically.
func (o *Online) Collect(now int64) OnlineCounts {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out OnlineCounts
	cut := now - o.settle
	touched := o.read
	o.read = map[string]bool{}
	rest := o.pending[:0]
	for _, p := range o.pending {
		if p.c.wStart > cut {
			rest = append(rest, p)
			continue
		}
		touched[p.key] = true
	}
	clear(o.pending[len(rest):])
	o.pending = rest
	for key := range touched {
		k := o.keys[key]
		cs := make([]*cluster, 0, len(k.clusters))
		for _, c := range k.clusters {
			cs = append(cs, &c.cluster)
		}
		scoreKey(cs)
		for _, c := range k.clusters {
			if c.scored || !c.written || c.value == Absent {
				continue
			}
			stale := score(c.score2).Nanoseconds() > o.threshold
			if c.wStart > cut && !stale {
				continue // not settled, not (yet) stale
			}
			c.scored = true
			out.Values++
			if stale {
				out.Positive++
			}
		}
		o.prune(k, now)
	}
	out.Unmatched = o.total.Unmatched
	o.total.Unmatched = 0
	o.total.Values += out.Values
	o.total.Positive += out.Positive
	return out
}

// prune drops a key's scored values past the horizon, keeping the newest
// KeepPerKey scored ones, and reads of values never written past the
// horizon.
func (o *Online) prune(k *onlineKey, now int64) {
	var scored []*onlineCluster
	for v, c := range k.clusters {
		switch {
		case !c.written && c.maxStart < now-o.horizon:
			o.total.Unmatched += c.reads
			delete(k.clusters, v)
		case c.scored:
			scored = append(scored, c)
		}
	}
	if len(scored) <= o.keep {
		return
	}
	slices.SortFunc(scored, func(a, b *onlineCluster) int {
		if older(&a.cluster, &b.cluster) {
			return 1 // newest first
		}
		return -1
	})
	for _, c := range scored[o.keep:] {
		if c.maxStart < now-o.horizon || len(scored) > 4*o.keep {
			delete(k.clusters, c.value)
		}
	}
}

// Total returns the counts of every value scored so far.
func (o *Online) Total() OnlineCounts {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.total
}

// Held is the number of values Online holds (for tests of its bounds).
func (o *Online) Held() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, k := range o.keys {
		n += len(k.clusters)
	}
	return n
}
