// Package cpqbench reproduces the experiments of Continuous Partial Quorums
// (McKenzie, Fan, Golab, SCDM'15) §3 on this repository's store: an open-loop
// YCSB-style load (80% reads, 20% updates, 128-byte values) at a target
// throughput from one client per replica, each operation at the level a
// client.CPQ policy draws, every operation recorded in a trace, and the
// proportion of positive Γ scores (internal/gamma) and the p95 latency of
// reads and writes per row. A row can also run a controller
// (internal/cpqctl) that tunes p to hold an SLA, with a timeline of p.
// `correctables bench cpq` drives it.
package cpqbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/correctable"
	"github.com/correctables/correctables/internal/cpqctl"
	"github.com/correctables/correctables/internal/gamma"
	"github.com/correctables/correctables/internal/loadgen"
)

// Hosts are the client hosts of a run: one client per replica, each dialing
// its own replica only, as the paper's YCSB processes talk to their local
// Cassandra server, and beside it one that knows every replica, its own
// first, for quorum reads. All record into one trace.
type Hosts struct {
	Clients []*client.Client
	Quorum  []*client.Client
	Trace   *client.TraceRecorder
}

// Dial connects one client to each endpoint (endpoints[i] is host i's
// replica), recording into a trace of the given capacity.
func Dial(ctx context.Context, endpoints []string, traceCapacity int) (*Hosts, error) {
	views := make([][]string, len(endpoints))
	for i := range views {
		views[i] = endpoints
	}
	return DialViews(ctx, views, traceCapacity)
}

// DialViews is Dial where host i reaches replica j at views[i][j] (on an
// emulated WAN, through the link from i's region to j's): host i's client
// dials views[i][i], its quorum client all of views[i], its own first, with
// quorumOpts.
func DialViews(ctx context.Context, views [][]string, traceCapacity int, quorumOpts ...client.Option) (*Hosts, error) {
	h := &Hosts{Trace: client.NewTraceRecorder(traceCapacity)}
	for i, view := range views {
		if len(view) != len(views) {
			h.Close()
			return nil, fmt.Errorf("cpqbench: host %d sees %d endpoints, want %d", i, len(view), len(views))
		}
		ep := view[i]
		c, err := client.Dial(ctx, []string{ep}, client.WithTraceRecorder(h.Trace))
		if err != nil {
			h.Close()
			return nil, fmt.Errorf("cpqbench: dial %s: %w", ep, err)
		}
		h.Clients = append(h.Clients, c)
		all := append([]string{ep}, view[:i]...)
		all = append(all, view[i+1:]...)
		q, err := client.Dial(ctx, all, append([]client.Option{client.WithTraceRecorder(h.Trace)}, quorumOpts...)...)
		if err != nil {
			h.Close()
			return nil, fmt.Errorf("cpqbench: dial %v: %w", all, err)
		}
		h.Quorum = append(h.Quorum, q)
	}
	if len(views) == 0 {
		return nil, errors.New("cpqbench: no endpoints")
	}
	return h, nil
}

// quorumWaits sums the quorum clients' Stats.QuorumWaits.
func (h *Hosts) quorumWaits() uint64 {
	var n uint64
	for _, c := range h.Quorum {
		n += c.Stats().QuorumWaits
	}
	return n
}

// Close closes the clients.
func (h *Hosts) Close() {
	for _, c := range h.Clients {
		c.Close()
	}
	for _, c := range h.Quorum {
		c.Close()
	}
}

