package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/internal/cluster"
	"github.com/correctables/correctables/internal/loadgen"
)

// loadFlags are the flags of `bench load`.
type loadFlags struct {
	workload, dist, modes, concurrency string
	keys, valueSize, conns             int
	duration, warmup, opTimeout        time.Duration
	seed                               uint64
	csv, endpoints, serverPIDs, peer   string
	inProcess                          bool
	// etcdCompaction is the peer's periodic auto-compaction retention.
	etcdCompaction time.Duration
	// callBatching is client.WithCallBatching's n (-1: the client's
	// default).
	callBatching int
	// pipe is client.WithPipe's setting.
	pipe bool
	// CPQ mode's policy, and the Γ estimate.
	cpqP, cpqWriteP float64
	readDelay       time.Duration
	gamma           bool
	gammaCapacity   int
	// cpuProfile is where to write a CPU profile of this process.
	cpuProfile string
	// rounds is the number of rounds of every (mode, concurrency): each
	// runs every system's row, in alternating order.
	rounds int
}

// loadPlan is what the flags ask for, checked.
type loadPlan struct {
	f           loadFlags
	workload    loadgen.Workload
	keys        loadgen.KeyGen
	modes       []loadgen.Mode
	concurrency []int
	endpoints   []string
	pids        []int
	cpq         client.CPQConfig
}

func (f loadFlags) plan() (*loadPlan, error) {
	p := &loadPlan{f: f}
	var err error
	if p.workload, err = loadgen.ParseWorkload(f.workload); err != nil {
		return nil, fmt.Errorf("--workload: %w", err)
	}
	if f.keys < 1 || f.keys > 100_000_000 {
		return nil, fmt.Errorf("--keys %d: want 1 to 100,000,000", f.keys)
	}
	if p.keys, err = loadgen.NewKeyGen(f.dist, f.keys); err != nil {
		return nil, fmt.Errorf("--keys-dist: %w", err)
	}
	if f.valueSize < 0 || f.valueSize > 1<<20 {
		return nil, fmt.Errorf("--value-size %d: want 0 to 1 MiB", f.valueSize)
	}
	if p.modes, err = loadgen.ParseModes(f.modes); err != nil {
		return nil, fmt.Errorf("--mode: %w", err)
	}
	if p.concurrency, err = loadgen.ParseConcurrency(f.concurrency); err != nil {
		return nil, fmt.Errorf("--concurrency: %w", err)
	}
	if f.conns < 1 || f.conns > 1024 {
		return nil, fmt.Errorf("--conns %d: want 1 to 1024", f.conns)
	}
	if f.duration <= 0 {
		return nil, fmt.Errorf("--duration %v: want a positive duration", f.duration)
	}
	if f.warmup < 0 {
		return nil, fmt.Errorf("--warmup %v: want 0 or more", f.warmup)
	}
	if f.opTimeout <= 0 {
		return nil, fmt.Errorf("--op-timeout %v: want a positive duration", f.opTimeout)
	}
	if f.rounds < 1 {
		return nil, fmt.Errorf("--rounds %d: want 1 or more", f.rounds)
	}
	switch f.peer {
	case "", "none", "etcd":
	default:
		return nil, fmt.Errorf("--peer %q: want etcd (or none)", f.peer)
	}
	switch {
	case f.etcdCompaction < 0 || (f.etcdCompaction > 0 && f.etcdCompaction < time.Second):
		return nil, fmt.Errorf("--etcd-auto-compaction %v: want 0 (none) or at least 1s", f.etcdCompaction)
	case f.etcdCompaction > 0 && f.peer != "etcd":
		return nil, errors.New("--etcd-auto-compaction needs --peer etcd")
	}
	if f.callBatching < -1 {
		return nil, fmt.Errorf("--call-batching %d: want 0 (off) or more", f.callBatching)
	}
	p.cpq = client.CPQConfig{ReadP: f.cpqP, WriteP: f.cpqWriteP, ReadDelay: f.readDelay, Seed: f.seed}
	if _, err := client.NewCPQ(p.cpq); err != nil {
		return nil, fmt.Errorf("--cpq, --cpq-write, --read-delay: %w", err)
	}
	if f.peer == "etcd" && slices.Contains(p.modes, loadgen.CPQ) {
		return nil, errors.New("--mode cpq runs on our store only: drop --peer etcd")
	}
	if f.gammaCapacity < 1 || f.gammaCapacity > client.MaxTraceRecords {
		return nil, fmt.Errorf("--gamma-capacity %d: want 1 to %d", f.gammaCapacity, client.MaxTraceRecords)
	}
	if f.endpoints != "" {
		if f.inProcess {
			return nil, errors.New("--endpoints and --in-process exclude each other")
		}
		for _, e := range strings.Split(f.endpoints, ",") {
			if e = strings.TrimSpace(e); e != "" {
				p.endpoints = append(p.endpoints, e)
			}
		}
		if len(p.endpoints) == 0 {
			return nil, fmt.Errorf("--endpoints %q: no address", f.endpoints)
		}
	}
	if f.serverPIDs != "" {
		if f.endpoints == "" {
			return nil, errors.New("--server-pids goes with --endpoints (the bench measures the servers it starts itself)")
		}
		for _, s := range strings.Split(f.serverPIDs, ",") {
			s = strings.TrimSpace(s)
			if s == "" {
				continue
			}
			pid, err := strconv.Atoi(s)
			if err != nil || pid < 1 {
				return nil, fmt.Errorf("--server-pids: %q is not a process id", s)
			}
			if _, err := loadgen.ProcCPU(pid); err != nil {
				return nil, fmt.Errorf("--server-pids: process %d: %w", pid, err)
			}
			p.pids = append(p.pids, pid)
		}
	}
	return p, nil
}

