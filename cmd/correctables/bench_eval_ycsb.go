package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/internal/evalplot"
	"github.com/correctables/correctables/internal/loadgen"
)

type ycsbFlags struct {
	evalFlags
	workloads, dists, rates string
	step                    time.Duration
	keys, valueSize         int
}

func (f *ycsbFlags) register(cmd *cobra.Command, workloads, dists, rates string, step time.Duration) {
	f.evalFlags.register(cmd, "IRL")
	fl := cmd.Flags()
	fl.StringVar(&f.workloads, "workloads", workloads, "YCSB workloads (a: 50% reads, b: 95%, c: 100%)")
	if dists != "" {
		fl.StringVar(&f.dists, "dists", dists, "key distributions (zipfian, latest, uniform, hotspot)")
	}
	fl.StringVar(&f.rates, "rates", rates, "offered load of each of the three clients, ops/s (comma-separated steps)")
	fl.DurationVar(&f.step, "step", step, "duration of each step")
	fl.IntVar(&f.keys, "keys", 1000, "records (YCSB's default 1,000)")
	fl.IntVar(&f.valueSize, "value-size", 1000, "bytes per record (YCSB's default: 10 fields of 100 bytes)")
}

func (f *ycsbFlags) check() error {
	if f.keys < 1 || f.keys > 1_000_000 {
		return fmt.Errorf("--keys %d: want 1 to 1,000,000", f.keys)
	}
	if f.valueSize < 1 || f.valueSize > 1<<20 {
		return fmt.Errorf("--value-size %d: want 1 to 1 MiB", f.valueSize)
	}
	return checkDuration("step", f.step, 100*time.Millisecond, time.Hour)
}

// parse checks the flags and parses --workloads and --rates; oneRate:
// --rates must name exactly one rate.
func (f *ycsbFlags) parse(oneRate bool) ([]loadgen.Workload, []float64, error) {
	if err := f.check(); err != nil {
		return nil, nil, err
	}
	ws, err := parseWorkloads(f.workloads)
	if err != nil {
		return nil, nil, fmt.Errorf("--workloads: %w", err)
	}
	rates, err := parseRates(f.rates)
	if oneRate && (err != nil || len(rates) != 1) {
		return nil, nil, fmt.Errorf("--rates %q: want one rate", f.rates)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("--rates: %w", err)
	}
	return ws, rates, nil
}