// Load writes every key once, strongly, spreading the keys over the hosts,
// so that every read finds a value the trace knows.
func (h *Hosts) Load(ctx context.Context, names []string, valueSize int, seed uint64) error {
	gen := loadgen.NewGenerator(loadgen.Workload{Name: "load"}, loadgen.NewUniform(len(names)), names, valueSize, seed, -1)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	values := make([][]byte, len(names))
	for i := range values {
		values[i] = gen.Next().Value
	}
	for w := range 16 {
		c := h.Clients[w%len(h.Clients)]
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(names) || ctx.Err() != nil {
					return
				}
				if _, err := c.InvokeStrong(ctx, client.Put(names[i], values[i])).Final(ctx); err != nil {
					errs <- fmt.Errorf("cpqbench: loading %s: %w", names[i], err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return errors.Join(<-errs, ctx.Err())
}

// Row is one row of an experiment.
type Row struct {
	// Label names the row in reports ("weak-weak", "p=0.3", "AD 5ms").
	Label string
	// Policy: the strong level's probabilities and the read delay.
	ReadP, WriteP float64
	ReadDelay     time.Duration
	// QuorumReads: a read drawn at the stronger level is a quorum read
	// (client.InvokeQuorum, by the host's client that knows every
	// replica) rather than a strong one; ReadDelay is ignored (also with
	// QuorumWrites). With a controller, updates keep WriteP while reads
	// follow p, unless QuorumWrites is set too.
	QuorumReads bool
	// QuorumWrites: an update drawn at the stronger level is a quorum
	// write (client.InvokeQuorum, by the host's client that knows every
	// replica: acknowledged once a majority has received it) rather than a
	// strong one. With QuorumReads, the levels are the paper's ONE and
	// QUORUM.
	QuorumWrites bool
	// AllWrites: an update drawn at the stronger level is a write at All
	// (client.InvokeAll, by the host's client that knows every replica:
	// acknowledged once every replica has received it). Reads drawn at the
	// stronger level stay strong (or quorum, with QuorumReads): the pair
	// ONE-ONE and ONE-ALL has ReadP 0. Not with QuorumWrites or a
	// Controller.
	AllWrites bool
	// Controller, if set, tunes p (both reads and writes) every Period,
	// starting from its Config.P.
	Controller *cpqctl.Config
	// Events run at the given times into the measured window (for example
	// an emulated latency change).
	Events []Event
}

// Event is something done during a row.
type Event struct {
	At   time.Duration
	Name string
	Do   func() error
}

// Config is what every row of a run shares.
type Config struct {
	Keys  loadgen.KeyGen
	Names []string
	// ReadFraction of operations are reads (0.8 in the paper).
	ReadFraction float64
	ValueSize    int
	// Rate is the target throughput over all hosts (ops/s), open loop.
	Rate float64
	// Warmup runs before the measured window of Duration.
	Warmup, Duration time.Duration
	// Period is the control and progress period (default 1s).
	Period time.Duration
	// MaxOutstanding bounds the operations in flight per host; an
	// operation due when the bound is reached is skipped and counted as
	// missed (default 4096).
	MaxOutstanding int
	// Threshold is the Γ noise threshold.
	Threshold time.Duration
	// Settle is how long after its write the running Γ estimate counts a
	// value that no read has made stale (default 1s; see
	// gamma.OnlineConfig).
	Settle    time.Duration
	Seed      uint64
	OpTimeout time.Duration
	Progress  io.Writer
}

func (c *Config) validate() error {
	var errs []error
	if c.Keys == nil || len(c.Names) != c.Keys.N() {
		errs = append(errs, errors.New("keys and their names do not match"))
	}
	if !(c.ReadFraction >= 0 && c.ReadFraction <= 1) {
		errs = append(errs, fmt.Errorf("read fraction %v: want 0 to 1", c.ReadFraction))
	}
	if !(c.Rate > 0 && c.Rate <= 1e6) {
		errs = append(errs, fmt.Errorf("rate %v: want more than 0, at most 1,000,000 ops/s", c.Rate))
	}
	if c.Duration <= 0 || c.Warmup < 0 {
		errs = append(errs, fmt.Errorf("duration %v, warmup %v: want a positive duration and a warmup of 0 or more", c.Duration, c.Warmup))
	}
	if c.Period == 0 {
		c.Period = time.Second
	}
	if c.Period < 10*time.Millisecond {
		errs = append(errs, fmt.Errorf("period %v: want at least 10ms", c.Period))
	}
	if c.Settle < 0 || c.Settle > time.Minute {
		errs = append(errs, fmt.Errorf("settle %v: want 0 (1s) to 1m", c.Settle))
	}
	if c.MaxOutstanding == 0 {
		c.MaxOutstanding = 4096
	}
	if c.OpTimeout == 0 {
		c.OpTimeout = 10 * time.Second
	}
	return errors.Join(errs...)
}

// Point is one period of a row's timeline.
type Point struct {
	T time.Duration // since the measured window began (negative in warmup)
	P float64       // the policy's p during the next period
	// ReadP95 over the controller's window (or this period without a
	// controller); Stale the smoothed stale fraction the controller used,
	// else the period's online estimate (NaN without values).
	ReadP95 time.Duration
	Stale   float64
	OpsPerS float64
	Verdict string
	Event   string
}

// Result is what a row measured.
type Result struct {
	Row Row
	// Ops, Reads, Writes and Errors count operations that finished in the
	// measured window; Missed those skipped because too many were in
	// flight.
	Ops, Reads, Writes, Errors, Missed uint64
	Elapsed                            time.Duration
	// ReadLat and WriteLat are latencies in µs (views' Elapsed: artificial
	// delays included).
	ReadLat, WriteLat *hdrhistogram.Histogram
	// Strong counts the operations that ran at the strong level, Quorum
	// those at the quorum level, All the updates at All; QuorumWaits the
	// quorum reads in the window that waited for a replica to catch up
	// (client.Stats.QuorumWaits).
	Strong, Quorum, All, QuorumWaits uint64
	// Values written in the window, and those with a positive Γ score;
	// Gamma the largest score among them; Unmatched reads of values the
	// trace never saw written.
	Values, Positive int
	Gamma            time.Duration
	Unmatched        int
	// Window is the measured window in trace time, [From, To).
	From, To int64
	// Timeline has one point per period (with a controller, or always).
	Timeline []Point
	// FirstError is an example error.
	FirstError string
}

// OpsPerSec is the measured throughput.
func (r *Result) OpsPerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Ops) / r.Elapsed.Seconds()
}

// Proportion is the proportion of positive Γ scores.
func (r *Result) Proportion() float64 {
	if r.Values == 0 {
		return 0
	}
	return float64(r.Positive) / float64(r.Values)
}

// P95 returns a histogram's p95 as a duration.
func P95(h *hdrhistogram.Histogram) time.Duration {
	if h.TotalCount() == 0 {
		return 0
	}
	return time.Duration(h.ValueAtQuantile(95)) * time.Microsecond
}

// periodStats gathers one period's read latencies.
type periodStats struct {
	mu    sync.Mutex
	reads *hdrhistogram.Histogram
	ops   uint64
	// bound is the controller's latency bound (0 without one); levels
	// counts the period's reads at each level and those over the bound.
	bound  time.Duration
	levels levelCounts
}

// levelCounts counts reads at the weaker and the stronger level (strong or
// quorum) and those of them slower than the controller's latency bound:
// the controller tells a stall (weak reads slow too) from reads at the
// stronger level that are too many.
type levelCounts struct {
	weak, weakSlow, strong, strongSlow int
}

func (l *levelCounts) add(o levelCounts) {
	l.weak += o.weak
	l.weakSlow += o.weakSlow
	l.strong += o.strong
	l.strongSlow += o.strongSlow
}

func (p *periodStats) swap() (*hdrhistogram.Histogram, uint64, levelCounts) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h, n, l := p.reads, p.ops, p.levels
	p.reads, p.ops, p.levels = loadgen.NewHistogram(), 0, levelCounts{}
	return h, n, l
}