func newLoadCmd() *cobra.Command {
	var f loadFlags
	cmd := &cobra.Command{
		Use:   "load",
		Short: "Closed-loop YCSB load through the client, optionally against etcd in the same run",
		Long: `load keeps --concurrency operations outstanding over --conns client
connections (each a client.Dial) for --duration after a --warmup, and reports
throughput, the p50 and p99 of each view, how often the final view differed
from the preliminary one, bytes per operation on the client link, and the
servers' CPU seconds per 1,000 operations and peak RSS.

Workloads (YCSB): a 50% reads/50% updates, b 95/5, c read only, w write
only, over --keys keys chosen by --keys-dist (uniform, zipfian: YCSB's
scrambled zipfian, latest, hotspot: 80% of operations on 20% of the keys),
values of --value-size bytes. Every key is written once before the first row.
--mode strong asks for the final view only (InvokeStrong), weak for the
preliminary one only (InvokeWeak), invoke for both; --mode and --concurrency
take lists and give one row per (mode, concurrency).

By default the bench starts three 'serve' processes of this binary on
loopback (fsync on, temporary data directories) and stops them at the end;
--in-process runs the cluster in this process instead (CPU and RSS are then
the whole process's, load generator included); --endpoints runs against a
running cluster (server CPU and RSS only with --server-pids).

--peer etcd also starts a three-member etcd cluster (go.etcd.io/etcd, one
process per member, fsync on) and runs every row against it too, right
after ours: strong reads are linearizable Gets, weak reads serializable
Gets, writes Puts in every mode. Our rows then show their ratios to etcd's.
etcd runs with its defaults, which keep every revision of every key; over
a long stream of large values give it --etcd-auto-compaction (as etcd's
operators do), or it fills its 2 GiB quota and refuses writes.

--rounds N runs every (mode, concurrency) N times; with --peer etcd each
round runs our row and etcd's, ours first in odd rounds and etcd's first in
even ones, so that a drift of the machine's speed weighs on both. The table
then has a row per system and round, followed by each (mode, concurrency)'s
ops/s ratio in every round and their median, min and max.

  correctables bench load --peer etcd --workload w --modes strong,weak --concurrency 16,64,256`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			if !cmd.Flags().Changed("cpq-write") {
				f.cpqWriteP = f.cpqP
			}
			p, err := f.plan()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if f.cpuProfile != "" {
				stopProfile, err := startCPUProfile(f.cpuProfile)
				if err != nil {
					return err
				}
				defer func() {
					if perr := stopProfile(); perr != nil && err == nil {
						err = perr
					}
				}()
			}
			return runLoad(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr(), p)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.workload, "workload", "a", "YCSB workload: a (50/50 read/update), b (95/5), c (read only), w (write only)")
	fl.StringVar(&f.dist, "keys-dist", "uniform", "key distribution: uniform, zipfian, latest, hotspot")
	fl.IntVar(&f.keys, "keys", 1000, "number of keys")
	fl.IntVar(&f.valueSize, "value-size", 100, "value size in bytes")
	fl.StringVar(&f.modes, "mode", "strong", "views per operation: strong (final only), weak (preliminary only), invoke (both); a comma-separated list gives one row each")
	fl.StringVar(&f.modes, "modes", "strong", "same as --mode")
	fl.StringVar(&f.concurrency, "concurrency", "16", "operations outstanding; a comma-separated list gives one row each")
	fl.IntVar(&f.conns, "conns", 4, "client connections the operations are spread over")
	fl.DurationVar(&f.duration, "duration", 10*time.Second, "measured time per row")
	fl.DurationVar(&f.warmup, "warmup", 2*time.Second, "unmeasured time before each row")
	fl.DurationVar(&f.opTimeout, "op-timeout", 10*time.Second, "an operation slower than this counts as an error")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the workload generators")
	fl.StringVar(&f.csv, "csv", "", "also write the rows as CSV to this file")
	fl.StringVar(&f.endpoints, "endpoints", "", "run against this running cluster (comma-separated host:port)")
	fl.StringVar(&f.serverPIDs, "server-pids", "", "with --endpoints: the servers' process ids, to report their CPU and RSS")
	fl.StringVar(&f.peer, "peer", "", "also run every row against a three-member etcd cluster: etcd")
	fl.BoolVar(&f.pipe, "pipe", true, "send single-view operations on one Pipe stream per replica (client.WithPipe); --pipe=false sends each as a call, batched as --call-batching says")
	fl.IntVar(&f.callBatching, "call-batching", -1, fmt.Sprintf("with --pipe=false: single-view operations of a kind in flight to a replica, each as its own call, before the next go together as one CallBatch (client.WithCallBatching; 0: never batch; default: the client's, %d, and 1 past %d outstanding)", client.DefaultBatchInflight, 2*client.DefaultBatchInflight))
	fl.DurationVar(&f.etcdCompaction, "etcd-auto-compaction", 0, "with --peer etcd: etcd's periodic auto-compaction retention, e.g. 10s (0: none, etcd's default)")
	fl.BoolVar(&f.inProcess, "in-process", false, "run our cluster in this process (internal/cluster) instead of three serve processes")
	fl.Float64Var(&f.cpqP, "cpq", 0, "mode cpq: probability that a read runs at the strong level (CPQ §1)")
	fl.Float64Var(&f.cpqWriteP, "cpq-write", -1, "mode cpq: probability that an update runs at the strong level (default: --cpq)")
	fl.DurationVar(&f.readDelay, "read-delay", 0, "mode cpq: artificial delay before every weak read (CPQ §3.2's comparator)")
	fl.BoolVar(&f.gamma, "gamma", false, "trace our operations: a running Γ estimate in the progress lines and each row's proportion of positive Γ scores")
	fl.IntVar(&f.gammaCapacity, "gamma-capacity", 2_000_000, "with --gamma: trace records kept (about 60 bytes each)")
	fl.IntVar(&f.rounds, "rounds", 1, "rounds of every (mode, concurrency): each runs our row and, with --peer, the peer's, in alternating order (ours first in odd rounds, the peer's in even ones); the report gives each round's rows and the ratios' median, min and max")
	fl.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of this process (the load generator; the cluster too with --in-process) to this file; samples carry the labels system, mode and conc (go tool pprof -tagfocus system=etcd)")
	return cmd
}

