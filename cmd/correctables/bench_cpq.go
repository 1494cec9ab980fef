package main

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/spf13/cobra"

	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/internal/cluster"
	"github.com/correctables/correctables/internal/cpqbench"
	"github.com/correctables/correctables/internal/cpqctl"
	"github.com/correctables/correctables/internal/gamma"
	"github.com/correctables/correctables/internal/loadgen"
	"github.com/correctables/correctables/internal/netem"
)

// cpqFlags are the flags of `bench cpq`.
type cpqFlags struct {
	dists, figures, pSteps, adSteps string
	pqSteps                         string
	ctlQuorum                       bool
	wan, csvPath, tracePath         string
	rate                            float64
	duration, warmup, period        time.Duration
	ctlDuration, changeAt           time.Duration
	changeDelay, threshold          time.Duration
	replicaDelay                    time.Duration
	replicaLoss                     float64
	replicaLossStall                time.Duration
	quorumHedge                     string
	slaLatency                      time.Duration
	slaStale, ctlP, ctlMaxStep      float64
	ctlStrongerStale, slaStaleAt    float64
	ctlZ                            float64
	ctlWindow                       int
	settle                          time.Duration
	seed                            uint64
	valueSize                       int
}

type cpqPlan struct {
	f       cpqFlags
	dists   []string
	figures map[string]bool
	ps      []float64
	pqs     []float64
	ads     []time.Duration
	// quorumOpts are the options of the hosts' quorum clients.
	quorumOpts []client.Option
}

func (f cpqFlags) plan() (*cpqPlan, error) {
	p := &cpqPlan{f: f, figures: map[string]bool{}}
	for _, d := range cpqList(f.dists) {
		if d != "latest" && d != "hotspot" {
			return nil, fmt.Errorf("--dists: %q: want latest (1k keys) or hotspot (10k keys, 80%% of operations on 20%%)", d)
		}
		p.dists = append(p.dists, d)
	}
	if len(p.dists) == 0 {
		return nil, fmt.Errorf("--dists %q: no distribution", f.dists)
	}
	for _, fig := range cpqList(f.figures) {
		switch fig {
		case "1", "2", "3", "q", "qq", "wa", "ctl":
			p.figures[fig] = true
		default:
			return nil, fmt.Errorf("--figures: %q: want 1, 2, 3, q, qq, wa or ctl", fig)
		}
	}
	if f.quorumHedge != "auto" {
		d, err := time.ParseDuration(f.quorumHedge)
		if err != nil || d < 0 || d > time.Minute {
			return nil, fmt.Errorf("--quorum-hedge %q: want auto, or a duration from 0 to 1m", f.quorumHedge)
		}
		p.quorumOpts = []client.Option{client.WithQuorumHedge(d)}
	}
	if len(p.figures) == 0 {
		return nil, fmt.Errorf("--figures %q: no figure", f.figures)
	}
	for _, s := range cpqList(f.pSteps) {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || !(v >= 0 && v <= 1) {
			return nil, fmt.Errorf("--p: %q: want probabilities from 0 to 1", s)
		}
		p.ps = append(p.ps, v)
	}
	for _, s := range cpqList(f.pqSteps) {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || !(v >= 0 && v <= 1) {
			return nil, fmt.Errorf("--pq: %q: want probabilities from 0 to 1", s)
		}
		p.pqs = append(p.pqs, v)
	}
	for _, s := range cpqList(f.adSteps) {
		v, err := time.ParseDuration(s)
		if err != nil || v < 0 || v > time.Second {
			return nil, fmt.Errorf("--ad: %q: want delays from 0 to 1s (e.g. 5ms)", s)
		}
		p.ads = append(p.ads, v)
	}
	if p.figures["2"] && len(p.ps) == 0 {
		return nil, errors.New("--p: no probability for figure 2")
	}
	if p.figures["3"] && len(p.ads) == 0 {
		return nil, errors.New("--ad: no delay for figure 3")
	}
	switch {
	case !(f.rate > 0 && f.rate <= 100_000):
		return nil, fmt.Errorf("--rate %v: want more than 0, at most 100,000 ops/s", f.rate)
	case f.duration <= 0 || f.warmup < 0 || f.ctlDuration <= 0:
		return nil, fmt.Errorf("--duration %v, --warmup %v, --ctl-duration %v: want positive durations (warmup 0 or more)", f.duration, f.warmup, f.ctlDuration)
	case f.period < 100*time.Millisecond || f.period > time.Minute:
		return nil, fmt.Errorf("--period %v: want 100ms to 1m", f.period)
	case f.valueSize < 1 || f.valueSize > 1<<20:
		return nil, fmt.Errorf("--value-size %d: want 1 byte to 1 MiB", f.valueSize)
	case f.threshold < 0:
		return nil, fmt.Errorf("--threshold %v: want 0 or more", f.threshold)
	case f.changeDelay < 0 || f.changeDelay > 10*time.Second:
		return nil, fmt.Errorf("--change-delay %v: want 0 to 10s", f.changeDelay)
	case f.replicaDelay < 0 || f.replicaDelay > 10*time.Second:
		return nil, fmt.Errorf("--replica-delay %v: want 0 to 10s", f.replicaDelay)
	case !(f.replicaLoss >= 0 && f.replicaLoss < 1):
		return nil, fmt.Errorf("--replica-loss %v: want 0 or more and less than 1", f.replicaLoss)
	case f.replicaLossStall < 0 || f.replicaLossStall > 10*time.Second:
		return nil, fmt.Errorf("--replica-loss-stall %v: want 0 to 10s", f.replicaLossStall)
	case (f.replicaLoss > 0) != (f.replicaLossStall > 0):
		return nil, fmt.Errorf("--replica-loss %v and --replica-loss-stall %v: give both or neither", f.replicaLoss, f.replicaLossStall)
	case f.changeAt < 0 || f.changeAt >= f.ctlDuration:
		return nil, fmt.Errorf("--change-at %v: want 0 (half the controller run) or a time within --ctl-duration %v", f.changeAt, f.ctlDuration)
	case f.slaLatency < 0:
		return nil, fmt.Errorf("--sla-latency %v: want more than 0 (or 0: derived from figure 2)", f.slaLatency)
	case f.slaStale < 0 || f.slaStale >= 1:
		return nil, fmt.Errorf("--sla-stale %v: want more than 0 and less than 1 (or 0: derived from figure 2)", f.slaStale)
	case !(f.ctlP >= 0 && f.ctlP <= 1):
		return nil, fmt.Errorf("--ctl-p %v: want 0 to 1", f.ctlP)
	case f.ctlWindow < 1 || f.ctlWindow > 100:
		return nil, fmt.Errorf("--ctl-window %d: want 1 to 100 periods", f.ctlWindow)
	case !(f.ctlStrongerStale >= 0 && f.ctlStrongerStale < 1) && f.ctlStrongerStale != -1:
		return nil, fmt.Errorf("--ctl-stronger-stale %v: want 0 to less than 1 (or -1: from the levels' rows)", f.ctlStrongerStale)
	case !(f.ctlZ >= 0 && f.ctlZ <= 10):
		return nil, fmt.Errorf("--ctl-z %v: want 0 to 10 standard deviations", f.ctlZ)
	case !(f.slaStaleAt > 0 && f.slaStaleAt < 1):
		return nil, fmt.Errorf("--sla-stale-at %v: want more than 0 and less than 1 (strictly between the levels)", f.slaStaleAt)
	case !(f.ctlMaxStep >= 0.01 && f.ctlMaxStep <= 1):
		return nil, fmt.Errorf("--ctl-max-step %v: want 0.01 to 1", f.ctlMaxStep)
	case f.settle < 100*time.Millisecond || f.settle > time.Minute:
		return nil, fmt.Errorf("--settle %v: want 100ms to 1m", f.settle)
	}
	if derive := p.figures["ctl"] && (f.slaLatency == 0 || f.slaStale == 0); derive && !f.ctlQuorum && !p.figures["2"] {
		return nil, errors.New("the controller run needs --sla-latency and --sla-stale, or figure 2 to derive them from")
	} else if derive && f.ctlQuorum && !p.figures["q"] {
		return nil, errors.New("the controller run with --ctl-quorum needs --sla-latency and --sla-stale, or figure q to derive them from")
	}
	return p, nil
}

