package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/correctable"
	"github.com/correctables/correctables/internal/cluster"
	"github.com/correctables/correctables/internal/netem"
)

// The Pileus evaluation's test bed (Pileus SOSP'13 §5.1, Figure 10): the
// primary in England, secondaries in US West and India, clients in each of
// those and in China. The primary site is three replicas in England (a raft
// quorum of its own, as §4.2 allows: "the primary site could consist of a
// fault-tolerant cluster of servers"), so strong operations never wait for
// the lagging secondaries.
var (
	pileusPlacement = []string{"England", "England", "England", "US-West", "India"}
	pileusRegions   = []string{"US-West", "England", "India", "China"}
	// pileusNodes are the replicas clients read from: the primary and the
	// two secondaries (the other two England replicas only make the
	// primary site's quorum).
	pileusNodes     = []uint64{1, 4, 5}
	pileusNodeNames = map[uint64]string{1: "England", 4: "US-West", 5: "India"}
	pileusPrimary   = uint64(1)
	pileusSecondary = []uint64{4, 5}
)

const (
	stratPrimary     = "Primary"
	stratRandom      = "Random"
	stratClosest     = "Closest"
	stratPileus      = "Pileus"
	stratIncremental = "Incremental"
)

var pileusStrategies = []string{stratPrimary, stratRandom, stratClosest, stratPileus, stratIncremental}

type pileusConfig struct {
	ops, sessions, keys int
	delay               time.Duration
	slas                []string
	warmup              time.Duration
	window, adaptWindow time.Duration
	adaptPhase          time.Duration
	csv                 string
	seed                uint64
	parallelRegions     bool
	traceDecisions      string
	jitter              time.Duration
}