// target is a system under test and what measures its servers.
type target struct {
	sys   loadgen.System
	pids  []int
	note  string
	procs *children // nil if the bench did not start them
	trace *client.TraceRecorder
}

func runLoad(ctx context.Context, out, progress io.Writer, p *loadPlan) error {
	dir, err := os.MkdirTemp("", "correctables-bench-load-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	// Ours.
	ours := &target{}
	switch {
	case p.endpoints != nil:
		ours.sys = &loadgen.Correctables{Endpoints: p.endpoints}
		ours.pids = p.pids
		ours.note = "servers given by --server-pids"
	case p.f.inProcess:
		fmt.Fprintf(progress, "starting three replicas in this process (data in %s)\n", dir)
		c, err := cluster.Start(cluster.Options{Dir: dir + "/ours", Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			return err
		}
		defer c.Stop()
		wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		_, err = c.WaitLeader(wctx)
		cancel()
		if err != nil {
			return err
		}
		ours.sys = &loadgen.Correctables{Endpoints: c.Endpoints}
		ours.pids = []int{0}
		ours.note = "in-process: CPU and RSS of the whole bench process, load generator and etcd client included"
	default:
		fmt.Fprintf(progress, "starting three serve processes (data in %s)\n", dir)
		ours.procs = &children{}
		defer ours.procs.stop()
		eps, err := startServeProcs(ctx, ours.procs, dir)
		if err != nil {
			return fmt.Errorf("starting the replicas: %w", err)
		}
		ours.sys = &loadgen.Correctables{Endpoints: eps}
		ours.pids = ours.procs.pids()
		ours.note = "3 serve processes"
	}
	if cs, ok := ours.sys.(*loadgen.Correctables); ok {
		cs.CPQ = p.cpq
		if p.f.callBatching >= 0 {
			cs.Options = append(cs.Options, client.WithCallBatching(p.f.callBatching))
		}
		if !p.f.pipe {
			cs.Options = append(cs.Options, client.WithPipe(false))
		}
		if p.f.gamma {
			ours.trace = client.NewTraceRecorder(p.f.gammaCapacity)
			cs.Trace = ours.trace
		}
	}
	targets := []*target{ours}
	if p.f.peer == "etcd" {
		fmt.Fprintf(progress, "starting three etcd members\n")
		et := &target{procs: &children{}, note: "3 etcd member processes"}
		defer et.procs.stop()
		eps, err := startEtcdProcs(ctx, et.procs, dir, p.f.etcdCompaction)
		if err != nil {
			return fmt.Errorf("starting etcd: %w", err)
		}
		et.sys = &loadgen.Etcd{Endpoints: eps}
		et.pids = et.procs.pids()
		targets = append(targets, et)
	}

	for _, t := range targets {
		fmt.Fprintf(progress, "%s: writing %d keys of %d bytes\n", t.sys.Name(), p.f.keys, p.f.valueSize)
		if err := loadgen.Load(ctx, t.sys, p.f.keys, p.f.valueSize, 32, p.f.seed); err != nil {
			return err
		}
	}

	rows, runErr := runRounds(p.modes, p.concurrency, p.f.rounds, targets,
		func(t *target, mode loadgen.Mode, conc, round int) (*loadgen.Result, error) {
			return runRow(ctx, progress, p, t, mode, conc, round)
		})
	if len(rows) > 0 {
		if err := report(out, p, targets, rows); err != nil && runErr == nil {
			runErr = err
		}
	}
	return runErr
}

// runRounds runs rounds rounds of every (mode, concurrency), in the order
// of modes then concurrencies; each round runs every target's row, in the
// order of targets in odd rounds and in the reverse order in even ones
// (roundOrder), so that a drift of the machine's speed over a pair's rounds
// weighs on every system alike. The rows come back in (mode, concurrency,
// round, targets) order whatever order they ran in; on run's first error,
// runRounds returns the rows that completed with it.
func runRounds(modes []loadgen.Mode, concs []int, rounds int, targets []*target,
	run func(t *target, mode loadgen.Mode, conc, round int) (*loadgen.Result, error)) ([]*loadgen.Result, error) {
	var rows []*loadgen.Result
	for _, mode := range modes {
		for _, conc := range concs {
			for round := 1; round <= rounds; round++ {
				got := map[*target]*loadgen.Result{}
				var err error
				for _, t := range roundOrder(targets, round) {
					var res *loadgen.Result
					if res, err = run(t, mode, conc, round); err != nil {
						break
					}
					got[t] = res
				}
				for _, t := range targets {
					if res := got[t]; res != nil {
						rows = append(rows, res)
					}
				}
				if err != nil {
					return rows, err
				}
			}
		}
	}
	return rows, nil
}

// roundOrder is the order the targets run in round round (from 1): theirs
// in odd rounds, reversed in even ones.
func roundOrder(targets []*target, round int) []*target {
	if round%2 == 1 {
		return targets
	}
	rev := slices.Clone(targets)
	slices.Reverse(rev)
	return rev
}

func runRow(ctx context.Context, progress io.Writer, p *loadPlan, t *target, mode loadgen.Mode, conc, round int) (*loadgen.Result, error) {
	procs := &loadgen.Procs{PIDs: t.pids, Note: t.note}
	label := fmt.Sprintf("%s %s c=%d", t.sys.Name(), mode, conc)
	if p.f.rounds > 1 {
		label += fmt.Sprintf(" round %d/%d", round, p.f.rounds)
	}
	cfg := loadgen.Config{
		Workload: p.workload, Keys: p.keys, Dist: p.f.dist, ValueSize: p.f.valueSize, Mode: mode,
		Concurrency: conc, Conns: p.f.conns, Warmup: p.f.warmup, Duration: p.f.duration,
		Seed: p.f.seed, OpTimeout: p.f.opTimeout, Progress: progress,
		Label: "[" + label + "]",
	}
	if len(t.pids) > 0 {
		cfg.OnStart, cfg.OnEnd = procs.Begin, func() {}
	}
	self := &selfCPU{}
	cfg.OnStart, cfg.OnEnd = self.wrap(cfg.OnStart, cfg.OnEnd)
	var gw *gammaWindow
	if t.trace != nil {
		gw = newGammaWindow(t.trace)
		cfg.ProgressExtra = gw.progress
		start, end := cfg.OnStart, cfg.OnEnd
		cfg.OnStart = func() {
			gw.begin()
			if start != nil {
				start()
			}
		}
		cfg.OnEnd = func() {
			if end != nil {
				end()
			}
			gw.end()
		}
	}
	var res *loadgen.Result
	var err error
	labels := pprof.Labels("system", t.sys.Name(), "mode", string(mode), "conc", strconv.Itoa(conc))
	pprof.Do(ctx, labels, func(ctx context.Context) {
		res, err = loadgen.Run(ctx, t.sys, cfg)
	})
	if err != nil {
		if t.procs != nil {
			if ex := t.procs.exited(); ex != "" {
				err = fmt.Errorf("%w\n%s", err, ex)
			}
		}
		return nil, err
	}
	if len(t.pids) > 0 {
		res.Server = procs.End()
	}
	res.Round, res.Rounds = round, p.f.rounds
	fmt.Fprintln(progress, "=>", loadgen.Describe(res))
	if c, ok := self.perOp(res.Ops); ok {
		fmt.Fprintf(progress, "   load generator (this process): %.3f CPU ms/op\n", c)
	}
	if gw != nil {
		fmt.Fprintln(progress, "  ", gw.summary())
	}
	if res.Errors > 0 {
		fmt.Fprintln(progress, "   errors:", res.ErrorSummary())
	}
	if t.procs != nil {
		if ex := t.procs.exited(); ex != "" {
			return res, fmt.Errorf("a server process exited during the row:\n%s", ex)
		}
	}
	return res, nil
}

func report(out io.Writer, p *loadPlan, targets []*target, rows []*loadgen.Result) error {
	rev := ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				rev = "; commit " + s.Value
			}
		}
	}
	rounds := ""
	if p.f.rounds > 1 {
		rounds = fmt.Sprintf(", %d rounds", p.f.rounds)
	}
	fmt.Fprintf(out, "\nbench load: workload %s (%.0f%% reads), %d keys %s, %d-byte values, %d conns, %v per row after %v warmup%s\n",
		p.workload.Name, p.workload.ReadFraction*100, p.f.keys, p.f.dist, p.f.valueSize, p.f.conns, p.f.duration, p.f.warmup, rounds)
	fmt.Fprintf(out, "machine: %d CPUs (%s), %s%s\n\n", runtime.NumCPU(), cpuModel(), runtime.Version(), rev)
	if err := loadgen.WriteTable(out, rows, "correctables"); err != nil {
		return err
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, "latencies in ms from the invocation; etcd's one view is under final (strong, invoke) or preliminary (weak);")
	fmt.Fprintln(out, "B/op: gRPC wire bytes of requests and replies per op; ratios: ours / etcd's (p99 of the mode's last view)")
	if p.f.rounds > 1 && len(targets) > 1 {
		fmt.Fprintf(out, "rounds: a row's ratios are to %s's row of the same round; odd rounds ran ours first, even rounds %s's\n",
			targets[1].sys.Name(), targets[1].sys.Name())
	}
	for _, t := range targets {
		switch {
		case len(t.pids) == 0:
			fmt.Fprintf(out, "%s: server CPU and RSS not measured (give --server-pids)\n", t.sys.Name())
		default:
			fmt.Fprintf(out, "%s: CPU summed and peak RSS the largest over: %s\n", t.sys.Name(), t.note)
		}
		if t.procs != nil {
			if n, first := t.procs.logProblems(); n > 0 {
				fmt.Fprintf(out, "%s: %d warning or error lines in the server logs, first:\n  %s\n", t.sys.Name(), n, strings.Join(first, "\n  "))
			}
		}
	}
	for _, r := range rows {
		if rt := loadgen.RouteShares(r); rt != "" {
			fmt.Fprintf(out, "%s: served by %s; slowest second %.0f ops/s\n", r.Label(), rt, r.SlowestSecond)
		}
	}
	for _, r := range rows {
		if r.Errors > 0 {
			fmt.Fprintf(out, "errors, %s: %s\n", r.Label(), r.ErrorSummary())
		}
	}
	if loadgen.MultiRound(rows) {
		fmt.Fprintln(out)
		if err := loadgen.WriteRoundSummary(out, rows, "correctables"); err != nil {
			return err
		}
	}
	if p.f.csv != "" {
		f, err := os.Create(p.f.csv)
		if err != nil {
			return fmt.Errorf("--csv: %w", err)
		}
		if err := loadgen.WriteCSV(f, rows, "correctables"); err != nil {
			f.Close()
			return fmt.Errorf("--csv: %w", err)
		}
		if err := f.Close(); err != nil {
			return fmt.Errorf("--csv: %w", err)
		}
	}
	return nil
}

