// Package loadgen is a closed-loop load generator for key-value stores: YCSB
// workloads and key distributions, a runner that keeps a fixed number of
// operations outstanding over a few client connections and measures
// throughput, the latency of each view, divergence between views and bytes
// on the client link, and helpers to read a server process's CPU time and
// peak memory from /proc. `correctables bench load` drives it against this
// repository's store (through the public client package) and etcd.
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/correctables/correctables/client"
)

// Config is one row of a run: a workload and a mode at one concurrency.
type Config struct {
	Workload Workload
	Keys     KeyGen
	// Dist names Keys' distribution in reports.
	Dist      string
	ValueSize int
	Mode      Mode
	// Concurrency is the number of operations outstanding at any time
	// (one per worker); Conns the number of client connections they are
	// spread over (at most Concurrency are used).
	Concurrency, Conns int
	// Warmup runs before the measured window of Duration.
	Warmup, Duration time.Duration
	// Seed seeds the workers' generators (worker i: Seed, i).
	Seed uint64
	// OpTimeout bounds one operation (default 10s); an operation that
	// takes longer counts as an error.
	OpTimeout time.Duration
	// Progress receives one line per second (nil: none), prefixed by
	// Label.
	Progress io.Writer
	Label    string
	// OnStart and OnEnd, if set, are called just before and just after
	// the measured window (to read the servers' CPU time).
	OnStart, OnEnd func()
	// ProgressExtra, if set, is called once a second and its result
	// appended to the progress line (an online Γ estimate).
	ProgressExtra func() string
}

func (c *Config) validate() error {
	var errs []error
	if c.Keys == nil {
		errs = append(errs, errors.New("no key distribution"))
	}
	if c.Concurrency < 1 {
		errs = append(errs, fmt.Errorf("concurrency %d: want at least 1", c.Concurrency))
	}
	if c.Conns < 1 {
		errs = append(errs, fmt.Errorf("conns %d: want at least 1", c.Conns))
	}
	if c.Duration <= 0 {
		errs = append(errs, fmt.Errorf("duration %v: want more than 0", c.Duration))
	}
	if c.Warmup < 0 {
		errs = append(errs, fmt.Errorf("warmup %v: want 0 or more", c.Warmup))
	}
	if c.ValueSize < 0 {
		errs = append(errs, fmt.Errorf("value size %d: want 0 or more", c.ValueSize))
	}
	switch c.Mode {
	case Strong, Weak, Invoke, CPQ:
	default:
		errs = append(errs, fmt.Errorf("unknown mode %q", c.Mode))
	}
	if c.OpTimeout == 0 {
		c.OpTimeout = 10 * time.Second
	}
	return errors.Join(errs...)
}

// Result is what one row measured (in the measured window only).
type Result struct {
	System      string
	Mode        Mode
	Workload    string
	Dist        string
	Concurrency int
	Conns       int
	// Elapsed is the measured window's length.
	Elapsed time.Duration
	// Ops and Errors count the operations that completed (successfully,
	// or with an error) in the measured window.
	Ops, Errors uint64
	// Prelim and Final hold the latencies (µs) of the preliminary and the
	// final views of the successful operations.
	Prelim, Final *hdrhistogram.Histogram
	// Both counts the operations that had both views; Diverged those of
	// them whose final view differed from the preliminary one.
	Both, Diverged uint64
	// Bytes moved on the client link in the window, if the connections
	// count them (BytesOK).
	Bytes   LinkBytes
	BytesOK bool
	// Routes counts the window's operations by the endpoint that served
	// them, if the connections know (Router).
	Routes map[string]uint64
	// SlowestSecond is the lowest throughput (ops/s) over the whole
	// seconds of the window (0 if the window is shorter than two
	// seconds): a stall shows here.
	SlowestSecond float64
	// ErrorKinds counts the errors by kind; ErrorExample has one message
	// per kind.
	ErrorKinds   map[string]uint64
	ErrorExample map[string]string
	// Server is filled in by the caller when it can read the servers'
	// processes.
	Server *ServerStats
	// Round is the row's round of Rounds, set by the caller when it runs
	// each row more than once (bench load --rounds); 0 or 1 of 0 or 1 is
	// a single round. Reports compare a row with its peer of the same
	// round, and show the round only with more than one.
	Round, Rounds int
}