func newPileusCmd() *cobra.Command {
	var cfg pileusConfig
	cmd := &cobra.Command{
		Use:   "pileus",
		Short: "Consistency-based SLAs on the Pileus test bed (Pileus §5, Figures 11-13, Tables 1-2)",
		Long: `pileus starts five replicas in this process behind the emulated pileus-2013
WAN: the primary site (three replicas, raft leader among them) in England,
secondaries in US West and India whose incoming replication is delayed by
--replication-delay (Pileus's secondaries pulled from the primary once a
minute). From a client in each of US West, England, India and China it runs
YCSB-style sessions (--ops Gets and Puts, half each, uniform over --keys
keys; Puts go to the primary with the strong protocol) under the
shopping-cart SLA (Figure 4) and the password-checking SLA (Figure 6), with
five strategies given the same run at the same time (one region after the
other unless --parallel-regions): Primary (every Get at
the primary), Random (a random node), Closest (the node with the smallest
round trip), Pileus (the target subSLA and node of highest expected
utility, Figure 8) and Incremental (the incremental SLA: one Get to the best
node for the lowest subSLA and one to the best for the top subSLA, the view
of the best subSLA met). Reads at the primary use the strong protocol,
elsewhere the weak one. It prints the average utility per strategy and
region (Figures 11-12) and Pileus's decisions (Tables 1-2), then runs the
adaptation experiment of Figure 13 from US West under the password SLA: 300
ms added to the primary's round trip, then to the local node's, then the
local node restored, then the primary; utility over time goes to --csv.

The emulated links have fixed delays unless --jitter J: then each one-way
delay between two regions is drawn uniformly from [RTT/2-J, RTT/2+J] per
chunk (bytes never reordered), so a round trip spreads over about
[RTT-2J, RTT+2J], as on real WAN paths (Pileus ran on real EC2 and Azure
links). Links within a region keep their fixed 1 ms round trip.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.validate(); err != nil {
				return err
			}
			return runPileus(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), cfg)
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.ops, "ops", 100, "Gets and Puts per session (the paper: 400)")
	f.IntVar(&cfg.sessions, "sessions", 1, "sessions per strategy, region and SLA")
	f.IntVar(&cfg.keys, "keys", 10_000, "keys (the paper: 10,000)")
	f.DurationVar(&cfg.delay, "replication-delay", 3*time.Second, "delay of every message towards the secondaries (at most 9s; the paper pulled once a minute)")
	f.StringSliceVar(&cfg.slas, "sla", []string{"cart", "password"}, "SLAs to run: cart, password, web")
	f.DurationVar(&cfg.warmup, "warmup", 3*time.Second, "time for the monitors' first probes before the sessions start")
	f.DurationVar(&cfg.window, "monitor-window", time.Minute, "sliding window of the clients' monitors (the paper: a few minutes)")
	f.DurationVar(&cfg.adaptWindow, "adapt-window", 10*time.Second, "monitor window during the adaptation run (shorter: adapts faster)")
	f.DurationVar(&cfg.adaptPhase, "adapt-phase", 15*time.Second, "length of each phase of the adaptation run (0: skip it)")
	f.StringVar(&cfg.csv, "csv", "pileus-adaptation.csv", "file for the adaptation run's utility over time")
	f.Uint64Var(&cfg.seed, "seed", 1, "seed of the workload")
	f.BoolVar(&cfg.parallelRegions, "parallel-regions", false, "run the four client regions at once (default: one region at a time, its five strategies at once)")
	f.DurationVar(&cfg.jitter, "jitter", 0, "jitter of every link between regions: each one-way delay uniform in [RTT/2-J, RTT/2+J] (0: fixed delays)")
	f.StringVar(&cfg.traceDecisions, "trace-decisions", "", "file to log every target choice of Pileus and Incremental in (the monitor's estimates per subSLA and node) and every Pileus Get's outcome")
	return cmd
}

func (c pileusConfig) validate() error {
	var errs []error
	if c.ops < 2 || c.ops > 100_000 {
		errs = append(errs, fmt.Errorf("--ops %d: want 2 to 100,000", c.ops))
	}
	if c.sessions < 1 || c.sessions > 1000 {
		errs = append(errs, fmt.Errorf("--sessions %d: want 1 to 1,000", c.sessions))
	}
	if c.keys < 1 || c.keys > 10_000_000 {
		errs = append(errs, fmt.Errorf("--keys %d: want 1 to 10,000,000", c.keys))
	}
	if c.delay < 0 || c.delay > 9*time.Second {
		errs = append(errs, fmt.Errorf("--replication-delay %v: want 0 to 9s (emulated links hold at most %v)", c.delay, netem.MaxLatency))
	}
	for _, s := range c.slas {
		if _, err := client.NamedSLA(s); err != nil {
			errs = append(errs, fmt.Errorf("--sla: %w", err))
		}
	}
	if c.jitter < 0 || c.jitter > netem.MaxLatency {
		errs = append(errs, fmt.Errorf("--jitter %v: want 0 to %v", c.jitter, netem.MaxLatency))
	}
	if c.window <= 0 || c.adaptWindow <= 0 || c.warmup < 0 || c.adaptPhase < 0 {
		errs = append(errs, errors.New("--monitor-window and --adapt-window must be positive, --warmup and --adapt-phase not negative"))
	}
	return errors.Join(errs...)
}

// pileusStats accumulates one strategy's Gets in one region.
type pileusStats struct {
	gets, puts int
	errors     int // Gets that failed other than by missing the SLA
	utility    float64
	latency    time.Duration
	met        map[int]int // subSLA met (-1: none)
	// decisions counts (target subSLA, node) for Pileus (Tables 1-2).
	decisions map[[2]uint64]int
}

func newPileusStats() *pileusStats {
	return &pileusStats{met: map[int]int{}, decisions: map[[2]uint64]int{}}
}

func (s *pileusStats) add(r client.SLAResult, err error) {
	s.gets++
	s.latency += r.Latency
	if err != nil {
		s.met[-1]++
	} else {
		s.met[r.SubSLA]++
		s.utility += r.Utility
	}
	if r.Target >= 0 && r.TargetReplica != 0 {
		s.decisions[[2]uint64{uint64(r.Target), r.TargetReplica}]++
	}
}

// pileusBed is the running test bed.
type pileusBed struct {
	cl *cluster.Cluster
	// per client region: a client of the three nodes, and one of the
	// primary alone for Puts.
	readers, writers map[string]*client.Client
	// trace logs target choices and Pileus's outcomes (--trace-decisions).
	trace *decisionLog
}

func startPileusBed(ctx context.Context, errOut io.Writer, cfg pileusConfig) (*pileusBed, func(), error) {
	dir, err := os.MkdirTemp("", "correctables-pileus-")
	if err != nil {
		return nil, nil, err
	}
	log := slog.New(slog.DiscardHandler)
	cl, err := cluster.Start(cluster.Options{
		Dir: dir, Replicas: len(pileusPlacement), WAN: netem.PresetPileus, Placement: pileusPlacement,
		ClientRegion: "England", NoSync: true, Logger: log, Jitter: cfg.jitter,
		ReplicationDelay: map[uint64]time.Duration{4: 0, 5: 0},
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	b := &pileusBed{cl: cl, readers: map[string]*client.Client{}, writers: map[string]*client.Client{}}
	stop := func() {
		for _, c := range b.readers {
			c.Close()
		}
		for _, c := range b.writers {
			c.Close()
		}
		cl.Stop()
		os.RemoveAll(dir)
		if b.trace != nil {
			b.trace.close()
		}
	}
	fail := func(err error) (*pileusBed, func(), error) { stop(); return nil, nil, err }
	if cfg.traceDecisions != "" {
		if b.trace, err = newDecisionLog(cfg.traceDecisions); err != nil {
			return fail(err)
		}
	}
	if cfg.jitter > 0 {
		fmt.Fprintf(errOut, "pileus: jitter %v on every link between regions\n", cfg.jitter)
	}
	fmt.Fprintf(errOut, "pileus: five replicas up (England x3, US-West, India); moving raft leadership to England replica 1\n")
	mctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := cl.MoveLeader(mctx, pileusPrimary); err != nil {
		return fail(err)
	}
	for _, region := range pileusRegions {
		eps, err := cl.EndpointsFrom(region)
		if err != nil {
			return fail(err)
		}
		var nodes []string
		for _, id := range pileusNodes {
			nodes = append(nodes, eps[id-1])
		}
		// A generous dial timeout: three probes over 434 ms links on a
		// loaded machine can take seconds.
		opts := []client.Option{client.WithDialTimeout(30 * time.Second)}
		if b.trace != nil {
			opts = append(opts, client.WithTargetTrace(b.trace.decision(region)))
		}
		r, err := client.Dial(ctx, nodes, opts...)
		if err != nil {
			return fail(err)
		}
		b.readers[region] = r
		if err := r.Monitor().SetWindow(cfg.window); err != nil {
			return fail(err)
		}
		w, err := client.Dial(ctx, []string{eps[pileusPrimary-1]}, client.WithDialTimeout(30*time.Second))
		if err != nil {
			return fail(err)
		}
		b.writers[region] = w
	}
	for _, id := range pileusSecondary {
		if err := cl.SetReplicationDelay(id, cfg.delay); err != nil {
			return fail(err)
		}
	}
	// A write at once, so the delayed secondaries' logs are behind the
	// primary site's before their election timers could fire.
	if _, err := b.writers["England"].InvokeStrong(ctx, client.Put("pileus-start", []byte("1"))).Final(ctx); err != nil {
		return fail(err)
	}
	fmt.Fprintf(errOut, "pileus: replication delay towards the secondaries %v; warming the monitors for %v\n", cfg.delay, cfg.warmup)
	select {
	case <-time.After(cfg.warmup):
	case <-ctx.Done():
		return fail(ctx.Err())
	}
	return b, stop, nil
}

func runPileus(ctx context.Context, out, errOut io.Writer, cfg pileusConfig) error {
	b, stop, err := startPileusBed(ctx, errOut, cfg)
	if err != nil {
		return err
	}
	defer stop()
	fmt.Fprintf(out, "bench pileus: %d session(s) of %d Gets and Puts per strategy, region and SLA; %d keys; replication delay %v; monitor window %v\n\n",
		cfg.sessions, cfg.ops, cfg.keys, cfg.delay, cfg.window)
	for _, name := range cfg.slas {
		sla, _ := client.NamedSLA(name)
		start := time.Now()
		fmt.Fprintf(errOut, "pileus: SLA %s: %d strategies x %d regions running\n", sla.Name, len(pileusStrategies), len(pileusRegions))
		stats, err := runPileusSLA(ctx, errOut, b, cfg, sla)
		if err != nil {
			return err
		}
		printPileus(out, sla, stats)
		fmt.Fprintf(errOut, "pileus: SLA %s done in %v\n", sla.Name, time.Since(start).Round(time.Second))
	}
	if cfg.adaptPhase > 0 {
		return runPileusAdaptation(ctx, out, errOut, b, cfg)
	}
	return nil
}

// runPileusSLA runs every strategy in every region at once and returns the
// statistics by region and strategy.
func runPileusSLA(ctx context.Context, errOut io.Writer, b *pileusBed, cfg pileusConfig, sla client.SLA) (map[string]map[string]*pileusStats, error) {
	stats := map[string]map[string]*pileusStats{}
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs []error
		done int
	)
	total := len(pileusRegions) * len(pileusStrategies)
	for ri, region := range pileusRegions {
		if !cfg.parallelRegions && ri > 0 {
			// One region at a time: the five strategies of a region share
			// the same conditions, and fewer clients load the machine.
			wg.Wait()
		}
		stats[region] = map[string]*pileusStats{}
		for _, strat := range pileusStrategies {
			st := newPileusStats()
			stats[region][strat] = st
			// The same seed for every strategy of a region: each runs the
			// same sequence of Gets and Puts.
			rng := rand.New(rand.NewPCG(cfg.seed, uint64(ri)))
			wg.Go(func() {
				for range cfg.sessions {
					if err := pileusSession(ctx, b, region, strat, sla, cfg, rng, st, nil); err != nil {
						mu.Lock()
						errs = append(errs, fmt.Errorf("%s from %s: %w", strat, region, err))
						mu.Unlock()
						return
					}
				}
				mu.Lock()
				done++
				fmt.Fprintf(errOut, "pileus: SLA %s: %s from %s done (%d/%d)\n", sla.Name, strat, region, done, total)
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	return stats, errors.Join(errs...)
}

// pileusSession runs one session of cfg.ops Gets and Puts; each Get's
// result goes to st, and to sample if set.
func pileusSession(ctx context.Context, b *pileusBed, region, strat string, sla client.SLA, cfg pileusConfig, rng *rand.Rand, st *pileusStats, sample func(client.SLAResult, error)) error {
	r, w := b.readers[region], b.writers[region]
	s := client.NewSession()
	// Random's choices come from a stream of their own, so that the
	// workload (keys, Gets and Puts) stays the same for every strategy.
	choice := rand.New(rand.NewPCG(rng.Uint64(), 1))
	for range cfg.ops {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		key := "user" + strconv.Itoa(rng.IntN(cfg.keys))
		if rng.IntN(2) == 0 {
			// Puts are performed at the primary (Pileus §4.2), with the
			// strong protocol: committed by the primary site when they
			// return, like Pileus's synchronous Puts.
			v := strconv.AppendUint(nil, rng.Uint64(), 36)
			if _, err := w.InvokeSession(ctx, s, client.Put(key, v), correctable.Strong).Final(ctx); err != nil {
				return fmt.Errorf("put: %w", err)
			}
			st.puts++
			continue
		}
		res, err := pileusGet(ctx, r, s, strat, sla, key, choice)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if b.trace != nil && strat == stratPileus {
			b.trace.outcome(region, sla.Name, key, res, err)
		}
		if err != nil && !errors.Is(err, client.ErrSLANotMet) {
			// Counted as a Get that met no subSLA (Pileus §3.3: an
			// unavailable Get delivers no utility).
			st.errors++
		}
		st.add(res, err)
		if sample != nil {
			sample(res, err)
		}
	}
	return nil
}

// pileusGet performs one Get with a strategy.
func pileusGet(ctx context.Context, c *client.Client, s *client.Session, strat string, sla client.SLA, key string, rng *rand.Rand) (client.SLAResult, error) {
	at := func(id uint64) (client.SLAResult, error) {
		return c.GetSLAAt(ctx, s, sla, id, key, id == pileusPrimary)
	}
	switch strat {
	case stratPrimary:
		return at(pileusPrimary)
	case stratRandom:
		return at(pileusNodes[rng.IntN(len(pileusNodes))])
	case stratClosest:
		rtts := c.Monitor().Replicas()
		best := pileusNodes[0]
		for _, id := range pileusNodes {
			if rtts[id] > 0 && (rtts[best] == 0 || rtts[id] < rtts[best]) {
				best = id
			}
		}
		return at(best)
	case stratPileus:
		return c.GetSLA(ctx, s, sla, key)
	case stratIncremental:
		v, err := c.InvokeSLA(ctx, s, sla, key).Final(ctx)
		r := v.Value
		if err != nil {
			r.Target = -1
		}
		return r, err
	}
	return client.SLAResult{}, fmt.Errorf("unknown strategy %q", strat)
}

func printPileus(out io.Writer, sla client.SLA, stats map[string]map[string]*pileusStats) {
	fmt.Fprintf(out, "SLA %s:", sla.Name)
	for i, sub := range sla.Subs {
		fmt.Fprintf(out, "  %d. %v", i+1, sub)
	}
	fmt.Fprintf(out, "\n\naverage utility per Get (Pileus Figure %s)\n", map[string]string{"cart": "11", "password": "12"}[sla.Name])
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "client\t")
	for _, s := range pileusStrategies {
		fmt.Fprintf(tw, "%s\t", s)
	}
	fmt.Fprint(tw, "Pileus>=best fixed\tIncremental>Pileus\t\n")
	for _, region := range pileusRegions {
		fmt.Fprintf(tw, "%s\t", region)
		var bestFixed float64
		for _, s := range pileusStrategies {
			u := stats[region][s].avg()
			fmt.Fprintf(tw, "%.3f\t", u)
			if s == stratPrimary || s == stratRandom || s == stratClosest {
				bestFixed = max(bestFixed, u)
			}
		}
		p, inc := stats[region][stratPileus].avg(), stats[region][stratIncremental].avg()
		fmt.Fprintf(tw, "%v\t%v\t\n", p >= bestFixed, inc > p)
	}
	tw.Flush()

	for _, region := range pileusRegions {
		for _, s := range pileusStrategies {
			if n := stats[region][s].errors; n > 0 {
				fmt.Fprintf(out, "(%s from %s: %d Gets failed other than by missing the SLA, counted as utility 0)\n", s, region, n)
			}
		}
	}
	fmt.Fprintf(out, "\nmean Get latency (ms)\n")
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "client\t")
	for _, s := range pileusStrategies {
		fmt.Fprintf(tw, "%s\t", s)
	}
	fmt.Fprint(tw, "\n")
	for _, region := range pileusRegions {
		fmt.Fprintf(tw, "%s\t", region)
		for _, s := range pileusStrategies {
			st := stats[region][s]
			fmt.Fprintf(tw, "%.1f\t", float64(st.latency.Microseconds())/1000/float64(max(st.gets, 1)))
		}
		fmt.Fprint(tw, "\n")
	}
	tw.Flush()

	fmt.Fprintf(out, "\nPileus's decisions: %% of Gets per target subSLA and node, subSLA met (Pileus Table %s)\n", map[string]string{"cart": "1", "password": "2"}[sla.Name])
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "client\ttarget\t")
	for _, id := range pileusNodes {
		fmt.Fprintf(tw, "Get from %s\t", pileusNodeNames[id])
	}
	fmt.Fprint(tw, "subSLA met\tavg utility\tGets\t\n")
	for _, region := range pileusRegions {
		st := stats[region][stratPileus]
		n := float64(max(st.gets, 1))
		for i := range sla.Subs {
			if i == 0 {
				fmt.Fprintf(tw, "%s\t", region)
			} else {
				fmt.Fprint(tw, "\t")
			}
			fmt.Fprintf(tw, "%d\t", i+1)
			for _, id := range pileusNodes {
				fmt.Fprintf(tw, "%.1f%%\t", 100*float64(st.decisions[[2]uint64{uint64(i), id}])/n)
			}
			fmt.Fprintf(tw, "%.1f%%\t", 100*float64(st.met[i])/n)
			if i == 0 {
				fmt.Fprintf(tw, "%.3f\t%d\t\n", st.avg(), st.gets)
			} else {
				fmt.Fprint(tw, "\t\t\n")
			}
		}
		fmt.Fprintf(tw, "\tnone\t\t\t\t%.1f%%\t\t\t\n", 100*float64(st.met[-1])/n)
	}
	tw.Flush()
	fmt.Fprintln(out)
}

func (s *pileusStats) avg() float64 {
	if s.gets == 0 {
		return 0
	}
	return s.utility / float64(s.gets)
}

// runPileusAdaptation is Figure 13: the US West client under the password
// SLA, while 300 ms is added to the primary's round trip, then to the local
// node's, then the local node and the primary are restored.
func runPileusAdaptation(ctx context.Context, out, errOut io.Writer, b *pileusBed, cfg pileusConfig) error {
	const region = "US-West"
	sla := client.PasswordSLA
	nw := b.cl.Net
	primary, err := nw.Proxy(region, "r1")
	if err != nil {
		return err
	}
	local, err := nw.Proxy(region, "r4")
	if err != nil {
		return err
	}
	pBase, lBase := primary.Latency(), local.Latency()
	if err := b.readers[region].Monitor().SetWindow(cfg.adaptWindow); err != nil {
		return err
	}
	phases := []struct {
		name   string
		p, l   time.Duration // added one-way latency
		marker string
	}{
		{"baseline", 0, 0, ""},
		{"primary +300ms", 150 * time.Millisecond, 0, "#1"},
		{"primary and local +300ms", 150 * time.Millisecond, 150 * time.Millisecond, "#3"},
		{"primary +300ms, local restored", 150 * time.Millisecond, 0, "#5"},
		{"restored", 0, 0, "#6"},
	}
	f, err := os.Create(cfg.csv)
	if err != nil {
		return err
	}
	defer f.Close()
	fmt.Fprintln(f, "elapsed_s,phase,strategy,target_subsla,target_node,node,subsla_met,utility,latency_ms")
	var mu sync.Mutex
	start := time.Now()
	phase := 0
	perPhase := map[[2]string]*pileusStats{}
	record := func(strat string) func(client.SLAResult, error) {
		return func(r client.SLAResult, err error) {
			mu.Lock()
			defer mu.Unlock()
			met, u := r.SubSLA+1, r.Utility
			if err != nil {
				met, u = 0, 0
			}
			fmt.Fprintf(f, "%.3f,%s,%s,%d,%s,%s,%d,%g,%.1f\n", time.Since(start).Seconds(), phases[phase].name, strat,
				r.Target+1, pileusNodeNames[r.TargetReplica], pileusNodeNames[r.Replica], met, u, float64(r.Latency.Microseconds())/1000)
			k := [2]string{phases[phase].name, strat}
			if perPhase[k] == nil {
				perPhase[k] = newPileusStats()
			}
			perPhase[k].add(r, err)
		}
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	strats := []string{stratPileus, stratIncremental, stratPrimary, stratClosest}
	var errs []error
	for i, strat := range strats {
		rng := rand.New(rand.NewPCG(cfg.seed, uint64(1000+i)))
		wg.Go(func() {
			for actx.Err() == nil {
				if err := pileusSession(actx, b, region, strat, sla, cfg, rng, newPileusStats(), record(strat)); err != nil && actx.Err() == nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("adaptation, %s: %w", strat, err))
					mu.Unlock()
					cancel()
				}
			}
		})
	}
	for i, ph := range phases {
		if err := primary.SetLatency(pBase + ph.p); err != nil {
			cancel()
			wg.Wait()
			return err
		}
		if err := local.SetLatency(lBase + ph.l); err != nil {
			cancel()
			wg.Wait()
			return err
		}
		mu.Lock()
		phase = i
		mu.Unlock()
		fmt.Fprintf(errOut, "pileus: adaptation phase %d/%d: %s\n", i+1, len(phases), ph.name)
		select {
		case <-time.After(cfg.adaptPhase):
		case <-actx.Done():
		}
	}
	cancel()
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	fmt.Fprintf(out, "adaptation (Pileus Figure 13): client in %s, SLA password, %v per phase, monitor window %v; per Get in %s\n", region, cfg.adaptPhase, cfg.adaptWindow, cfg.csv)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "phase\t")
	for _, s := range strats {
		fmt.Fprintf(tw, "%s\t", s)
	}
	fmt.Fprint(tw, "Pileus's targets\t\n")
	for _, ph := range phases {
		fmt.Fprintf(tw, "%s %s\t", ph.marker, ph.name)
		for _, s := range strats {
			st := perPhase[[2]string{ph.name, s}]
			if st == nil {
				st = newPileusStats()
			}
			fmt.Fprintf(tw, "%.3f\t", st.avg())
		}
		fmt.Fprintf(tw, "%s\t\n", targets(perPhase[[2]string{ph.name, stratPileus}]))
		_ = ph
	}
	tw.Flush()
	return nil
}

// targets summarises Pileus's decisions in a phase: subSLA@node shares.
func targets(st *pileusStats) string {
	if st == nil || st.gets == 0 {
		return "-"
	}
	s := ""
	for i := range 3 {
		for _, id := range pileusNodes {
			if n := st.decisions[[2]uint64{uint64(i), id}]; n > 0 {
				s += fmt.Sprintf(" %d@%s:%.0f%%", i+1, pileusNodeNames[id], 100*float64(n)/float64(st.gets))
			}
		}
	}
	return s
}

// decisionLog is the --trace-decisions file: one line per target choice
// of a region's reader (Pileus's and Incremental's: they share the
// client) with the monitor's estimates, and one per Pileus Get with the
// subSLA it targeted and met.
type decisionLog struct {
	mu    sync.Mutex
	f     *os.File
	start time.Time
}

func newDecisionLog(path string) (*decisionLog, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return &decisionLog{f: f, start: time.Now()}, nil
}

func (l *decisionLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.f.Close()
}

// decision returns the target trace of region's reader. A line reads
//
//	12.345 choice England password user42 leader=1 -> 1@England | 1@England cons=1 lat=1.00/37s exp=1.000 ...
//
// lat is PNodeLat over n samples in the window, s: strong reads', w: probes
// and weak reads'.
func (l *decisionLog) decision(region string) func(client.TargetDecision) {
	return func(d client.TargetDecision) {
		var b []byte
		b = fmt.Appendf(b, "%.3f choice %s %s %s leader=%d -> %d@%s |", time.Since(l.start).Seconds(), region, d.SLA, d.Key,
			d.Leader, d.SubSLA+1, pileusNodeNames[d.Replica])
		for _, e := range d.Estimates {
			kind := "w"
			if e.StrongSamples {
				kind = "s"
			}
			b = fmt.Appendf(b, " %d@%s cons=%g lat=%.2f/%d%s exp=%.3f", e.SubSLA+1, pileusNodeNames[e.Replica], e.PNodeCons, e.PNodeLat, e.Samples, kind, e.Expected)
		}
		b = append(b, '\n')
		l.mu.Lock()
		defer l.mu.Unlock()
		l.f.Write(b)
	}
}

// outcome logs a Pileus Get: target, node that answered, subSLA met (0:
// none), latency.
func (l *decisionLog) outcome(region, sla, key string, r client.SLAResult, err error) {
	met := r.SubSLA + 1
	if err != nil {
		met = 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.f, "%.3f pileus %s %s %s target=%d@%s met=%d latency=%.1fms\n", time.Since(l.start).Seconds(), region, sla, key,
		r.Target+1, pileusNodeNames[r.TargetReplica], met, float64(r.Latency.Microseconds())/1000)
}