// cpuModel is the first "model name" of /proc/cpuinfo.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

// newEtcdMemberCmd is the hidden `bench etcd-member`: one etcd member, run
// by `bench load --peer etcd` as a child process so that its CPU and memory
// are measured per process like our replicas'.
func newEtcdMemberCmd() *cobra.Command {
	var m loadgen.EtcdMember
	cmd := &cobra.Command{
		Use:    "etcd-member",
		Short:  "Run one etcd member (for bench load --peer etcd)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			e, err := loadgen.StartEtcdMember(m)
			if err != nil {
				return err
			}
			defer e.Close()
			select {
			case <-e.Server.ReadyNotify():
				fmt.Fprintf(cmd.OutOrStdout(), "etcd member %s ready on %s\n", m.Name, m.ClientURL)
			case err := <-e.Err():
				return err
			case <-ctx.Done():
				return nil
			}
			select {
			case err := <-e.Err():
				return err
			case <-ctx.Done():
				return nil
			}
		},
	}
	f := cmd.Flags()
	f.StringVar(&m.Name, "name", "", "member name")
	f.StringVar(&m.Dir, "data-dir", "", "data directory")
	f.StringVar(&m.ClientURL, "client-url", "", "client URL (http://127.0.0.1:PORT)")
	f.StringVar(&m.PeerURL, "peer-url", "", "peer URL (http://127.0.0.1:PORT)")
	f.StringVar(&m.InitialCluster, "initial-cluster", "", "every member as NAME=PEER-URL, comma-separated")
	f.StringVar(&m.LogLevel, "log-level", "error", "etcd log level")
	f.DurationVar(&m.AutoCompaction, "auto-compaction", 0, "periodic auto-compaction with this retention (0: none, etcd's default)")
	return cmd
}

// startCPUProfile starts writing a CPU profile of this process to path; the
// returned function stops it and closes the file.
func startCPUProfile(path string) (func() error, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		return nil
	}, nil
}

// selfCPU measures this process's CPU time over a row's measured window:
// the load generator's cost (and the cluster's with --in-process).
type selfCPU struct {
	start, used time.Duration
	ok          bool
}

// wrap returns start and end hooks that also read this process's CPU time.
func (s *selfCPU) wrap(start, end func()) (func(), func()) {
	return func() {
			if start != nil {
				start()
			}
			s.start, s.ok = procSelfCPU()
		}, func() {
			if end != nil {
				end()
			}
			if now, ok := procSelfCPU(); ok && s.ok {
				s.used = now - s.start
				return
			}
			s.ok = false
		}
}

// perOp is the CPU milliseconds per operation of the window.
func (s *selfCPU) perOp(ops uint64) (float64, bool) {
	if !s.ok || s.used <= 0 || ops == 0 {
		return 0, false
	}
	return float64(s.used.Microseconds()) / 1000 / float64(ops), true
}

func procSelfCPU() (time.Duration, bool) {
	d, err := loadgen.ProcCPU(os.Getpid())
	return d, err == nil
}
