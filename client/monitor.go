package client

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/correctables/correctables/correctable"
)

// Defaults of a Monitor.
const (
	// DefaultMonitorWindow is how far back round-trip samples count
	// (Pileus §4.5: "a sliding window of the last few minutes").
	DefaultMonitorWindow = 2 * time.Minute
	// maxMonitorSamples bounds the samples kept per replica and kind.
	maxMonitorSamples = 512
)

// Monitor is a client's view of each replica (Pileus SOSP'13 §4.5): a
// sliding window of round-trip times and the latest stamp seen from it.
// The Client feeds it from its periodic Status probes (the active probes:
// every replica, used lately or not, every probe interval) and from every
// SLA Get. It is safe for concurrent use.
type Monitor struct {
	mu     sync.Mutex
	window time.Duration
	now    func() time.Time
	nodes  map[uint64]*nodeStats
	leader uint64
}

// nodeStats is what the monitor knows of one replica.
type nodeStats struct {
	// weak holds round trips of probes and weak reads; strong those of
	// strong reads, which cost a quorum round more at the leader.
	weak, strong []rttSample
	// strongExtra is what a strong read cost more than a probe when strong
	// reads were last measured: the median strong round trip in the window
	// less the median weak one, at least 0. It outlives the samples, so
	// that once no strong read is left in the window a strong read is
	// estimated from the probes plus this cost.
	strongExtra time.Duration
	// stamp merges every stamp seen from the replica: each of its fields
	// only grows at a replica, so the merge is a stamp it has passed.
	stamp Stamp
}

type rttSample struct {
	at  time.Time
	rtt time.Duration
}

func newMonitor() *Monitor {
	return &Monitor{window: DefaultMonitorWindow, now: time.Now, nodes: map[uint64]*nodeStats{}}
}

func (m *Monitor) node(id uint64) *nodeStats {
	n := m.nodes[id]
	if n == nil {
		n = &nodeStats{stamp: Stamp{Replica: id, VV: map[uint64]uint64{}}}
		m.nodes[id] = n
	}
	return n
}

// SetWindow sets how far back round-trip samples count (default
// DefaultMonitorWindow); a shorter window adapts faster to changed
// latencies (Pileus §5.4), a longer one is steadier.
func (m *Monitor) SetWindow(d time.Duration) error {
	if d <= 0 || d > 24*time.Hour {
		return fmt.Errorf("%w: monitor window %v not in (0, 24h]", ErrInvalidArgument, d)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.window = d
	return nil
}

// Replicas lists the replicas the monitor knows, with the median round
// trip of each.
func (m *Monitor) Replicas() map[uint64]time.Duration {
	m.mu.Lock()
	ids := make([]uint64, 0, len(m.nodes))
	for id := range m.nodes {
		ids = append(ids, id)
	}
	m.mu.Unlock()
	out := make(map[uint64]time.Duration, len(ids))
	for _, id := range ids {
		out[id] = m.rtt(id)
	}
	return out
}

// observeRTT records a round trip to replica id.
func (m *Monitor) observeRTT(id uint64, rtt time.Duration, strong bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.node(id)
	p := &n.weak
	if strong {
		p = &n.strong
	}
	now := m.now()
	*p = append(*p, rttSample{at: now, rtt: rtt})
	// Drop what left the window, and the oldest past the bound.
	cut := 0
	for cut < len(*p) && (now.Sub((*p)[cut].at) > m.window || len(*p)-cut > maxMonitorSamples) {
		cut++
	}
	*p = slices.Delete(*p, 0, cut)
	if strong {
		ms, mw := medianIn(n.strong, now, m.window), medianIn(n.weak, now, m.window)
		if ms > 0 && mw > 0 {
			n.strongExtra = max(0, ms-mw)
		}
	}
}

// medianIn is the median round trip of the samples in the window at now
// (0 if none).
func medianIn(samples []rttSample, now time.Time, window time.Duration) time.Duration {
	var s []time.Duration
	for _, x := range samples {
		if now.Sub(x.at) <= window {
			s = append(s, x.rtt)
		}
	}
	if len(s) == 0 {
		return 0
	}
	slices.Sort(s)
	return s[len(s)/2]
}

// observeStamp merges a stamp seen from replica id.
func (m *Monitor) observeStamp(id uint64, st Stamp) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.node(id)
	vv(n.stamp.VV).merge(st.VV)
	n.stamp.CommittedCount = max(n.stamp.CommittedCount, st.CommittedCount)
	n.stamp.AppliedIndex = max(n.stamp.AppliedIndex, st.AppliedIndex)
	n.stamp.StableTime = max(n.stamp.StableTime, st.StableTime)
}