// Run runs one row on the hosts and scores its window from the hosts'
// trace. The trace keeps growing across rows: a row's window counts the
// values written in it, scored against everything recorded.
func Run(ctx context.Context, h *Hosts, cfg Config, row Row) (*Result, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("cpqbench: %w", err)
	}
	if row.AllWrites && (row.QuorumWrites || row.Controller != nil) {
		return nil, fmt.Errorf("cpqbench: row %q: AllWrites with QuorumWrites or a controller", row.Label)
	}
	var ctl *cpqctl.Controller
	p0 := row.ReadP
	if row.Controller != nil {
		ccfg := *row.Controller
		if ccfg.Hold == 0 {
			// No hold after a rise: gamma.Online counts a stale value
			// when the read that makes it stale arrives, so the period
			// after a rise counts the stale reads of the new p (the
			// values that settle fresh in it, written Settle earlier,
			// count towards the total only).
			ccfg.Hold = -1
		}
		var err error
		if ctl, err = cpqctl.New(ccfg); err != nil {
			return nil, err
		}
		// Reads follow p; so do updates, except over weak-quorum reads
		// with weak or strong writes, where they keep the row's WriteP.
		row.ReadP = ctl.P()
		if !row.QuorumReads || row.QuorumWrites {
			row.WriteP = ctl.P()
		}
		p0 = ctl.P()
	}
	policies := make([]*client.CPQ, len(h.Clients))
	for i := range policies {
		var err error
		policies[i], err = client.NewCPQ(client.CPQConfig{ReadP: row.ReadP, WriteP: row.WriteP, ReadDelay: row.ReadDelay, Seed: cfg.Seed + uint64(i), QuorumReads: row.QuorumReads, QuorumWrites: row.QuorumWrites, AllWrites: row.AllWrites})
		if err != nil {
			return nil, err
		}
	}
	res := &Result{Row: row, ReadLat: loadgen.NewHistogram(), WriteLat: loadgen.NewHistogram()}
	var bound time.Duration // the controller's latency bound, for its level counts
	if row.Controller != nil {
		bound = row.Controller.SLA.Latency
	}
	var (
		measuring   atomic.Bool
		mu          sync.Mutex // guards res's counters and histograms
		period      = &periodStats{reads: loadgen.NewHistogram(), bound: bound}
		outstanding = make([]atomic.Int64, len(h.Clients))
		wg          sync.WaitGroup
	)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	finish := func(read bool, v correctable.View[client.Result], err error) {
		if rctx.Err() != nil {
			return // cut short by the end of the row
		}
		us := max(v.Elapsed.Microseconds(), 1)
		if err == nil && read {
			slow := period.bound > 0 && v.Elapsed > period.bound
			period.mu.Lock()
			period.reads.RecordValue(us)
			period.ops++
			if v.Level == correctable.Strong || v.Level == client.Quorum {
				period.levels.strong++
				if slow {
					period.levels.strongSlow++
				}
			} else {
				period.levels.weak++
				if slow {
					period.levels.weakSlow++
				}
			}
			period.mu.Unlock()
		} else if err == nil {
			period.mu.Lock()
			period.ops++
			period.mu.Unlock()
		}
		if !measuring.Load() {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			res.Errors++
			if res.FirstError == "" {
				res.FirstError = err.Error()
			}
			return
		}
		res.Ops++
		switch v.Level {
		case correctable.Strong:
			res.Strong++
		case client.Quorum:
			res.Quorum++
		case client.All:
			res.All++
		}
		if read {
			res.Reads++
			res.ReadLat.RecordValue(us)
		} else {
			res.Writes++
			res.WriteLat.RecordValue(us)
		}
	}
	// One open-loop scheduler per host: operations are due every
	// hosts/Rate, whatever the latency of those in flight.
	interval := time.Duration(float64(time.Second) * float64(len(h.Clients)) / cfg.Rate)
	start := time.Now()
	workload := loadgen.Workload{Name: "cpq", ReadFraction: cfg.ReadFraction}
	for i, c := range h.Clients {
		gen := loadgen.NewGenerator(workload, cfg.Keys, cfg.Names, cfg.ValueSize, cfg.Seed^0x5eed, i)
		pol := policies[i]
		var q *client.Client
		if i < len(h.Quorum) {
			q = h.Quorum[i]
		}
		wg.Go(func() {
			due := start.Add(time.Duration(i) * interval / time.Duration(len(h.Clients)))
			t := time.NewTimer(0)
			defer t.Stop()
			for {
				if d := time.Until(due); d > 0 {
					t.Reset(d)
					select {
					case <-rctx.Done():
						return
					case <-t.C:
					}
				} else if rctx.Err() != nil {
					return
				}
				due = due.Add(interval)
				op := gen.Next()
				if outstanding[i].Load() >= int64(cfg.MaxOutstanding) {
					if measuring.Load() {
						mu.Lock()
						res.Missed++
						mu.Unlock()
					}
					continue
				}
				cop := client.Get(op.Key)
				if !op.Read {
					cop = client.Put(op.Key, op.Value)
				}
				octx, ocancel := context.WithTimeout(rctx, cfg.OpTimeout)
				var cor *correctable.Correctable[client.Result]
				if (pol.QuorumReads() || pol.QuorumWrites() || pol.AllWrites()) && q != nil {
					// Drawn here, in order; weak and strong operations
					// go to the host's replica, quorum ones to a
					// majority.
					switch strong, _ := pol.Choose(cop); {
					case strong && (op.Read && pol.QuorumReads() || !op.Read && pol.QuorumWrites()):
						cor = q.InvokeQuorum(octx, cop)
					case strong && !op.Read && pol.AllWrites():
						cor = q.InvokeAll(octx, cop)
					case strong:
						cor = c.InvokeStrong(octx, cop)
					default:
						cor = c.InvokeWeak(octx, cop)
					}
				} else {
					cor = c.InvokeCPQ(octx, cop, pol) // draws the level here, in order
				}
				outstanding[i].Add(1)
				wg.Go(func() {
					defer outstanding[i].Add(-1)
					defer ocancel()
					v, err := cor.Final(octx)
					if err == nil && v.Value.Err != nil {
						err = v.Value.Err
					}
					finish(op.Read, v, err)
				})
			}
		})
	}

	// The clock: warmup, window, periods, events, the controller.
	online := gamma.NewOnline(gamma.OnlineConfig{Threshold: cfg.Threshold, Settle: cfg.Settle})
	// The recent past of the trace, so that reads of values written before
	// the row find their write.
	fed := h.Trace.Len()
	for _, r := range h.Trace.Records(max(0, fed-50_000)) {
		online.Add(opOf(r))
	}
	window := 3
	if row.Controller != nil && row.Controller.Window > 0 {
		window = row.Controller.Window
	}
	var recent []*hdrhistogram.Histogram
	var recentLevels []levelCounts
	tick := time.NewTicker(cfg.Period)
	defer tick.Stop()
	warmEnd := start.Add(cfg.Warmup)
	var winStart time.Time
	var waits0 uint64
	if cfg.Warmup == 0 {
		winStart = start
		waits0 = h.quorumWaits()
		measuring.Store(true)
		res.From = time.Now().UnixNano()
	}
	events := append([]Event(nil), row.Events...)
	var err error
