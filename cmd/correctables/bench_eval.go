package main

// The evaluation of Correctables §6 reproduced on the emulated ec2-2016 WAN:
// `bench fig6|fig7|fig8|queue|app|report`. Each command starts its own
// three-replica cluster in this process behind the emulated WAN, writes
// its rows as CSV and its figure as SVG and PNG into --out (default
// ./results), and prints a summary; `bench report` gathers the figures into
// one HTML page.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/spf13/cobra"

	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/correctable"
	"github.com/correctables/correctables/internal/cluster"
	"github.com/correctables/correctables/internal/evalplot"
	"github.com/correctables/correctables/internal/loadgen"
)

// evalCmds are the evaluation subcommands of `bench`.
func evalCmds() []*cobra.Command {
	return []*cobra.Command{newFig6Cmd(), newFig7Cmd(), newFig8Cmd(), newQueueCmd(), newAppCmd(), newReportCmd()}
}

// evalFlags are the flags every evaluation command has.
type evalFlags struct {
	out    string
	wan    string
	leader string
	noSync bool
	seed   uint64
}

func (f *evalFlags) register(cmd *cobra.Command, leader string) {
	fl := cmd.Flags()
	fl.StringVar(&f.out, "out", "results", "directory for the CSV, SVG and PNG files")
	fl.StringVar(&f.wan, "wan", "ec2-2016", "emulated WAN preset (ec2-2016 places replicas in FRK, IRL, VRG)")
	fl.StringVar(&f.leader, "leader", leader, "region of the raft leader")
	fl.BoolVar(&f.noSync, "no-sync", false, "do not fsync (measures the protocol without the disk)")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the workload generators")
}

// evalCluster is a cluster behind the emulated WAN with the leader placed.
type evalCluster struct {
	c   *cluster.Cluster
	dir string
}