// observeLeader records the raft leader a replica reported.
func (m *Monitor) observeLeader(id uint64) {
	if id == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.leader = id
}

// Leader returns the leader the replicas last reported (0 if none yet):
// the replica strong reads are sent to, Pileus's primary.
func (m *Monitor) Leader() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.leader
}

// PNodeLat estimates the probability that replica id answers a read
// within latency: the fraction of the window's round trips below it
// (Pileus §4.5). Strong reads are estimated from the strong reads in the
// window when there are any; otherwise from the probes' and weak reads'
// round trips, which the active probes keep in the window (§4.5: "for
// nodes that have not been accessed recently, the monitor may send active
// probes"), each plus what a strong read cost more than a probe when strong
// reads were last measured (nothing if never). Without samples in the
// window it is 0.
func (m *Monitor) PNodeLat(id uint64, latency time.Duration, strong bool) float64 {
	p, _, _ := m.pNodeLat(id, latency, strong)
	return p
}

// pNodeLat is PNodeLat, with the number of samples it came from and
// whether they were strong reads'.
func (m *Monitor) pNodeLat(id uint64, latency time.Duration, strong bool) (p float64, samples int, fromStrong bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.nodes[id]
	if n == nil {
		return 0, 0, false
	}
	now := m.now()
	if strong {
		// Strong samples that left the window do not count: a fraction of
		// none would say the replica never answers in time.
		if p, in := m.fractionBelow(n.strong, now, latency, 0); in > 0 {
			return p, in, true
		}
		p, in := m.fractionBelow(n.weak, now, latency, n.strongExtra)
		return p, in, false
	}
	p, in := m.fractionBelow(n.weak, now, latency, 0)
	return p, in, false
}

// fractionBelow returns the fraction of the samples in the window at now
// that, plus extra, are below latency, and how many samples are in the
// window.
func (m *Monitor) fractionBelow(s []rttSample, now time.Time, latency, extra time.Duration) (float64, int) {
	var in, below int
	for _, x := range s {
		if now.Sub(x.at) > m.window {
			continue
		}
		in++
		if x.rtt+extra < latency {
			below++
		}
	}
	if in == 0 {
		return 0, 0
	}
	return float64(below) / float64(in), in
}

// PNodeCons estimates, conservatively, the probability that replica id is
// up to date enough to give c to op in session s: 1 if the latest stamp
// seen from it already satisfies c for s (its stamp only grows), else 0;
// for strong, 1 for the leader only (Pileus §4.4-§4.5).
func (m *Monitor) PNodeCons(s *Session, id uint64, c Consistency, op Op) float64 {
	m.mu.Lock()
	n := m.nodes[id]
	leader := m.leader
	var st Stamp
	if n != nil {
		st = n.stamp.Clone()
	}
	m.mu.Unlock()
	if c.Level == correctable.Strong {
		if id == leader {
			return 1
		}
		return 0
	}
	if c.Level == correctable.Eventual {
		return 1
	}
	if n == nil {
		return 0
	}
	if s.Check(op, st, false).Satisfies(c) {
		return 1
	}
	return 0
}

// PNodeSla is PNodeCons times PNodeLat: the estimated probability that
// replica id meets sub for op in session s (Pileus §4.5).
func (m *Monitor) PNodeSla(s *Session, id uint64, sub SubSLA, op Op) float64 {
	strong := sub.Consistency.Level == correctable.Strong
	return m.PNodeCons(s, id, sub.Consistency, op) * m.PNodeLat(id, sub.Latency, strong)
}

// closeness orders replicas for ties: the median round trip, a replica
// never measured last.
func (m *Monitor) closeness(id uint64) time.Duration {
	if d := m.rtt(id); d > 0 {
		return d
	}
	return time.Duration(math.MaxInt64)
}

// rtt is the median weak round trip to replica id in the window (0 if
// none): "closest" in target selection.
func (m *Monitor) rtt(id uint64) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.nodes[id]
	if n == nil {
		return 0
	}
	return medianIn(n.weak, m.now(), m.window)
}