func cpqList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

func newCPQCmd() *cobra.Command {
	var f cpqFlags
	cmd := &cobra.Command{
		Use:   "cpq",
		Short: "Continuous partial quorums vs artificial delays, measured with Γ (CPQ §3), and the SLA controller",
		Long: `cpq reproduces the experiments of Continuous Partial Quorums (SCDM'15) §3
on a three-replica cluster in this process (fsync off), optionally behind an
emulated WAN: one client per replica, each talking to its own replica only,
offering an open-loop load at --rate operations per second in all (80% reads,
20% updates, --value-size bytes), keys from YCSB's latest distribution over
1,000 keys or hotspot over 10,000 keys (80% of operations on 20% of them).
Every key is written once first. Every operation is traced, and each row
reports the proportion of positive Γ scores (over --threshold) among the
values written in its window, and the p95 latency of reads and writes:

  figure 1   fixed levels, reads-writes: weak-weak, weak-strong, strong-weak,
             strong-strong (the paper's ONE/QUORUM pairs)
  figure 2   CPQ: strong with probability p, reads and writes, for each --p
  figure 3   artificial delays: weak reads and writes, each read delayed
             by each --ad
  q          the level in between: reads weak, quorum (the freshest of a
             majority's tentative states, client.InvokeQuorum) and strong,
             writes weak; then CPQ over weak-quorum reads (writes weak),
             quorum with each --pq probability; with figure 3, each AD
             row is set against the cheapest row of q at most as stale
  qq         the paper's ONE and QUORUM on our levels, reads and writes:
             quorum-quorum (quorum reads, and quorum writes, acknowledged
             once a majority has received the update), then CPQ over them,
             the quorum level with each --pq probability for reads and
             writes; with figure 3, each AD row is set against them too
  wa         reads weak, updates weak or at all (R = 1, W = N: an update
             acknowledged once every replica has received it, so a weak
             read that starts after it completed includes it):
             weak-all, then CPQ with an update at all with each --pq
             probability; with figure 3, AD rows are set against them too
  ctl        the controller (internal/cpqctl) tuning p to hold the SLA
             "read p95 <= --sla-latency and stale fraction <= --sla-stale"
             for --ctl-duration; at --change-at every message between
             replicas gets --change-delay more one-way latency

Without --sla-latency and --sla-stale the SLA is derived from figure 2's
rows (with --ctl-quorum, from figure q's weak and quorum reads; see
docs/benchmarks/cpq.md). Progress goes to stderr, one line per
--period; the tables to stdout; --csv writes the rows and, beside them
(-timeline.csv), the controller's timeline; --trace the whole trace of the
last distribution (check it with 'correctables check gamma').`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := f.plan()
			if err != nil {
				return err
			}
			return runCPQBench(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), p)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.dists, "dists", "latest,hotspot", "key distributions: latest (1k keys), hotspot (10k keys)")
	fl.StringVar(&f.figures, "figures", "1,2,3,ctl", "what to run: 1, 2, 3, q, qq, wa, ctl (wa: reads weak, updates weak or at all)")
	fl.StringVar(&f.pSteps, "p", "0,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,1", "figure 2's probabilities of the strong level")
	fl.StringVar(&f.pqSteps, "pq", "0.25,0.5,0.75,0.9", "figure q's probabilities of a quorum read (writes weak), figure qq's of the quorum level (reads and writes), and figure wa's of an update at all (reads weak)")
	fl.BoolVar(&f.ctlQuorum, "ctl-quorum", false, "the controller tunes p between weak and quorum reads (writes weak) rather than weak and strong operations")
	fl.StringVar(&f.adSteps, "ad", "0,5ms,10ms,15ms,20ms", "figure 3's artificial delays before weak reads")
	fl.StringVar(&f.wan, "wan", "", "emulated WAN preset (ec2-2016, pileus-2013); default loopback")
	fl.Float64Var(&f.rate, "rate", 900, "target throughput, operations per second over all clients (open loop)")
	fl.DurationVar(&f.duration, "duration", 5*time.Second, "measured window of each row")
	fl.DurationVar(&f.warmup, "warmup", 2*time.Second, "warmup before each row's window")
	fl.DurationVar(&f.period, "period", time.Second, "progress and control period")
	fl.DurationVar(&f.ctlDuration, "ctl-duration", 30*time.Second, "length of the controller run")
	fl.DurationVar(&f.changeAt, "change-at", 0, "when the latency change happens in the controller run (0: half way)")
	fl.DurationVar(&f.changeDelay, "change-delay", 5*time.Millisecond, "one-way delay added between replicas at --change-at (0: no change)")
	fl.DurationVar(&f.replicaDelay, "replica-delay", 0, "one-way delay added to every message between replicas in every row (an emulated LAN on loopback), and between a client host and the other hosts' replicas")
	fl.Float64Var(&f.replicaLoss, "replica-loss", 0, "emulated packet loss between replicas, and between a client host and the other hosts' replicas: probability that a burst of messages is held --replica-loss-stall longer, with what follows it on the link (TCP's retransmission)")
	fl.DurationVar(&f.replicaLossStall, "replica-loss-stall", 0, "with --replica-loss: how much longer a lost burst takes")
	fl.StringVar(&f.quorumHedge, "quorum-hedge", "auto", "when a quorum read asks the replicas beyond the nearest majority (client.WithQuorumHedge): a duration, 0 for every replica at once, or auto for the client's default (twice the majority's slowest RTT, at least 1ms)")
	fl.DurationVar(&f.slaLatency, "sla-latency", 0, "the SLA's read p95 bound (0: derived from figure 2)")
	fl.Float64Var(&f.slaStale, "sla-stale", 0, "the SLA's stale fraction bound (0: derived from figure 2)")
	fl.Float64Var(&f.slaStaleAt, "sla-stale-at", 0.6, "where a derived stale bound lies between the stronger level's stale fraction (0) and the weaker level's (1)")
	fl.Float64Var(&f.ctlP, "ctl-p", 0.5, "the controller's starting p")
	fl.IntVar(&f.ctlWindow, "ctl-window", 3, "periods the controller's latency and staleness measures span")
	fl.Float64Var(&f.ctlMaxStep, "ctl-max-step", 0.5, "the largest rise of p in one period (the stale step's ceiling; a latency step is at most 0.1)")
	fl.Float64Var(&f.ctlZ, "ctl-z", 1, "standard deviations of the stale count over the bound before the stale step aims at the model's p (0: any excess)")
	fl.Float64Var(&f.ctlStrongerStale, "ctl-stronger-stale", -1, "how often the stronger level's reads are stale, as a share of the weaker level's, in the controller's model (-1: the ratio of the levels' rows when the command measured them, else 0)")
	fl.DurationVar(&f.settle, "settle", time.Second, "the running Γ estimate counts a value that no read has made stale this long after its write")
	fl.DurationVar(&f.threshold, "threshold", 0, "Γ scores at or under this do not count (clock error; one clock here)")
	fl.IntVar(&f.valueSize, "value-size", 128, "value size in bytes")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the workload and the policies")
	fl.StringVar(&f.csvPath, "csv", "", "write the rows as CSV to this file")
	fl.StringVar(&f.tracePath, "trace", "", "write the last distribution's trace to this file")
	return cmd
}