func startEvalCluster(ctx context.Context, progress io.Writer, f evalFlags) (*evalCluster, error) {
	dir, err := os.MkdirTemp("", "correctables-eval-")
	if err != nil {
		return nil, err
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	c, err := cluster.Start(cluster.Options{Dir: dir, WAN: f.wan, NoSync: f.noSync, Logger: log})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	e := &evalCluster{c: c, dir: dir}
	lead, err := e.replica(f.leader)
	if err != nil {
		e.stop()
		return nil, fmt.Errorf("--leader: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := c.MoveLeader(wctx, lead); err != nil {
		e.stop()
		return nil, err
	}
	fmt.Fprintf(progress, "cluster on emulated WAN %s: replicas in %s, leader in %s\n", f.wan, strings.Join(c.Regions, ", "), f.leader)
	return e, nil
}

func (e *evalCluster) stop() {
	// Bounded: the command is ending, and its result must not wait on a
	// replica slow to stop.
	done := make(chan struct{})
	go func() {
		e.c.Stop()
		close(done)
	}()
	select {
	case <-done:
		os.RemoveAll(e.dir)
	case <-time.After(30 * time.Second):
		fmt.Fprintf(os.Stderr, "the cluster did not stop within 30 s; its data stays in %s\n", e.dir)
	}
}

// replica returns the id of the replica in region.
func (e *evalCluster) replica(region string) (uint64, error) {
	i := slices.Index(e.c.Regions, region)
	if i < 0 {
		return 0, fmt.Errorf("no replica in region %q (regions: %s)", region, strings.Join(e.c.Regions, ", "))
	}
	return uint64(i + 1), nil
}

// moveLeader makes the replica in region the leader, waiting up to a
// minute.
func (e *evalCluster) moveLeader(ctx context.Context, region string) error {
	lead, err := e.replica(region)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return e.c.MoveLeader(ctx, lead)
}

// leaderRegion returns the region of the leader every replica knows, or
// "none" if they do not agree within ten seconds.
func (e *evalCluster) leaderRegion(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	lead, err := e.c.WaitLeader(ctx)
	if err != nil || lead < 1 || int(lead) > len(e.c.Regions) {
		return "none"
	}
	return e.c.Regions[lead-1]
}

// dial returns a client in region `from` that talks to the replica in
// region `to` only.
func (e *evalCluster) dial(ctx context.Context, from, to string, opts ...client.Option) (*client.Client, error) {
	id, err := e.replica(to)
	if err != nil {
		return nil, err
	}
	addr := e.c.Endpoints[id-1]
	if e.c.Net != nil {
		if addr, err = e.c.Net.Addr(from, "r"+strconv.FormatUint(id, 10)); err != nil {
			return nil, err
		}
	}
	// Generous probe and dial timeouts: a loaded machine (or the race
	// detector) answers the first probes slowly.
	opts = append([]client.Option{client.WithDialTimeout(30 * time.Second), client.WithProbeTimeout(10 * time.Second)}, opts...)
	return client.Dial(ctx, []string{addr}, opts...)
}

// remoteOf is the replica each client region talks to in Figures 6-8:
// "each client connecting to a remote replica" (Correctables §6.2.1), the
// client in IRL to FRK as in the paper's other experiments.
var remoteOf = map[string]string{"IRL": "FRK", "FRK": "IRL", "VRG": "IRL"}

// ycsbClient is one YCSB client of Figures 6-8.
type ycsbClient struct {
	region string
	cl     *client.Client
	gen    *loadgen.Generator
	mu     sync.Mutex // gen
}

func (y *ycsbClient) next() loadgen.Op {
	y.mu.Lock()
	defer y.mu.Unlock()
	return y.gen.Next()
}

// stepStats is what one client measured in one step.
type stepStats struct {
	region                 string
	prelim, final          *hdrhistogram.Histogram
	done, failed, dropped  atomic.Int64
	reads, readsDiverged   atomic.Int64
	writes, writesDiverged atomic.Int64
	mu                     sync.Mutex // histograms
	elapsed                time.Duration
	wireBytes, ops         uint64
}

func newStepStats(region string) *stepStats {
	return &stepStats{region: region, prelim: newHist(), final: newHist()}
}

func newHist() *hdrhistogram.Histogram {
	return hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 3)
}

func (s *stepStats) record(h *hdrhistogram.Histogram, d time.Duration) {
	s.mu.Lock()
	_ = h.RecordValue(d.Microseconds())
	s.mu.Unlock()
}

func msOf(us float64) float64 { return us / 1000 }

// ycsbOp issues one operation in mode and records its views.
func ycsbOp(ctx context.Context, cl *client.Client, op loadgen.Op, mode loadgen.Mode, s *stepStats) {
	var cop client.Op
	if op.Read {
		cop = client.Get(op.Key)
	} else {
		cop = client.Put(op.Key, op.Value)
	}
	var c *correctable.Correctable[client.Result]
	switch mode {
	case loadgen.Weak:
		c = cl.InvokeWeak(ctx, cop)
	case loadgen.Strong:
		c = cl.InvokeStrong(ctx, cop)
	default:
		c = cl.Invoke(ctx, cop)
	}
	var views []correctable.View[client.Result]
	for v := range c.AllViews() {
		views = append(views, v)
	}
	if c.Err() != nil || len(views) == 0 {
		s.failed.Add(1)
		return
	}
	last := views[len(views)-1]
	switch mode {
	case loadgen.Weak:
		s.record(s.prelim, last.Elapsed)
	case loadgen.Strong:
		s.record(s.final, last.Elapsed)
	default:
		if len(views) == 2 {
			s.record(s.prelim, views[0].Elapsed)
			diverged := !last.Confirmed && !views[0].Value.Equal(last.Value)
			if op.Read {
				s.reads.Add(1)
				if diverged {
					s.readsDiverged.Add(1)
				}
			} else {
				s.writes.Add(1)
				if diverged {
					s.writesDiverged.Add(1)
				}
			}
		}
		s.record(s.final, last.Elapsed)
	}
	s.done.Add(1)
}

// maxOutstanding bounds the operations one open-loop client has in flight;
// past it arrivals are dropped (counted) rather than queued.
const maxOutstanding = 2048

// openLoop runs every client at rate ops/s (Poisson arrivals, each
// operation on its own goroutine) for dur, waits for the operations in
// flight, and returns each client's stats.
func openLoop(ctx context.Context, clients []*ycsbClient, mode loadgen.Mode, rate float64, dur time.Duration, seed uint64) []*stepStats {
	out := make([]*stepStats, len(clients))
	var wg sync.WaitGroup
	for i, y := range clients {
		s := newStepStats(y.region)
		out[i] = s
		before := y.cl.Stats()
		wg.Go(func() {
			r := rand.New(rand.NewPCG(seed, uint64(i)))
			start := time.Now()
			var inflight sync.WaitGroup
			var outstanding atomic.Int64
			next := start
			for {
				next = next.Add(time.Duration(r.ExpFloat64() / rate * float64(time.Second)))
				if next.Sub(start) >= dur {
					break
				}
				if d := time.Until(next); d > 0 {
					select {
					case <-time.After(d):
					case <-ctx.Done():
					}
				}
				if ctx.Err() != nil {
					break
				}
				if outstanding.Load() >= maxOutstanding {
					s.dropped.Add(1)
					continue
				}
				op := y.next()
				outstanding.Add(1)
				inflight.Go(func() {
					defer outstanding.Add(-1)
					octx, cancel := context.WithTimeout(ctx, 30*time.Second)
					defer cancel()
					ycsbOp(octx, y.cl, op, mode, s)
				})
			}
			inflight.Wait()
			s.elapsed = time.Since(start)
			after := y.cl.Stats()
			s.wireBytes = after.WireBytesSent + after.WireBytesReceived - before.WireBytesSent - before.WireBytesReceived
			s.ops = after.Ops - before.Ops
		})
	}
	wg.Wait()
	return out
}

// ycsbSetup is the cluster, the data and the three clients of Figures 6-8.
type ycsbSetup struct {
	e       *evalCluster
	clients []*ycsbClient
	names   []string
}

func (y *ycsbSetup) close() {
	for _, c := range y.clients {
		c.cl.Close()
	}
	y.e.stop()
}

// startYCSB starts the cluster, writes keys records of valueSize bytes and
// dials one client per region, each to its remote replica.
func startYCSB(ctx context.Context, progress io.Writer, f evalFlags, keys, valueSize int, opts ...client.Option) (*ycsbSetup, error) {
	e, err := startEvalCluster(ctx, progress, f)
	if err != nil {
		return nil, err
	}
	y := &ycsbSetup{e: e, names: loadgen.KeyNames(keys)}
	for _, region := range []string{"IRL", "FRK", "VRG"} {
		cl, err := e.dial(ctx, region, remoteOf[region], opts...)
		if err != nil {
			y.close()
			return nil, err
		}
		y.clients = append(y.clients, &ycsbClient{region: region, cl: cl})
	}
	fmt.Fprintf(progress, "writing %d records of %d bytes\n", keys, valueSize)
	val := strings.Repeat("x", valueSize)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := range 64 {
		wg.Go(func() {
			cl := y.clients[w%len(y.clients)].cl
			for {
				i := int(next.Add(1)) - 1
				if i >= keys {
					return
				}
				v, err := cl.InvokeStrong(ctx, client.Put(y.names[i], []byte(val))).Final(ctx)
				if err == nil && v.Value.Err != nil {
					err = v.Value.Err
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		y.close()
		return nil, fmt.Errorf("loading: %w", err)
	}
	return y, nil
}

// redial replaces every client with a fresh one, so that a step starts
// without what an overloaded step before it left behind (endpoints marked
// down, streams still draining).
func (y *ycsbSetup) redial(ctx context.Context, opts ...client.Option) error {
	for _, c := range y.clients {
		c.cl.Close()
		// A replica still working off the previous step's backlog may miss
		// the first probes: try a few times.
		var err error
		for try := 0; try < 5; try++ {
			var cl *client.Client
			if cl, err = y.e.dial(ctx, c.region, remoteOf[c.region], opts...); err == nil {
				c.cl = cl
				break
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(5 * time.Second):
			}
		}
		if err != nil {
			return fmt.Errorf("dialing the %s client again: %w", c.region, err)
		}
	}
	return nil
}

// workload sets every client's generator.
func (y *ycsbSetup) workload(w loadgen.Workload, dist string, valueSize int, seed uint64) error {
	for i, c := range y.clients {
		kg, err := loadgen.NewKeyGen(dist, len(y.names))
		if err != nil {
			return err
		}
		c.gen = loadgen.NewGenerator(w, kg, y.names, valueSize, seed, i)
	}
	return nil
}

// parseRates parses a comma-separated list of positive rates.
func parseRates(s string) ([]float64, error) {
	var out []float64
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		r, err := strconv.ParseFloat(p, 64)
		if err != nil || r <= 0 || r > 1e6 || math.IsNaN(r) {
			return nil, fmt.Errorf("rate %q: want a number of ops/s in (0, 1,000,000]", p)
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no rate in %q", s)
	}
	return out, nil
}

func parseWorkloads(s string) ([]loadgen.Workload, error) {
	var out []loadgen.Workload
	for _, p := range strings.Split(s, ",") {
		if strings.TrimSpace(p) == "" {
			continue
		}
		w, err := loadgen.ParseWorkload(p)
		if err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no workload in %q", s)
	}
	return out, nil
}

func checkDuration(name string, d, lo, hi time.Duration) error {
	if d < lo || d > hi {
		return fmt.Errorf("--%s %v: want %v to %v", name, d, lo, hi)
	}
	return nil
}

func f1(x float64) string { return strconv.FormatFloat(x, 'f', 1, 64) }
func f3(x float64) string { return strconv.FormatFloat(x, 'f', 3, 64) }
func itoa(x int64) string { return strconv.FormatInt(x, 10) }

// commandLine is the command as typed, for the figures' captions.
func commandLine() string {
	args := slices.Clone(os.Args[1:])
	return "correctables " + strings.Join(args, " ")
}

func newReportCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "report",
		Short: "Gather the figures in --out into one HTML page (index.html)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			n, err := evalplot.Report(out)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s/index.html: %d figures\n", out, n)
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "results", "directory holding the figures")
	return cmd
}