// ServerStats is what the server processes used during the measured window.
type ServerStats struct {
	// CPU is user+system time summed over the processes.
	CPU time.Duration
	// PeakRSS is the largest peak resident set size (VmHWM) over the
	// processes, in bytes; 0 if unknown.
	PeakRSS uint64
	Procs   int
	// Note qualifies the figures (for example "whole process, includes
	// the load generator").
	Note string
}

// OpsPerSec is the throughput of the measured window.
func (r *Result) OpsPerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Ops) / r.Elapsed.Seconds()
}

// DivergenceRate is the fraction of operations with both views whose
// final view differed from the preliminary one; ok is false without such
// operations.
func (r *Result) DivergenceRate() (rate float64, ok bool) {
	if r.Both == 0 {
		return 0, false
	}
	return float64(r.Diverged) / float64(r.Both), true
}

// BytesPerOp is the client link's bytes (both ways) per completed operation.
func (r *Result) BytesPerOp() (float64, bool) {
	if !r.BytesOK || r.Ops == 0 {
		return 0, false
	}
	return float64(r.Bytes.Sent+r.Bytes.Received) / float64(r.Ops), true
}

// CPUPer1kOps is the servers' CPU seconds per 1,000 operations.
func (r *Result) CPUPer1kOps() (float64, bool) {
	if r.Server == nil || r.Ops == 0 {
		return 0, false
	}
	return r.Server.CPU.Seconds() * 1000 / float64(r.Ops), true
}

// LastView is the latency histogram of the mode's last view: the final
// view's, or the preliminary one's in weak mode.
func (r *Result) LastView() *hdrhistogram.Histogram {
	if r.Final.TotalCount() > 0 {
		return r.Final
	}
	return r.Prelim
}

// NewHistogram returns a histogram of latencies in microseconds, 1 µs to
// one minute, three significant digits.
func NewHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 3)
}

// ErrorKind classifies an operation's error for reports.
func ErrorKind(err error) string {
	switch {
	case errors.Is(err, client.ErrOverloaded):
		return "overloaded"
	case errors.Is(err, client.ErrUnavailable):
		return "unavailable"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, client.ErrServer):
		return "server"
	case errors.Is(err, client.ErrProtocol):
		return "protocol"
	}
	return "other"
}

// phases of a row.
const (
	phaseWarmup int32 = iota
	phaseMeasure
	phaseDone
)

// recorder gathers the measured window's samples from the workers.
type recorder struct {
	mu             sync.Mutex
	prelim, final  *hdrhistogram.Histogram
	both, diverged uint64
	kinds          map[string]uint64
	examples       map[string]string
}

func (r *recorder) sample(s Sample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s.HasPrelim {
		r.prelim.RecordValue(max(s.Prelim.Microseconds(), 1))
	}
	if s.HasFinal {
		r.final.RecordValue(max(s.Final.Microseconds(), 1))
	}
	if s.HasPrelim && s.HasFinal {
		r.both++
		if s.Diverged {
			r.diverged++
		}
	}
}

func (r *recorder) fail(err error) {
	k := ErrorKind(err)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.kinds[k]++
	if _, ok := r.examples[k]; !ok {
		msg := err.Error()
		if len(msg) > 300 {
			msg = msg[:300] + "..."
		}
		r.examples[k] = msg
	}
}