loop:
	for {
		select {
		case <-ctx.Done():
			err = context.Cause(ctx)
			break loop
		case now := <-tick.C:
			if !measuring.Load() && !now.Before(warmEnd) {
				winStart = now
				waits0 = h.quorumWaits()
				res.From = now.UnixNano()
				measuring.Store(true)
			}
			var t time.Duration
			if measuring.Load() {
				t = now.Sub(winStart)
			} else {
				t = now.Sub(warmEnd)
			}
			recs := h.Trace.Records(fed)
			fed += len(recs)
			for _, r := range recs {
				online.Add(opOf(r))
			}
			counts := online.Collect(now.UnixNano())
			hist, nops, levels := period.swap()
			recent = append(recent, hist)
			recentLevels = append(recentLevels, levels)
			if len(recent) > window {
				recent = recent[1:]
				recentLevels = recentLevels[1:]
			}
			span := 1 // without a controller, this period's (as Point says)
			if ctl != nil {
				span = min(len(recent), ctl.Span())
			}
			merged := loadgen.NewHistogram()
			var lv levelCounts
			for i := len(recent) - span; i < len(recent); i++ {
				merged.Merge(recent[i])
				lv.add(recentLevels[i])
			}
			pt := Point{T: t, P: p0, ReadP95: P95(merged), Stale: counts.Proportion(), OpsPerS: float64(nops) / cfg.Period.Seconds()}
			if counts.Values == 0 {
				pt.Stale = -1
			}
			if ctl != nil {
				d := ctl.Step(cpqctl.Observation{P95: P95(merged), Values: counts.Values, Positive: counts.Positive,
					WeakReads: lv.weak, WeakSlow: lv.weakSlow, StrongReads: lv.strong, StrongSlow: lv.strongSlow})
				wp := d.P
				if row.QuorumReads && !row.QuorumWrites {
					wp = row.WriteP
				}
				for _, pol := range policies {
					_ = pol.SetP(d.P, wp) // both in [0, 1]
				}
				pt.P, pt.Verdict = d.P, d.Verdict.String()
				if !math.IsNaN(d.Stale) {
					pt.Stale = d.Stale
				}
				if d.Held {
					pt.Verdict = "held"
				}
				p0 = d.P
			}
			for len(events) > 0 && measuring.Load() && t >= events[0].At {
				e := events[0]
				events = events[1:]
				if eerr := e.Do(); eerr != nil {
					err = fmt.Errorf("cpqbench: event %s: %w", e.Name, eerr)
					break loop
				}
				pt.Event = e.Name
			}
			res.Timeline = append(res.Timeline, pt)
			if cfg.Progress != nil {
				fmt.Fprintf(cfg.Progress, "%-12s %6.1fs  %5.0f ops/s  p %.2f  read p95 %-9v stale %s %s %s\n", row.Label,
					t.Seconds(), pt.OpsPerS, pt.P, pt.ReadP95.Round(10*time.Microsecond), fmtStale(pt.Stale), pt.Verdict, pt.Event)
			}
			if measuring.Load() && now.Sub(winStart) >= cfg.Duration {
				break loop
			}
		}
	}
	measuring.Store(false)
	res.QuorumWaits = h.quorumWaits() - waits0
	winEnd := time.Now()
	res.To = winEnd.UnixNano()
	res.Elapsed = winEnd.Sub(winStart)
	cancel()
	wg.Wait()
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	// Let reads of the window's last values arrive (they are what makes a
	// value stale) before scoring: the next row's warmup does that; score
	// what the trace holds now.
	if err := score(h, res, cfg.Threshold); err != nil {
		return nil, err
	}
	return res, nil
}

func fmtStale(s float64) string {
	if s < 0 || s != s {
		return "-     "
	}
	return fmt.Sprintf("%.4f", s)
}

func opOf(r client.TraceRecord) gamma.Op {
	return gamma.Op{Key: r.Key, Write: r.Write, Value: r.Value, Start: r.Start, Finish: r.Finish, Strong: r.Strong}
}

// score scores the trace and counts the values written in the row's window.
func score(h *Hosts, res *Result, threshold time.Duration) error {
	if d := h.Trace.Dropped(); d > 0 {
		return fmt.Errorf("cpqbench: the trace dropped %d records (raise its capacity)", d)
	}
	rep, err := gamma.Score(gamma.FromRecords(h.Trace.Records(0)), gamma.Options{Threshold: threshold, Scores: true})
	if err != nil {
		return fmt.Errorf("cpqbench: scoring the trace: %w", err)
	}
	res.Unmatched = rep.Unmatched
	for _, s := range rep.Scores {
		if s.Value == gamma.Absent || s.WriteStart < res.From || s.WriteStart >= res.To {
			continue
		}
		res.Values++
		if s.Score > threshold {
			res.Positive++
		}
		res.Gamma = max(res.Gamma, s.Score)
	}
	return nil
}