// cpqRow is one printed row.
type cpqRow struct {
	figure, dist string
	res          *cpqbench.Result
}

func runCPQBench(ctx context.Context, out, progress io.Writer, p *cpqPlan) error {
	if ctx == nil {
		ctx = context.Background()
	}
	net := "loopback"
	if p.f.wan != "" {
		net = p.f.wan
	}
	if p.f.replicaDelay > 0 {
		net += fmt.Sprintf(" +%v one-way between replicas", p.f.replicaDelay)
	}
	if p.f.replicaLoss > 0 {
		net += fmt.Sprintf(", loss %g with %v stalls between replicas", p.f.replicaLoss, p.f.replicaLossStall)
	}
	if p.f.wan == "" && (p.f.replicaDelay > 0 || p.f.replicaLoss > 0) {
		net += " and from a client to other hosts' replicas"
	}
	var rows []cpqRow
	var timeline []cpqbench.Point
	var ctlSummary string
	seed := p.f.seed
	for _, dist := range p.dists {
		n := 1000
		if dist == "hotspot" {
			n = 10_000
		}
		keys, err := loadgen.NewKeyGen(dist, n)
		if err != nil {
			return err
		}
		cfg := cpqbench.Config{
			Keys: keys, Names: loadgen.KeyNames(n), ReadFraction: 0.8, ValueSize: p.f.valueSize,
			Rate: p.f.rate, Warmup: p.f.warmup, Duration: p.f.duration, Period: p.f.period,
			Threshold: p.f.threshold, Settle: p.f.settle, Progress: progress,
		}
		var specs []struct {
			figure string
			row    cpqbench.Row
		}
		add := func(fig string, r cpqbench.Row) {
			specs = append(specs, struct {
				figure string
				row    cpqbench.Row
			}{fig, r})
		}
		if p.figures["1"] {
			for _, lv := range []struct {
				name string
				r, w float64
			}{{"weak-weak", 0, 0}, {"weak-strong", 0, 1}, {"strong-weak", 1, 0}, {"strong-strong", 1, 1}} {
				add("1", cpqbench.Row{Label: lv.name, ReadP: lv.r, WriteP: lv.w})
			}
		}
		if p.figures["2"] {
			for _, x := range p.ps {
				add("2", cpqbench.Row{Label: fmt.Sprintf("p=%.2f", x), ReadP: x, WriteP: x})
			}
		}
		if p.figures["3"] {
			for _, d := range p.ads {
				add("3", cpqbench.Row{Label: "AD " + d.String(), ReadDelay: d})
			}
		}
		if p.figures["q"] {
			add("q", cpqbench.Row{Label: "reads weak"})
			add("q", cpqbench.Row{Label: "reads quorum", ReadP: 1, QuorumReads: true})
			add("q", cpqbench.Row{Label: "reads strong", ReadP: 1})
			for _, x := range p.pqs {
				add("q", cpqbench.Row{Label: fmt.Sprintf("pq=%.2f", x), ReadP: x, QuorumReads: true})
			}
		}
		if p.figures["qq"] {
			add("qq", cpqbench.Row{Label: "quorum-quorum", ReadP: 1, WriteP: 1, QuorumReads: true, QuorumWrites: true})
			for _, x := range p.pqs {
				add("qq", cpqbench.Row{Label: fmt.Sprintf("pqq=%.2f", x), ReadP: x, WriteP: x, QuorumReads: true, QuorumWrites: true})
			}
		}
		if p.figures["wa"] {
			// Reads weak (ONE); updates weak or at All (R = 1, W = N).
			add("wa", cpqbench.Row{Label: "weak-all", WriteP: 1, AllWrites: true})
			for _, x := range p.pqs {
				add("wa", cpqbench.Row{Label: fmt.Sprintf("pwa=%.2f", x), WriteP: x, AllWrites: true})
			}
		}
		fmt.Fprintf(progress, "bench cpq: %s over %d keys, %s, %.0f ops/s target, %d rows of %v (+%v warmup), %v more one-way between replicas\n",
			dist, n, net, p.f.rate, len(specs), p.f.duration, p.f.warmup, p.f.replicaDelay)
		capacity := n + int(p.f.rate*1.3*(float64(len(specs))*(p.f.duration+p.f.warmup+2*p.f.period).Seconds()+(p.f.ctlDuration+p.f.warmup+2*p.f.period).Seconds())) + 10_000
		err = withCPQCluster(ctx, p.f, false, func(c *cluster.Cluster, eps [][]string) error {
			h, err := cpqbench.DialViews(ctx, eps, capacity, p.quorumOpts...)
			if err != nil {
				return err
			}
			defer h.Close()
			fmt.Fprintf(progress, "bench cpq: loading %d keys\n", n)
			if err := h.Load(ctx, cfg.Names, cfg.ValueSize, seed); err != nil {
				return err
			}
			for _, s := range specs {
				seed++
				cfg.Seed = seed * 1000
				res, err := cpqbench.Run(ctx, h, cfg, s.row)
				if err != nil {
					return fmt.Errorf("%s %s: %w", dist, s.row.Label, err)
				}
				rows = append(rows, cpqRow{s.figure, dist, res})
				fmt.Fprintf(progress, "%s\n", rowSummary(res))
			}
			if p.f.tracePath != "" { // the controller run's replaces it, if there is one
				return writeCPQTrace(p.f.tracePath, h)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if p.figures["ctl"] {
			sla := cpqctl.SLA{Latency: p.f.slaLatency, Stale: p.f.slaStale}
			if sla.Latency == 0 || sla.Stale == 0 {
				if sla, err = deriveSLA(rows, dist, p.f.ctlQuorum, p.f.slaStaleAt, p.f.rate); err != nil {
					ctlSummary += fmt.Sprintf("controller (%s): not run: %v\n", dist, err)
					continue
				}
			}
			changeAt := p.f.changeAt
			if changeAt == 0 {
				changeAt = p.f.ctlDuration / 2
			}
			z := p.f.ctlZ
			if z == 0 {
				z = -1 // cpqctl: none
			}
			r := p.f.ctlStrongerStale
			if r < 0 {
				r = strongerStale(rows, dist, p.f.ctlQuorum)
			}
			ccfg := cfg
			ccfg.Duration = p.f.ctlDuration
			fmt.Fprintf(progress, "bench cpq: controller, SLA %v, stronger level's staleness %.2f of the weaker's, %v more one-way between replicas at %v\n", sla, r, p.f.changeDelay, changeAt)
			err = withCPQCluster(ctx, p.f, p.f.changeDelay > 0, func(c *cluster.Cluster, eps [][]string) error {
				h, err := cpqbench.DialViews(ctx, eps, capacity, p.quorumOpts...)
				if err != nil {
					return err
				}
				defer h.Close()
				if err := h.Load(ctx, cfg.Names, cfg.ValueSize, seed); err != nil {
					return err
				}
				row := cpqbench.Row{Label: "controller", QuorumReads: p.f.ctlQuorum,
					Controller: &cpqctl.Config{SLA: sla, P: p.f.ctlP, Window: p.f.ctlWindow, MaxStep: p.f.ctlMaxStep, StrongerStale: r, Z: z}}
				if p.f.changeDelay > 0 {
					row.Events = []cpqbench.Event{{At: changeAt, Name: fmt.Sprintf("+%v between replicas", p.f.changeDelay), Do: func() error {
						for id := range len(c.Servers) {
							if err := c.SetReplicationDelay(uint64(id+1), p.f.replicaDelay+p.f.changeDelay); err != nil {
								return err
							}
						}
						return nil
					}}}
				}
				seed++
				ccfg.Seed = seed * 1000
				res, err := cpqbench.Run(ctx, h, ccfg, row)
				if err != nil {
					return fmt.Errorf("%s controller: %w", dist, err)
				}
				rows = append(rows, cpqRow{"ctl", dist, res})
				timeline = res.Timeline
				ctlSummary += controllerSummary(dist, sla, changeAt, p.f.changeDelay > 0, res) + "\n"
				fmt.Fprintln(progress, rowSummary(res))
				if p.f.tracePath != "" {
					return writeCPQTrace(p.f.tracePath, h)
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
	}
	printCPQTable(out, net, p.f.rate, rows)
	if cmp := compareCPQAD(rows); cmp != "" {
		fmt.Fprint(out, "\n"+cmp)
	}
	if ctlSummary != "" {
		fmt.Fprint(out, "\n"+ctlSummary)
	}
	if p.f.csvPath != "" {
		if err := writeCPQCSV(p.f.csvPath, net, p.f.rate, rows); err != nil {
			return err
		}
		if timeline != nil {
			if err := writeTimelineCSV(strings.TrimSuffix(p.f.csvPath, ".csv")+"-timeline.csv", timeline); err != nil {
				return err
			}
		}
	}
	return nil
}

// withCPQCluster runs f on a fresh three-replica cluster and, for one
// client host per replica in its replica's region, the endpoints of every
// replica as that host reaches them. Messages between replicas get delay
// more one-way latency (and fl's loss); without a WAN, so do those between
// a client host and the other hosts' replicas; with changeable, the links
// between replicas are delayable (even at 0) for the controller's latency
// change.
func withCPQCluster(ctx context.Context, fl cpqFlags, changeable bool, f func(*cluster.Cluster, [][]string) error) error {
	wan, delay := fl.wan, fl.replicaDelay
	dir, err := os.MkdirTemp("", "correctables-cpq-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	opts := cluster.Options{Dir: dir, WAN: wan, NoSync: true, Logger: slog.New(slog.DiscardHandler),
		ReplicationLoss: fl.replicaLoss, ReplicationLossStall: fl.replicaLossStall}
	if delay > 0 || changeable || fl.replicaLoss > 0 {
		opts.ReplicationDelay = map[uint64]time.Duration{1: delay, 2: delay, 3: delay}
	}
	c, err := cluster.Start(opts)
	if err != nil {
		return err
	}
	defer c.Stop()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := c.WaitLeader(wctx); err != nil {
		return err
	}
	views := make([][]string, len(c.Servers))
	for i := range views {
		if c.Net == nil && delay == 0 && fl.replicaLoss == 0 {
			views[i] = c.Endpoints
			continue
		}
		if c.Net == nil {
			// One zone: a client host reaches the other hosts' replicas
			// through links like those between replicas (the same delay
			// and loss), its own directly.
			views[i] = append([]string(nil), c.Endpoints...)
			for j := range views[i] {
				if j == i {
					continue
				}
				px, err := netem.NewProxy(c.Endpoints[j], netem.Config{Latency: delay, Loss: fl.replicaLoss, LossStall: fl.replicaLossStall,
					Seed: fl.seed + uint64(10*i+j)})
				if err != nil {
					return err
				}
				defer px.Close()
				views[i][j] = px.Addr()
			}
			continue
		}
		from, err := c.EndpointsFrom(c.Regions[i])
		if err != nil {
			return err
		}
		views[i] = from
	}
	return f(c, views)
}

func writeCPQTrace(path string, h *cpqbench.Hosts) error {
	fh, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := gamma.WriteTrace(fh, gamma.FromRecords(h.Trace.Records(0))); err != nil {
		fh.Close()
		return err
	}
	return fh.Close()
}

// deriveSLA picks an SLA strictly between the two levels the controller
// tunes between, from the rows of dist: figure 2's at p = 0 and p = 1, or
// with quorum (--ctl-quorum) figure q's reads weak and reads quorum. The
// latency bound is 90% of the way from the weaker level's read p95 to the
// stronger's, the stale bound 60% of the way from the stronger level's
// proportion (0 for the strong level) to the weaker's (staleAt, 0.6 by
// default: --sla-stale-at). The latency bound
// sits near the stronger level's because a p95 bound anywhere lower caps p
// near 0.05 (more strong reads than that put the p95 among them), which no
// stale bound much under p = 0's allows.
func deriveSLA(rows []cpqRow, dist string, quorum bool, staleAt, rate float64) (cpqctl.SLA, error) {
	weak, strong := levelRows(rows, dist, quorum)
	if weak == nil || strong == nil {
		if quorum {
			return cpqctl.SLA{}, errors.New("deriving the SLA of --ctl-quorum needs figure q's rows reads weak and reads quorum (or give --sla-latency and --sla-stale)")
		}
		return cpqctl.SLA{}, errors.New("deriving the SLA needs figure 2's rows at p = 0 and p = 1 (or give --sla-latency and --sla-stale)")
	}
	// A level measured by a starved row (the machine did not run its
	// load) sets no bound: one at load 11 ran 198 of 800 ops/s, with a
	// read p95 of 7.4 s and no stale value, and the SLA derived from it
	// was p95 <= 3.5 s.
	for _, r := range []*cpqbench.Result{weak, strong} {
		if rate > 0 && r.OpsPerSec() < 0.9*rate {
			return cpqctl.SLA{}, fmt.Errorf("no SLA from the levels: row %s ran %.0f of %.0f ops/s offered (starved; run again on a quieter machine, or give --sla-latency and --sla-stale)", r.Row.Label, r.OpsPerSec(), rate)
		}
	}
	lw, ls := levelP95(weak), levelP95(strong)
	sw, ss := weak.Proportion(), strong.Proportion()
	if ls <= lw || sw <= ss {
		return cpqctl.SLA{}, fmt.Errorf("no SLA between the levels: read p95 %v and %v, stale %.4f and %.4f (weaker, stronger; give --sla-latency and --sla-stale)", lw, ls, sw, ss)
	}
	return cpqctl.SLA{Latency: lw + (ls-lw)*9/10, Stale: ss + (sw-ss)*staleAt}, nil
}

// levelP95 is a level's typical read p95: the median of its row's
// per-period p95s (the timeline's, at each tick of the measured window),
// or the row's p95 without a timeline.
// The row's p95 is a stall's whenever one stall takes more than 5% of the
// row's reads: at load 9-10 a weak row's came out at 17 ms and its quorum
// row's at 10 ms (their p50s 0.25 and 0.34 ms), and no SLA lay between.
func levelP95(r *cpqbench.Result) time.Duration {
	var ps []time.Duration
	for _, pt := range r.Timeline {
		if pt.T >= 0 && pt.ReadP95 > 0 {
			ps = append(ps, pt.ReadP95)
		}
	}
	if len(ps) == 0 {
		return cpqbench.P95(r.ReadLat)
	}
	slices.Sort(ps)
	return ps[len(ps)/2]
}

// strongerStale is the stronger level's stale fraction as a share of the
// weaker level's, from the rows of dist the controller tunes between (as
// deriveSLA finds them), at most 0.9; 0 without them. The controller's
// stale step uses it (quorum reads are stale about a third as often as
// weak ones; strong reads with strong writes never).
func strongerStale(rows []cpqRow, dist string, quorum bool) float64 {
	weak, strong := levelRows(rows, dist, quorum)
	if weak == nil || strong == nil || weak.Proportion() <= 0 {
		return 0
	}
	return min(strong.Proportion()/weak.Proportion(), 0.9)
}

// levelRows finds the rows of the two levels the controller tunes between:
// figure 2's at p = 0 and p = 1, or with quorum figure q's reads weak and
// reads quorum.
func levelRows(rows []cpqRow, dist string, quorum bool) (weak, strong *cpqbench.Result) {
	for _, r := range rows {
		if r.dist != dist {
			continue
		}
		x := r.res.Row
		switch {
		case quorum && r.figure == "q" && x.ReadP == 0:
			weak = r.res
		case quorum && r.figure == "q" && x.ReadP == 1 && x.QuorumReads:
			strong = r.res
		case !quorum && r.figure == "2" && x.ReadP == 0 && x.WriteP == 0:
			weak = r.res
		case !quorum && r.figure == "2" && x.ReadP == 1 && x.WriteP == 1:
			strong = r.res
		}
	}
	return weak, strong
}

func rowSummary(r *cpqbench.Result) string {
	s := fmt.Sprintf("%-12s %6.0f ops/s  strong %4.2f  quorum %4.2f  positive Γ %d/%d = %.4f (max %v)  read p95 %v  write p95 %v  errors %d  missed %d",
		r.Row.Label, r.OpsPerSec(), cpqFrac(r.Strong, r.Ops), cpqFrac(r.Quorum, r.Ops), r.Positive, r.Values, r.Proportion(), r.Gamma.Round(time.Microsecond),
		cpqbench.P95(r.ReadLat), cpqbench.P95(r.WriteLat), r.Errors, r.Missed)
	if r.All > 0 {
		s += fmt.Sprintf("  all %4.2f", cpqFrac(r.All, r.Ops))
	}
	if r.Quorum > 0 {
		s += fmt.Sprintf("  quorum reads that waited %d", r.QuorumWaits)
	}
	return s
}

func cpqFrac(a, b uint64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func cpqMS(d time.Duration) string {
	return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 2, 64)
}

func printCPQTable(w io.Writer, net string, rate float64, rows []cpqRow) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "bench cpq on %s, %.0f ops/s offered, 80%% reads, three replicas, one client each\n", net, rate)
	fmt.Fprintln(tw, "figure\tdist\trow\tops/s\tstrong\tquorum\tall\tvalues\tpositive Γ\tproportion\tmax Γ ms\tread p50 ms\tread p95 ms\twrite p50 ms\twrite p95 ms\terrors\tmissed\t")
	for _, r := range rows {
		x := r.res
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.0f\t%.2f\t%.2f\t%.2f\t%d\t%d\t%.4f\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t\n", r.figure, r.dist, x.Row.Label, x.OpsPerSec(),
			cpqFrac(x.Strong, x.Ops), cpqFrac(x.Quorum, x.Ops), cpqFrac(x.All, x.Ops), x.Values, x.Positive, x.Proportion(), cpqMS(x.Gamma), cpqMS(cpqP50(x.ReadLat)), cpqMS(cpqbench.P95(x.ReadLat)),
			cpqMS(cpqP50(x.WriteLat)), cpqMS(cpqbench.P95(x.WriteLat)), x.Errors, x.Missed)
	}
	tw.Flush()
}

// controllerSummary says whether the SLA held: over the periods after the
// controller first met it, and after the change, how long it took to meet
// it again.
func controllerSummary(dist string, sla cpqctl.SLA, changeAt time.Duration, changed bool, r *cpqbench.Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "controller (%s): SLA %v over %v; whole run: read p95 %v, stale %.4f (%d/%d)\n", dist, sla, r.Elapsed.Round(time.Second),
		cpqbench.P95(r.ReadLat), r.Proportion(), r.Positive, r.Values)
	first := -1
	for i, pt := range r.Timeline {
		if pt.T >= 0 && pt.Verdict == cpqctl.Met.String() {
			first = i
			break
		}
	}
	if first < 0 {
		fmt.Fprintf(&b, "  never met the SLA (last verdict %q)\n", r.Timeline[len(r.Timeline)-1].Verdict)
		return b.String()
	}
	within, total := 0, 0
	for _, pt := range r.Timeline[first:] {
		total++
		if pt.ReadP95 <= sla.Latency && !(pt.Stale > sla.Stale) {
			within++
		}
	}
	fmt.Fprintf(&b, "  first met at %v; from then, %d of %d periods within both bounds (windowed)\n", r.Timeline[first].T, within, total)
	if changed {
		// Re-converged: the first "met" whose window (the last three
		// periods) lies wholly after the change and after the first
		// violation the change caused, if it caused one; back within:
		// the first of the periods within both bounds that led to it.
		at, viol, rec, back := time.Duration(-1), time.Duration(-1), time.Duration(-1), time.Duration(-1)
		var pAt, pRec float64 // p in force at the change, and when met again
		recAt := -1           // the index of the period met again
		for i, pt := range r.Timeline {
			if pt.Event != "" && at < 0 {
				at, pAt = pt.T, pt.P
			}
			if at < 0 {
				continue
			}
			if viol < 0 && (pt.ReadP95 > sla.Latency || pt.Stale > sla.Stale) {
				viol = pt.T
			}
			if pt.T >= at+3*period(r) && pt.Verdict == cpqctl.Met.String() && viol >= 0 && pt.T > viol {
				rec, pRec, recAt = pt.T-at, pt.P, i
				back = rec
				for j := i - 1; j >= 0 && r.Timeline[j].T > viol; j-- {
					q := r.Timeline[j]
					if q.ReadP95 > sla.Latency || q.Stale > sla.Stale {
						break
					}
					back = q.T - at
				}
				break
			}
		}
		switch {
		case at < 0:
			fmt.Fprintf(&b, "  the change at %v did not happen\n", changeAt)
		case viol < 0:
			fmt.Fprintf(&b, "  after the change at %v: never outside the SLA\n", at.Round(100*time.Millisecond))
		case rec < 0:
			fmt.Fprintf(&b, "  after the change at %v: outside the SLA from %v later, not met again\n", at.Round(100*time.Millisecond), (viol - at).Round(100*time.Millisecond))
		default:
			fmt.Fprintf(&b, "  after the change at %v: outside the SLA from %v later; within both bounds again from %v and met (three judged periods in a row) %v after the change; p %.2f at the change, %.2f when met again\n",
				at.Round(100*time.Millisecond), (viol - at).Round(100*time.Millisecond), back.Round(100*time.Millisecond), rec.Round(100*time.Millisecond), pAt, pRec)
			// Whether it stayed: the periods within both bounds from
			// then on, and from when every period to the end was.
			within, last := 0, -1
			for j, pt := range r.Timeline[recAt:] {
				if pt.ReadP95 > sla.Latency || pt.Stale > sla.Stale {
					last = recAt + j
				} else {
					within++
				}
			}
			n := len(r.Timeline) - recAt
			switch {
			case last < 0:
				fmt.Fprintf(&b, "  from then on, within both bounds in every period (%d of %d)\n", within, n)
			case last == len(r.Timeline)-1:
				fmt.Fprintf(&b, "  from then on, within both bounds in %d of %d periods, outside in the last\n", within, n)
			default:
				fmt.Fprintf(&b, "  from then on, within both bounds in %d of %d periods, in every period from %v after the change\n",
					within, n, (r.Timeline[last+1].T - at).Round(100*time.Millisecond))
			}
		}
	}
	return b.String()
}

// period is the timeline's period.
func period(r *cpqbench.Result) time.Duration {
	if len(r.Timeline) < 2 {
		return time.Second
	}
	return r.Timeline[1].T - r.Timeline[0].T
}

func writeCPQCSV(path, net string, rate float64, rows []cpqRow) error {
	fh, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(fh)
	w.Write([]string{"figure", "dist", "net", "row", "read_p", "write_p", "read_delay_ms", "target_ops_per_s", "ops_per_s", "ops", "reads", "writes",
		"strong_frac", "quorum_frac", "values", "positive", "proportion", "max_gamma_ms", "unmatched_reads", "read_p50_ms", "read_p95_ms", "write_p50_ms", "write_p95_ms", "errors", "missed",
		"quorum_waits", "all_frac"})
	for _, r := range rows {
		x := r.res
		w.Write([]string{r.figure, r.dist, net, x.Row.Label, cpqF(x.Row.ReadP), cpqF(x.Row.WriteP), cpqMS(x.Row.ReadDelay), cpqF(rate), cpqF(x.OpsPerSec()),
			cpqU(x.Ops), cpqU(x.Reads), cpqU(x.Writes), cpqF(cpqFrac(x.Strong, x.Ops)), cpqF(cpqFrac(x.Quorum, x.Ops)), strconv.Itoa(x.Values), strconv.Itoa(x.Positive), cpqF(x.Proportion()),
			cpqMS(x.Gamma), strconv.Itoa(x.Unmatched), cpqMS(cpqP50(x.ReadLat)), cpqMS(cpqbench.P95(x.ReadLat)), cpqMS(cpqP50(x.WriteLat)),
			cpqMS(cpqbench.P95(x.WriteLat)), cpqU(x.Errors), cpqU(x.Missed), cpqU(x.QuorumWaits), cpqF(cpqFrac(x.All, x.Ops))})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		fh.Close()
		return err
	}
	return fh.Close()
}

func writeTimelineCSV(path string, pts []cpqbench.Point) error {
	fh, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(fh)
	w.Write([]string{"t_s", "p", "read_p95_ms", "stale", "ops_per_s", "verdict", "event"})
	for _, pt := range pts {
		stale := ""
		if !math.IsNaN(pt.Stale) && pt.Stale >= 0 {
			stale = cpqF(pt.Stale)
		}
		w.Write([]string{cpqF(pt.T.Seconds()), cpqF(pt.P), cpqMS(pt.ReadP95), stale, cpqF(pt.OpsPerS), pt.Verdict, pt.Event})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		fh.Close()
		return err
	}
	return fh.Close()
}

// cpqP50 is a latency histogram's median.
func cpqP50(h *hdrhistogram.Histogram) time.Duration {
	return time.Duration(h.ValueAtQuantile(50)) * time.Microsecond
}

func cpqF(x float64) string { return strconv.FormatFloat(x, 'f', 4, 64) }
func cpqU(x uint64) string  { return strconv.FormatUint(x, 10) }

// compareCPQAD sets each AD row of figure 3 with a delay against the row of
// figure q (same distribution) with the lowest read p95 among those at most
// as stale (proportion of positive Γ scores at most the AD row's): the
// paper's comparison at an equal proportion, CPQ over weak-quorum reads
// against artificial delays. The ratio is that row's read p95 over AD's;
// the paper's "severalfold" is a ratio of 1/3 or less. The ratio of the
// read p50s is printed beside it: on a busy machine a row's p95 is often a
// scheduling stall's. A row that measured no values or no reads (a starved
// row) takes no part: its proportion of 0 and latency of 0 say nothing.
func compareCPQAD(rows []cpqRow) string {
	var b strings.Builder
	measured := func(r *cpqbench.Result) bool { return r.Values > 0 && r.ReadLat.TotalCount() > 0 }
	for _, ad := range rows {
		if ad.figure != "3" || ad.res.Row.ReadDelay == 0 || !measured(ad.res) {
			continue
		}
		// An AD row that a shorter delay matches in freshness says nothing
		// about CPQ: the comparison is with the cheapest AD as fresh. AD 0
		// (no delay) does not count: where it is as fresh, the delays buy
		// nothing, and every delayed row is still compared (none then
		// favours CPQ more than the shortest).
		var cheaper *cpqbench.Result
		for _, o := range rows {
			if o.figure == "3" && o.dist == ad.dist && measured(o.res) && o.res.Row.ReadDelay > 0 && o.res.Row.ReadDelay < ad.res.Row.ReadDelay &&
				o.res.Proportion() <= ad.res.Proportion() && (cheaper == nil || o.res.Row.ReadDelay < cheaper.Row.ReadDelay) {
				cheaper = o.res
			}
		}
		var best *cpqbench.Result
		for _, q := range rows {
			// CPQ rows: figure 2's (reads and writes at the strong level
			// with probability p), figure q's over weak and quorum reads
			// (its reads strong with writes weak are no CPQ policy), and
			// figure qq's over the weak and quorum levels (the paper's
			// ONE/QUORUM pair), and figure wa's over weak reads and
			// updates weak or at All (ONE-ONE and ONE-ALL).
			cpq := q.figure == "2" || q.figure == "qq" || q.figure == "wa" || q.figure == "q" && !(q.res.Row.ReadP == 1 && !q.res.Row.QuorumReads)
			if !cpq || q.dist != ad.dist || !measured(q.res) {
				continue
			}
			if q.res.Proportion() <= ad.res.Proportion() && (best == nil || cpqbench.P95(q.res.ReadLat) < cpqbench.P95(best.ReadLat)) {
				best = q.res
			}
		}
		if b.Len() == 0 {
			b.WriteString("CPQ (figure 2, figure q's quorum reads, figure qq's quorum level, figure wa's writes at all) against AD at an equal or lower proportion of positive Γ (read p95; the paper's severalfold: ratio <= 0.33):\n")
		}
		adP95 := cpqbench.P95(ad.res.ReadLat)
		if cheaper != nil {
			fmt.Fprintf(&b, "  %s %-9s proportion %.4f, read p95 %v: %s is as fresh (%.4f) with a shorter delay; no comparison\n", ad.dist, ad.res.Row.Label,
				ad.res.Proportion(), adP95, cheaper.Row.Label, cheaper.Proportion())
			continue
		}
		if best == nil {
			fmt.Fprintf(&b, "  %s %-9s proportion %.4f, read p95 %v: no CPQ row as fresh\n", ad.dist, ad.res.Row.Label, ad.res.Proportion(), adP95)
			continue
		}
		ratio, ratio50 := math.Inf(1), math.Inf(1)
		if adP95 > 0 {
			ratio = float64(cpqbench.P95(best.ReadLat)) / float64(adP95)
		}
		if adP50 := cpqP50(ad.res.ReadLat); adP50 > 0 {
			ratio50 = float64(cpqP50(best.ReadLat)) / float64(adP50)
		}
		fmt.Fprintf(&b, "  %s %-9s proportion %.4f, read p95 %v; %s proportion %.4f, read p95 %v: ratio %.2f (p50s: %.2f)\n", ad.dist, ad.res.Row.Label,
			ad.res.Proportion(), adP95, best.Row.Label, best.Proportion(), cpqbench.P95(best.ReadLat), ratio, ratio50)
	}
	return b.String()
}