// Run runs one row against sys: it dials the connections, runs the warmup
// and the measured window with cfg.Concurrency workers in a closed loop
// (each starts its next operation when the last one ends), and returns what
// the window measured. It fails if no connection can be opened or ctx ends;
// operations that fail are counted, not fatal.
func Run(ctx context.Context, sys System, cfg Config) (*Result, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	nconns := min(cfg.Conns, cfg.Concurrency)
	conns := make([]Conn, 0, nconns)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range nconns {
		c, err := sys.Dial(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s: dial: %w", sys.Name(), err)
		}
		conns = append(conns, c)
	}
	names := KeyNames(cfg.Keys.N())
	rec := &recorder{prelim: NewHistogram(), final: NewHistogram(),
		kinds: map[string]uint64{}, examples: map[string]string{}}
	var (
		phase                 atomic.Int32
		total, totalErrs      atomic.Uint64 // every phase
		measured, measureErrs atomic.Uint64
	)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for i := range cfg.Concurrency {
		conn := conns[i%len(conns)]
		gen := NewGenerator(cfg.Workload, cfg.Keys, names, cfg.ValueSize, cfg.Seed, i)
		wg.Go(func() {
			for wctx.Err() == nil && phase.Load() != phaseDone {
				op := gen.Next()
				octx, ocancel := context.WithTimeout(wctx, cfg.OpTimeout)
				s, err := conn.Do(octx, op, cfg.Mode)
				ocancel()
				p := phase.Load()
				if p == phaseDone || wctx.Err() != nil {
					return // cut short by the end of the row: not counted
				}
				total.Add(1)
				if err != nil {
					totalErrs.Add(1)
					if p == phaseMeasure {
						measureErrs.Add(1)
						rec.fail(err)
					}
					// Do not spin on a failing store.
					select {
					case <-wctx.Done():
					case <-time.After(time.Millisecond):
					}
					continue
				}
				if p == phaseMeasure {
					measured.Add(1)
					rec.sample(s)
				}
			}
		})
	}

	routesNow := func() map[string]uint64 {
		sum := map[string]uint64{}
		for _, c := range conns {
			r, ok := c.(Router)
			if !ok {
				return nil
			}
			for ep, n := range r.Routes() {
				sum[ep] += n
			}
		}
		return sum
	}
	bytesNow := func() (LinkBytes, bool) {
		var sum LinkBytes
		for _, c := range conns {
			b, ok := c.Bytes()
			if !ok {
				return LinkBytes{}, false
			}
			sum.Sent += b.Sent
			sum.Received += b.Received
		}
		return sum, true
	}

	// The clock: warmup, window, progress lines.
	start := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var (
		lastOps   uint64
		lastTick  = start
		winStart  time.Time
		bytes0    LinkBytes
		bytesOK   bool
		routes0   map[string]uint64
		slowest   = -1.0
		lastMeas  uint64
		lastMTick time.Time
		warmupEnd = time.NewTimer(cfg.Warmup)
		winEnd    <-chan time.Time
		err       error
	)
	defer warmupEnd.Stop()
	beginWindow := func() {
		if cfg.OnStart != nil {
			cfg.OnStart()
		}
		bytes0, bytesOK = bytesNow()
		routes0 = routesNow()
		winStart = time.Now()
		lastMTick = time.Time{}
		phase.Store(phaseMeasure)
		winEnd = time.After(cfg.Duration)
	}
	if cfg.Warmup == 0 {
		beginWindow()
	}
loop:
	for {
		select {
		case <-ctx.Done():
			err = context.Cause(ctx)
			break loop
		case <-warmupEnd.C:
			if phase.Load() == phaseWarmup {
				beginWindow()
			}
		case <-winEnd:
			break loop
		case now := <-tick.C:
			if phase.Load() == phaseMeasure {
				// Whole seconds of the window only: the first tick in it
				// starts the count.
				m := measured.Load() + measureErrs.Load()
				if !lastMTick.IsZero() {
					rate := float64(m-lastMeas) / now.Sub(lastMTick).Seconds()
					if slowest < 0 || rate < slowest {
						slowest = rate
					}
				}
				lastMeas, lastMTick = m, now
			}
			if cfg.Progress != nil {
				n := total.Load()
				name := "warmup"
				if phase.Load() == phaseMeasure {
					name = "measure"
				}
				extra := ""
				if cfg.ProgressExtra != nil {
					extra = "  " + cfg.ProgressExtra()
				}
				fmt.Fprintf(cfg.Progress, "%s %3.0fs %-7s ops %d  %.0f ops/s  errors %d%s\n", cfg.Label,
					now.Sub(start).Seconds(), name, n, float64(n-lastOps)/now.Sub(lastTick).Seconds(), totalErrs.Load(), extra)
				lastOps, lastTick = n, now
			}
		}
	}
	phase.Store(phaseDone)
	winStop := time.Now()
	bytes1, bytesOK1 := bytesNow()
	routes1 := routesNow()
	if cfg.OnEnd != nil && err == nil {
		cfg.OnEnd()
	}
	cancel() // operations in flight end now; they are not counted
	wg.Wait()
	if err != nil {
		return nil, err
	}
	res := &Result{
		System: sys.Name(), Mode: cfg.Mode, Workload: cfg.Workload.Name, Dist: cfg.Dist,
		Concurrency: cfg.Concurrency, Conns: nconns,
		Elapsed: winStop.Sub(winStart), Ops: measured.Load(), Errors: measureErrs.Load(),
		Prelim: rec.prelim, Final: rec.final, Both: rec.both, Diverged: rec.diverged,
		ErrorKinds: rec.kinds, ErrorExample: rec.examples,
	}
	res.SlowestSecond = max(slowest, 0)
	if routes0 != nil && routes1 != nil {
		res.Routes = map[string]uint64{}
		for ep, n := range routes1 {
			res.Routes[ep] = n - routes0[ep]
		}
	}
	if bytesOK && bytesOK1 {
		res.BytesOK = true
		res.Bytes = LinkBytes{Sent: bytes1.Sent - bytes0.Sent, Received: bytes1.Received - bytes0.Received}
	}
	return res, nil
}