func newFig6Cmd() *cobra.Command {
	var f ycsbFlags
	cmd := &cobra.Command{
		Use:   "fig6",
		Short: "Latency of preliminary and final views against throughput, YCSB A/B/C (Correctables §6.2.1, Figure 6)",
		Long: `fig6 starts three replicas behind the emulated WAN (FRK, IRL, VRG; leader in
--leader), writes --keys records, and runs three YCSB clients, one per region,
each connected to a remote replica (IRL to FRK, FRK to IRL, VRG to IRL), at
each offered load of --rates (open loop, Poisson arrivals) for --step. Each
step runs three ways: weak-only (invokeWeak, the paper's C1), strong-only
(invokeStrong, C2) and invoke (both views, CC). It plots the mean latency of
the IRL client's views against the total throughput, one figure per
workload (fig6-a.svg, ...). Each row also gives the cores this process used
during the step and the cores' worth it spent runnable but waiting for a CPU
(Linux schedstat): the replicas, the clients and the emulated links all run
in this process, so a step in which it waits for a CPU longer than it runs
is short of CPU, whatever the emulated network does. Every step starts with the leader
in --leader (an overloaded step may have cost it its term); the last column
is the leader's region after the step.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ws, rates, err := f.parse(false)
			if err != nil {
				return err
			}
			return runFig6(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), f, ws, rates)
		},
	}
	f.register(cmd, "a,b,c", "", "20,40,80,120", 4*time.Second)
	return cmd
}

var modeNames = map[loadgen.Mode]string{loadgen.Weak: "weak-only (C1)", loadgen.Strong: "strong-only (C2)", loadgen.Invoke: "invoke (CC)"}

func runFig6(ctx context.Context, out, progress io.Writer, f ycsbFlags, ws []loadgen.Workload, rates []float64) error {
	y, err := startYCSB(ctx, progress, f.evalFlags, f.keys, f.valueSize)
	if err != nil {
		return err
	}
	defer y.close()
	header := []string{"workload", "mode", "rate_per_client", "region", "throughput_total", "throughput_client",
		"preliminary_mean_ms", "preliminary_p99_ms", "final_mean_ms", "final_p99_ms", "ops", "failed", "dropped",
		"process_cpu_cores", "cpu_wait_cores", "leader_after"}
	var rows [][]string
	modes := []loadgen.Mode{loadgen.Weak, loadgen.Strong, loadgen.Invoke}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\tmode\toffered/client\tthroughput\tIRL preliminary mean\tIRL final mean\tfinal/preliminary\tfailed\tdropped\tcpu used\tcpu wait\tleader after\t")
	total := len(ws) * len(modes) * len(rates)
	n := 0
	for _, w := range ws {
		fig := evalplot.Figure{
			Name:   "fig6-" + w.Name,
			Title:  fmt.Sprintf("Figure 6: YCSB %s, client in IRL", strings.ToUpper(w.Name)),
			XLabel: "Throughput [ops/s]", YLabel: "Average latency [ms]",
			Command: commandLine(),
		}
		series := map[string]*evalplot.Series{}
		add := func(name string, dashed bool, x, yv float64) {
			s, ok := series[name]
			if !ok {
				s = &evalplot.Series{Name: name, Dashed: dashed}
				series[name] = s
			}
			s.X, s.Y = append(s.X, x), append(s.Y, yv)
		}
		var worst float64 = -1
		for _, mode := range modes {
			for _, rate := range rates {
				n++
				fmt.Fprintf(progress, "[%d/%d] fig6 workload %s, %s, %g ops/s per client, %v\n", n, total, w.Name, mode, rate, f.step)
				// An overloaded step can cost the leader its term (its
				// heartbeats queue behind the load): every step starts
				// with the leader where --leader puts it, if the cluster
				// lets it move within a minute (the row says where it was).
				if err := y.e.moveLeader(ctx, f.leader); err != nil {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					fmt.Fprintf(progress, "the leader is not back in %s: %v\n", f.leader, err)
				}
				if err := y.redial(ctx); err != nil {
					return err
				}
				if err := y.workload(w, "zipfian", f.valueSize, f.seed+uint64(n)); err != nil {
					return err
				}
				cpu0 := sampleCPU()
				stats := openLoop(ctx, y.clients, mode, rate, f.step, f.seed+uint64(n))
				cpuUsed, cpuWait := cpuCells(cpu0.cores(sampleCPU()))
				if err := ctx.Err(); err != nil {
					return err
				}
				leader := y.e.leaderRegion(ctx)
				var thr float64
				for _, s := range stats {
					thr += float64(s.done.Load()) / s.elapsed.Seconds()
				}
				var irl *stepStats
				for _, s := range stats {
					rows = append(rows, []string{w.Name, string(mode), f1(rate), s.region, f1(thr),
						f1(float64(s.done.Load()) / s.elapsed.Seconds()),
						f3(msOf(s.prelim.Mean())), f3(msOf(float64(s.prelim.ValueAtQuantile(99)))),
						f3(msOf(s.final.Mean())), f3(msOf(float64(s.final.ValueAtQuantile(99)))),
						itoa(s.done.Load()), itoa(s.failed.Load()), itoa(s.dropped.Load()), cpuUsed, cpuWait, leader})
					if s.region == "IRL" {
						irl = s
					}
				}
				var failed, dropped int64
				for _, s := range stats {
					failed += s.failed.Load()
					dropped += s.dropped.Load()
				}
				pm, fm := msOf(irl.prelim.Mean()), msOf(irl.final.Mean())
				ratio := "-"
				switch mode {
				case loadgen.Weak:
					add(modeNames[mode], false, thr, pm)
					fm = 0
				case loadgen.Strong:
					add(modeNames[mode], false, thr, fm)
					pm = 0
				default:
					add("invoke: preliminary view", true, thr, pm)
					add("invoke: final view", true, thr, fm)
					if pm > 0 {
						ratio = fmt.Sprintf("%.2fx", fm/pm)
						if worst < 0 || fm/pm < worst {
							worst = fm / pm
						}
					}
				}
				fmt.Fprintf(tw, "%s\t%s\t%g\t%.1f\t%.1fms\t%.1fms\t%s\t%d\t%d\t%s\t%s\t%s\t\n", w.Name, mode, rate, thr, pm, fm, ratio, failed, dropped, cpuUsed, cpuWait, leader)
			}
		}
		for _, name := range []string{modeNames[loadgen.Weak], modeNames[loadgen.Strong], "invoke: preliminary view", "invoke: final view"} {
			if s, ok := series[name]; ok {
				fig.Series = append(fig.Series, *s)
			}
		}
		fig.Caption = fmt.Sprintf("YCSB %s, %d records of %d bytes, zipfian; three clients (IRL→FRK, FRK→IRL, VRG→IRL), leader in %s; open loop, %v per step. "+
			"Smallest final/preliminary ratio of the IRL client's mean latencies at the same throughput: %.2fx (paper: the gap equals the client-coordinator and quorum round trips, 20 ms vs 40+ ms).",
			strings.ToUpper(w.Name), f.keys, f.valueSize, f.leader, f.step, worst)
		if err := evalplot.Draw(f.out, fig); err != nil {
			return err
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := evalplot.WriteCSV(f.out, "fig6", header, rows); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nwrote %s/fig6.csv and %s/fig6-*.svg, .png\n", f.out, f.out)
	return nil
}

func newFig7Cmd() *cobra.Command {
	var f ycsbFlags
	cmd := &cobra.Command{
		Use:   "fig7",
		Short: "Divergence of preliminary and final views, YCSB A/B, zipfian/latest (Correctables §6.2.1, Figure 7)",
		Long: `fig7 runs the set-up of fig6 with invoke only, over --keys records (1,000 as
in the paper: a small, hot data set), for each workload and key
distribution, and reports the fraction of reads whose final view differs from
the preliminary one (all three clients), and the same for writes.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ws, rates, err := f.parse(true)
			if err != nil {
				return err
			}
			var dists []string
			for _, d := range strings.Split(f.dists, ",") {
				if d = strings.TrimSpace(d); d != "" {
					if _, err := loadgen.NewKeyGen(d, f.keys); err != nil {
						return fmt.Errorf("--dists: %w", err)
					}
					dists = append(dists, d)
				}
			}
			if len(dists) == 0 {
				return fmt.Errorf("--dists %q: no distribution", f.dists)
			}
			return runFig7(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), f, ws, dists, rates[0])
		},
	}
	f.register(cmd, "a,b", "zipfian,latest", "150", 10*time.Second)
	return cmd
}