// ErrorSummary describes the errors of a row in one line ("" without
// errors): counts by kind and one example message per kind.
func (r *Result) ErrorSummary() string {
	if r.Errors == 0 {
		return ""
	}
	kinds := make([]string, 0, len(r.ErrorKinds))
	for k := range r.ErrorKinds {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var parts []string
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s %d (e.g. %s)", k, r.ErrorKinds[k], r.ErrorExample[k]))
	}
	return strings.Join(parts, "; ")
}

// Load writes every key once (key 0 first), with concurrency writers over one
// connection, asking for the final view: the load phase before the rows, so
// that reads find values and the latest distribution's order is the load
// order.
func Load(ctx context.Context, sys System, n, valueSize, concurrency int, seed uint64) error {
	conn, err := sys.Dial(ctx)
	if err != nil {
		return fmt.Errorf("%s: dial: %w", sys.Name(), err)
	}
	defer conn.Close()
	names := KeyNames(n)
	gen := NewGenerator(Workloads["w"], NewUniform(n), names, valueSize, seed, -1)
	var (
		next     atomic.Int64
		mu       sync.Mutex
		firstErr error
	)
	// Values are generated up front: the generator is not concurrent.
	values := make([][]byte, n)
	for i := range values {
		values[i] = gen.value()
	}
	var wg sync.WaitGroup
	for range min(concurrency, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				var err error
				for try := 0; try < 5; try++ {
					octx, cancel := context.WithTimeout(ctx, 10*time.Second)
					_, err = conn.Do(octx, Op{Key: names[i], Value: values[i]}, Strong)
					cancel()
					if err == nil || ctx.Err() != nil {
						break
					}
					time.Sleep(50 * time.Millisecond)
				}
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("%s: loading %s: %w", sys.Name(), names[i], err)
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}