// divergence runs one invoke step and returns the reads and writes compared
// and diverged, over all clients.
func divergence(stats []*stepStats) (reads, readsDiv, writes, writesDiv int64) {
	for _, s := range stats {
		reads += s.reads.Load()
		readsDiv += s.readsDiverged.Load()
		writes += s.writes.Load()
		writesDiv += s.writesDiverged.Load()
	}
	return
}

func pct(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

func runFig7(ctx context.Context, out, progress io.Writer, f ycsbFlags, ws []loadgen.Workload, dists []string, rate float64) error {
	y, err := startYCSB(ctx, progress, f.evalFlags, f.keys, f.valueSize)
	if err != nil {
		return err
	}
	defer y.close()
	header := []string{"workload", "dist", "rate_per_client", "reads", "reads_diverged", "read_divergence_pct", "writes", "writes_diverged", "write_divergence_pct", "failed"}
	var rows [][]string
	var cats []string
	readS := evalplot.Series{Name: "reads"}
	writeS := evalplot.Series{Name: "writes"}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\tkeys\treads\tdiverged\tread divergence\twrites\tdiverged\twrite divergence\t")
	n, total := 0, len(ws)*len(dists)
	var summary []string
	for _, w := range ws {
		for _, d := range dists {
			n++
			fmt.Fprintf(progress, "[%d/%d] fig7 workload %s, %s keys, %g ops/s per client, %v\n", n, total, w.Name, d, rate, f.step)
			if err := y.redial(ctx); err != nil {
				return err
			}
			if err := y.workload(w, d, f.valueSize, f.seed+uint64(n)); err != nil {
				return err
			}
			stats := openLoop(ctx, y.clients, loadgen.Invoke, rate, f.step, f.seed+uint64(n))
			if err := ctx.Err(); err != nil {
				return err
			}
			r, rd, wr, wd := divergence(stats)
			var failed int64
			for _, s := range stats {
				failed += s.failed.Load()
			}
			rows = append(rows, []string{w.Name, d, f1(rate), itoa(r), itoa(rd), f3(pct(rd, r)), itoa(wr), itoa(wd), f3(pct(wd, wr)), itoa(failed)})
			cats = append(cats, strings.ToUpper(w.Name)+" "+d)
			readS.Y = append(readS.Y, pct(rd, r))
			writeS.Y = append(writeS.Y, pct(wd, wr))
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.2f%%\t%d\t%d\t%.2f%%\t\n", w.Name, d, r, rd, pct(rd, r), wr, wd, pct(wd, wr))
			summary = append(summary, fmt.Sprintf("%s/%s %.2f%%", strings.ToUpper(w.Name), d, pct(rd, r)))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := evalplot.WriteCSV(f.out, "fig7", header, rows); err != nil {
		return err
	}
	fig := evalplot.Figure{
		Name: "fig7", Title: "Figure 7: divergence of preliminary and final views", YLabel: "Diverging operations [%]",
		Categories: cats, Series: []evalplot.Series{readS, writeS}, Command: commandLine(),
		Caption: fmt.Sprintf("Fraction of operations whose final view differs from the preliminary one, %d records, three clients at %g ops/s each, %v per bar: reads %s (paper, Cassandra reads: up to 25%% for A/latest).",
			f.keys, rate, f.step, strings.Join(summary, ", ")),
	}
	if err := evalplot.Draw(f.out, fig); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nwrote %s/fig7.csv, .svg, .png\n", f.out)
	return nil
}

func newFig8Cmd() *cobra.Command {
	var f ycsbFlags
	cmd := &cobra.Command{
		Use:   "fig8",
		Short: "Bytes per operation: weak-only, invoke without and with confirmations (Correctables §6.2.1, Figure 8)",
		Long: `fig8 runs the set-up of fig7 (--dists, one distribution) three ways for each
workload: weak-only (invokeWeak, the paper's C1), invoke with the replicas'
confirmations turned off (client.WithoutConfirmations, CC), and invoke with
confirmations (*CC), and reports the bytes per operation between the clients
and the replicas: gRPC messages as sent on the wire, counted by the client's
gRPC stats handler (requests and replies, with gRPC's 5-byte message
header; HTTP/2 and TCP headers are not counted).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ws, rates, err := f.parse(true)
			if err != nil {
				return err
			}
			if _, err := loadgen.NewKeyGen(f.dists, f.keys); err != nil {
				return fmt.Errorf("--dists: want one distribution: %w", err)
			}
			return runFig8(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), f, ws, rates[0])
		},
	}
	f.register(cmd, "a,b", "latest", "150", 10*time.Second)
	return cmd
}

func runFig8(ctx context.Context, out, progress io.Writer, f ycsbFlags, ws []loadgen.Workload, rate float64) error {
	y, err := startYCSB(ctx, progress, f.evalFlags, f.keys, f.valueSize)
	if err != nil {
		return err
	}
	defer y.close()
	// The same clients again, asking for final views in full.
	noConf := &ycsbSetup{e: y.e, names: y.names}
	for _, c := range y.clients {
		cl, err := y.e.dial(ctx, c.region, remoteOf[c.region], client.WithoutConfirmations())
		if err != nil {
			return err
		}
		noConf.clients = append(noConf.clients, &ycsbClient{region: c.region, cl: cl})
	}
	defer func() {
		for _, c := range noConf.clients {
			c.cl.Close()
		}
	}()
	type variant struct {
		name  string
		setup *ycsbSetup
		mode  loadgen.Mode
	}
	variants := []variant{
		{"weak-only (C1)", y, loadgen.Weak},
		{"invoke, no confirmations (CC)", noConf, loadgen.Invoke},
		{"invoke, confirmations (*CC)", y, loadgen.Invoke},
	}
	header := []string{"workload", "dist", "variant", "ops", "wire_bytes", "bytes_per_op", "overhead_vs_weak_pct", "read_divergence_pct"}
	var rows [][]string
	series := make([]evalplot.Series, len(variants))
	for i, v := range variants {
		series[i].Name = v.name
	}
	var cats, summary []string
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\tvariant\tbytes/op\tvs weak-only\tread divergence\t")
	n, total := 0, len(ws)*len(variants)
	for _, w := range ws {
		cats = append(cats, "YCSB "+strings.ToUpper(w.Name))
		var base float64
		for i, v := range variants {
			n++
			fmt.Fprintf(progress, "[%d/%d] fig8 workload %s, %s keys, %s, %g ops/s per client, %v\n", n, total, w.Name, f.dists, v.name, rate, f.step)
			var opts []client.Option
			if v.setup == noConf {
				opts = append(opts, client.WithoutConfirmations())
			}
			if err := v.setup.redial(ctx, opts...); err != nil {
				return err
			}
			if err := v.setup.workload(w, f.dists, f.valueSize, f.seed+uint64(n)); err != nil {
				return err
			}
			stats := openLoop(ctx, v.setup.clients, v.mode, rate, f.step, f.seed+uint64(n))
			if err := ctx.Err(); err != nil {
				return err
			}
			var bytes, ops uint64
			for _, s := range stats {
				bytes += s.wireBytes
				ops += s.ops
			}
			per := float64(bytes) / float64(max(ops, 1))
			if i == 0 {
				base = per
			}
			over := 100 * (per - base) / base
			r, rd, _, _ := divergence(stats)
			div := "-"
			if v.mode == loadgen.Invoke {
				div = fmt.Sprintf("%.2f%%", pct(rd, r))
			}
			rows = append(rows, []string{w.Name, f.dists, v.name, fmt.Sprint(ops), fmt.Sprint(bytes), f1(per), f1(over), f3(pct(rd, r))})
			series[i].Y = append(series[i].Y, per)
			fmt.Fprintf(tw, "%s\t%s\t%.0f\t%+.1f%%\t%s\t\n", w.Name, v.name, per, over, div)
			if i > 0 {
				summary = append(summary, fmt.Sprintf("%s %s %+.1f%%", strings.ToUpper(w.Name), v.name, over))
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := evalplot.WriteCSV(f.out, "fig8", header, rows); err != nil {
		return err
	}
	fig := evalplot.Figure{
		Name: "fig8", Title: "Figure 8: bandwidth per operation", YLabel: "Bytes per operation",
		Categories: cats, Series: series, Command: commandLine(),
		Caption: fmt.Sprintf("gRPC bytes on the wire per operation, %s keys over %d records of %d bytes, three clients at %g ops/s each, %v per bar. Overhead over weak-only: %s (paper: +77%% without and +27%% with confirmations for A; +90%% and +15%% for B).",
			f.dists, f.keys, f.valueSize, rate, f.step, strings.Join(summary, "; ")),
	}
	if err := evalplot.Draw(f.out, fig); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nwrote %s/fig8.csv, .svg, .png\n", f.out)
	return nil
}
