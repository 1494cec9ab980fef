package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/correctables/correctables/internal/loadgen"
)

func TestBenchLoadBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--workload", "e"}, "unknown workload"},
		{[]string{"--keys-dist", "pareto"}, "unknown key distribution"},
		{[]string{"--keys", "0"}, "--keys"},
		{[]string{"--value-size", "-1"}, "--value-size"},
		{[]string{"--mode", "eventual"}, "unknown mode"},
		{[]string{"--modes", "strong,bogus"}, "unknown mode"},
		{[]string{"--concurrency", "0"}, "concurrency 0"},
		{[]string{"--concurrency", "16,x"}, "not an integer"},
		{[]string{"--conns", "0"}, "--conns"},
		{[]string{"--duration", "0s"}, "--duration"},
		{[]string{"--warmup", "-1s"}, "--warmup"},
		{[]string{"--peer", "redis"}, "--peer"},
		{[]string{"--etcd-auto-compaction", "10s"}, "needs --peer etcd"},
		{[]string{"--peer", "etcd", "--etcd-auto-compaction", "10ms"}, "at least 1s"},
		{[]string{"--endpoints", "127.0.0.1:1", "--in-process"}, "exclude each other"},
		{[]string{"--endpoints", " , "}, "no address"},
		{[]string{"--server-pids", "1"}, "goes with --endpoints"},
		{[]string{"--endpoints", "127.0.0.1:1", "--server-pids", "x"}, "not a process id"},
		{[]string{"--rounds", "0"}, "--rounds 0: want 1 or more"},
		{[]string{"--rounds", "-3", "--peer", "etcd"}, "--rounds -3"},
		{[]string{"extra"}, "unknown command"},
	} {
		err := runCLI(t, 10*time.Second, append([]string{"bench", "load"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("bench load %s: error %v, want one mentioning %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}

// TestBenchLoadInProcess runs a short bench against a cluster in this
// process (the three-process default needs the real binary) and checks the
// table and the CSV.
func TestBenchLoadInProcess(t *testing.T) {
	csv := filepath.Join(t.TempDir(), "rows.csv")
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	cmd := newRootCmd()
	var out, progress bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&progress)
	cmd.SetArgs([]string{"bench", "load", "--in-process", "--workload", "a", "--keys", "20", "--keys-dist", "hotspot",
		"--modes", "invoke,weak", "--concurrency", "2", "--conns", "1", "--warmup", "0s", "--duration", "300ms", "--csv", csv})
	if err := cmd.Execute(); err != nil {
		t.Fatalf("bench load: %v\n%s\n%s", err, progress.String(), out.String())
	}
	for _, want := range []string{"correctables  invoke", "correctables    weak", "in-process: CPU and RSS of the whole bench process",
		"preliminary p50", "or preliminary (weak)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if !strings.Contains(progress.String(), "preliminary p50/p99") {
		t.Errorf("progress lacks the preliminary view's latencies:\n%s", progress.String())
	}
	b, err := os.ReadFile(csv)
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"output": out.String(), "progress": progress.String(), "CSV": string(b)} {
		if m := abbreviated.FindString(text); m != "" {
			t.Errorf("%s says %q, not preliminary:\n%s", name, m, text)
		}
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "system,mode,") || !strings.HasPrefix(lines[1], "correctables,invoke,a,hotspot,2,1,") {
		t.Errorf("CSV:\n%s", b)
	}
	// The temporary data directory is gone.
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Errorf("left in TMPDIR: %v", ents)
	}
}

// --rounds below 1 fails before anything starts: no server, no data
// directory, no CSV, no output.
func TestBenchLoadBadRoundsChangesNothing(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	csv := filepath.Join(t.TempDir(), "rows.csv")
	var out, progress bytes.Buffer
	err := executeWithin(t, 10*time.Second, newRootCmd(), nil, &out, &progress,
		"bench", "load", "--peer", "etcd", "--rounds", "0", "--csv", csv, "--duration", "1s")
	if err == nil || !strings.Contains(err.Error(), "--rounds") {
		t.Fatalf("bench load --rounds 0: error %v", err)
	}
	if strings.Contains(out.String(), "starting") || strings.Contains(progress.String(), "starting") {
		t.Errorf("something started:\n%s\n%s", out.String(), progress.String())
	}
	if _, err := os.Stat(csv); !os.IsNotExist(err) {
		t.Errorf("CSV written: %v", err)
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Errorf("left in TMPDIR: %v", ents)
	}
}

// Rounds alternate the systems' order: ours first in odd rounds, etcd's
// first in even ones, round 1 of every (mode, concurrency) ours first; the
// rows come back ours first in every round.
func TestBenchLoadRoundsOrder(t *testing.T) {
	targets := []*target{{sys: &loadgen.Correctables{}}, {sys: &loadgen.Etcd{}}}
	var calls []string
	run := func(t *target, mode loadgen.Mode, conc, round int) (*loadgen.Result, error) {
		calls = append(calls, fmt.Sprintf("%s %s %d %d", t.sys.Name(), mode, conc, round))
		return &loadgen.Result{System: t.sys.Name(), Mode: mode, Concurrency: conc, Round: round}, nil
	}
	rows, err := runRounds([]loadgen.Mode{loadgen.Strong, loadgen.Weak}, []int{16, 64}, 3, targets, run)
	if err != nil {
		t.Fatal(err)
	}
	var want, wantRows []string
	for _, mode := range []string{"strong", "weak"} {
		for _, conc := range []int{16, 64} {
			for round := 1; round <= 3; round++ {
				ours, etcd := fmt.Sprintf("correctables %s %d %d", mode, conc, round), fmt.Sprintf("etcd %s %d %d", mode, conc, round)
				if round%2 == 1 {
					want = append(want, ours, etcd)
				} else {
					want = append(want, etcd, ours)
				}
				wantRows = append(wantRows, ours, etcd)
			}
		}
	}
	if !slices.Equal(calls, want) {
		t.Errorf("rows ran in the order\n%s\nwant\n%s", strings.Join(calls, "\n"), strings.Join(want, "\n"))
	}
	var got []string
	for _, r := range rows {
		got = append(got, fmt.Sprintf("%s %s %d %d", r.System, r.Mode, r.Concurrency, r.Round))
	}
	if !slices.Equal(got, wantRows) {
		t.Errorf("rows returned\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantRows, "\n"))
	}

	// Without a peer, rounds repeat our row.
	calls = nil
	if rows, err := runRounds([]loadgen.Mode{loadgen.Weak}, []int{16}, 2, targets[:1], run); err != nil || len(rows) != 2 {
		t.Fatalf("rows %v, error %v", rows, err)
	}
	if want := []string{"correctables weak 16 1", "correctables weak 16 2"}; !slices.Equal(calls, want) {
		t.Errorf("without a peer: %q, want %q", calls, want)
	}

	// The first error stops the run, with the rows that completed: here
	// our row of round 2, which runs after etcd's.
	calls = nil
	boom := errors.New("boom")
	failing := func(t *target, mode loadgen.Mode, conc, round int) (*loadgen.Result, error) {
		if round == 2 && t.sys.Name() == "correctables" {
			calls = append(calls, "fail")
			return nil, boom
		}
		return run(t, mode, conc, round)
	}
	rows, err = runRounds([]loadgen.Mode{loadgen.Weak}, []int{16, 64}, 3, targets, failing)
	if !errors.Is(err, boom) {
		t.Fatalf("error %v", err)
	}
	got = nil
	for _, r := range rows {
		got = append(got, fmt.Sprintf("%s %d", r.System, r.Round))
	}
	if want := []string{"correctables weak 16 1", "etcd weak 16 1", "etcd weak 16 2", "fail"}; !slices.Equal(calls, want) {
		t.Errorf("ran %q, want %q", calls, want)
	}
	if want := []string{"correctables 1", "etcd 1", "etcd 2"}; !slices.Equal(got, want) {
		t.Errorf("rows %q, want %q", got, want)
	}
}

// reportRow is a row of fake figures for report tests.
func reportRow(system string, mode loadgen.Mode, conc int, ops uint64, latMs int64, cpu time.Duration, rss uint64) *loadgen.Result {
	r := &loadgen.Result{System: system, Mode: mode, Workload: "w", Dist: "uniform", Concurrency: conc, Conns: 4,
		Elapsed: time.Second, Ops: ops, Prelim: loadgen.NewHistogram(), Final: loadgen.NewHistogram(),
		Bytes: loadgen.LinkBytes{Sent: ops * 100, Received: ops * 50}, BytesOK: true,
		Server: &loadgen.ServerStats{CPU: cpu, PeakRSS: rss, Procs: 3}}
	h := r.Final
	if mode == loadgen.Weak {
		h = r.Prelim
	}
	for i := range ops {
		h.RecordValue(latMs*1000 + int64(i%7)*100)
	}
	return r
}

// reportRows are one round of ours and etcd's rows, strong at 16 and weak
// at 64, with routes and errors, each row given round and rounds.
func reportRows(round, rounds int, scale float64) []*loadgen.Result {
	ours := reportRow("correctables", loadgen.Strong, 16, uint64(4000*scale), 4, 2*time.Second, 120<<20)
	ours.Routes = map[string]uint64{"127.0.0.1:1": 3000, "127.0.0.1:2": 1000}
	ours.SlowestSecond = 3900
	etcd := reportRow("etcd", loadgen.Strong, 16, 1000, 12, 3*time.Second, 80<<20)
	etcd.Errors = 2
	etcd.ErrorKinds = map[string]uint64{"timeout": 2}
	etcd.ErrorExample = map[string]string{"timeout": "context deadline exceeded"}
	weak := reportRow("correctables", loadgen.Weak, 64, uint64(9000*scale), 2, time.Second, 130<<20)
	etcdw := reportRow("etcd", loadgen.Weak, 64, 3000, 8, 2*time.Second, 90<<20)
	rows := []*loadgen.Result{ours, etcd, weak, etcdw}
	for _, r := range rows {
		r.Round, r.Rounds = round, rounds
	}
	return rows
}

// runReport runs report on rows as bench load --peer etcd with rounds
// rounds would, and returns its output (machine line blanked) and the CSV.
func runReport(t *testing.T, rows []*loadgen.Result, rounds int) (string, string) {
	t.Helper()
	csv := filepath.Join(t.TempDir(), "rows.csv")
	wl, err := loadgen.ParseWorkload("w")
	if err != nil {
		t.Fatal(err)
	}
	p := &loadPlan{f: loadFlags{keys: 1000, dist: "uniform", valueSize: 100, conns: 4, duration: 8 * time.Second,
		warmup: 2 * time.Second, csv: csv, rounds: rounds}, workload: wl}
	targets := []*target{{sys: &loadgen.Correctables{}, pids: []int{1}, note: "3 serve processes"},
		{sys: &loadgen.Etcd{}, pids: []int{2}, note: "3 etcd member processes"}}
	var out bytes.Buffer
	if err := report(&out, p, targets, rows); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "machine: ") {
			lines[i] = "machine: -"
		}
	}
	b, err := os.ReadFile(csv)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n"), string(b)
}

// With one round, the report and the progress lines are those of before
// --rounds (taken from the code before it), and the CSV only gains a last
// column, round, of 1.
func TestBenchLoadReportOneRoundUnchanged(t *testing.T) {
	rows := reportRows(1, 1, 1)
	out, csv := runReport(t, rows, 1)
	want := strings.Join([]string{
		"",
		"bench load: workload w (0% reads), 1000 keys uniform, 100-byte values, 4 conns, 8s per row after 2s warmup",
		"machine: -",
		"",
		"        system    mode  wl  conc  ops/s  preliminary p50   p99  final p50    p99  diverged  B/op  CPU s/1k ops  peak RSS MiB  errors  ops/s ratio  p99 ratio  CPU/op ratio  RSS ratio",
		"  correctables  strong   w    16   4000                -     -       4.30   4.60         -   150         0.500           120       0        4.00x      0.37x         0.17x      1.50x",
		"          etcd  strong   w    16   1000                -     -      12.30  12.61         -   150         3.000            80       2                                                 ",
		"  correctables    weak   w    64   9000             2.30  2.60          -      -         -   150         0.111           130       0        3.00x      0.30x         0.17x      1.44x",
		"          etcd    weak   w    64   3000             8.30  8.61          -      -         -   150         0.667            90       0                                                 ",
		"",
		"latencies in ms from the invocation; etcd's one view is under final (strong, invoke) or preliminary (weak);",
		"B/op: gRPC wire bytes of requests and replies per op; ratios: ours / etcd's (p99 of the mode's last view)",
		"correctables: CPU summed and peak RSS the largest over: 3 serve processes",
		"etcd: CPU summed and peak RSS the largest over: 3 etcd member processes",
		"correctables strong c=16: served by 127.0.0.1:1 75%, 127.0.0.1:2 25%; slowest second 3900 ops/s",
		"errors, etcd strong c=16: timeout 2 (e.g. context deadline exceeded)",
		"",
	}, "\n")
	if out != want {
		t.Errorf("report:\n%s\nwant:\n%s", out, want)
	}
	wantCSV := strings.Join([]string{
		"system,mode,workload,dist,concurrency,conns,seconds,ops,errors,ops_per_s,preliminary_p50_ms,preliminary_p99_ms,final_p50_ms,final_p99_ms,divergence,bytes_per_op,server_cpu_s_per_1k_ops,server_peak_rss_mib,server_note,ratio_ops_per_s,ratio_p99,ratio_cpu_per_op,ratio_rss,slowest_second_ops_per_s,served_by,round",
		`correctables,strong,w,uniform,16,4,1.000,4000,0,4000.0,,,4.303,4.603,,150.0,0.5000,120.0,,4.000,0.365,0.167,1.500,3900.0,"127.0.0.1:1 75%, 127.0.0.1:2 25%",1`,
		"etcd,strong,w,uniform,16,4,1.000,1000,2,1000.0,,,12.303,12.607,,150.0,3.0000,80.0,,,,,,,,1",
		"correctables,weak,w,uniform,64,4,1.000,9000,0,9000.0,2.301,2.601,,,,150.0,0.1111,130.0,,3.000,0.302,0.167,1.444,,,1",
		"etcd,weak,w,uniform,64,4,1.000,3000,0,3000.0,8.303,8.607,,,,150.0,0.6667,90.0,,,,,,,,1",
		"",
	}, "\n")
	if csv != wantCSV {
		t.Errorf("CSV:\n%s\nwant:\n%s", csv, wantCSV)
	}
	for i, want := range []string{
		"correctables strong c=16: 4000 ops/s, 4000 ops, 0 errors, final p50/p99 4.30/4.60 ms, 0.500 CPU s/1k ops, slowest second 3900 ops/s, served by 127.0.0.1:1 75%, 127.0.0.1:2 25% (1s)",
		"etcd strong c=16: 1000 ops/s, 1000 ops, 2 errors, final p50/p99 12.30/12.61 ms, 3.000 CPU s/1k ops (1s)",
		"correctables weak c=64: 9000 ops/s, 9000 ops, 0 errors, preliminary p50/p99 2.30/2.60 ms, 0.111 CPU s/1k ops (1s)",
		"etcd weak c=64: 3000 ops/s, 3000 ops, 0 errors, preliminary p50/p99 8.30/8.61 ms, 0.667 CPU s/1k ops (1s)",
	} {
		if got := loadgen.Describe(rows[i]); got != want {
			t.Errorf("progress line %q, want %q", got, want)
		}
	}
}

// With two rounds: a round column, each round's pair with its ratios, the
// order note, the routes and errors by round, and the summary.
func TestBenchLoadReportRounds(t *testing.T) {
	rows := append(reportRows(1, 2, 1), reportRows(2, 2, 0.5)...)
	// In the order runRounds returns them: by mode and concurrency, then
	// round.
	rows = []*loadgen.Result{rows[0], rows[1], rows[4], rows[5], rows[2], rows[3], rows[6], rows[7]}
	out, csv := runReport(t, rows, 2)
	t.Logf("report:\n%s", out)
	lines := strings.Split(out, "\n")
	var table, summary []string
	for i, l := range lines {
		if strings.Contains(l, " conc  round  ops/s ") {
			table = lines[i : i+9]
		}
		if strings.HasPrefix(l, "over the rounds, ours / etcd's") {
			summary = lines[i:]
		}
	}
	if table == nil || summary == nil {
		t.Fatalf("no round column or no summary:\n%s", out)
	}
	for i, want := range [][]string{
		{"correctables", "strong", "w", "16", "1", "4000", "4.00x"},
		{"etcd", "strong", "w", "16", "1", "1000"},
		{"correctables", "strong", "w", "16", "2", "2000", "2.00x"},
		{"etcd", "strong", "w", "16", "2", "1000"},
		{"correctables", "weak", "w", "64", "1", "9000", "3.00x"},
		{"etcd", "weak", "w", "64", "1", "3000"},
		{"correctables", "weak", "w", "64", "2", "4500", "1.50x"},
		{"etcd", "weak", "w", "64", "2", "3000"},
	} {
		f := strings.Fields(table[1+i])
		if !slices.Equal(f[:6], want[:6]) || (len(want) > 6 && f[len(f)-4] != want[6]) {
			t.Errorf("table row %q, want %q", table[1+i], want)
		}
	}
	for _, want := range []string{
		"8s per row after 2s warmup, 2 rounds\n",
		"rounds: a row's ratios are to etcd's row of the same round; odd rounds ran ours first, even rounds etcd's\n",
		"correctables strong c=16 round 1/2: served by",
		"correctables strong c=16 round 2/2: served by",
		"errors, etcd strong c=16 round 2/2: timeout 2",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if len(summary) != 5 || summary[4] != "" {
		t.Fatalf("summary:\n%s", strings.Join(summary, "\n"))
	}
	for i, want := range [][]string{
		// ops/s ratio by round, median (the mean of two), min, max.
		{"strong", "w", "16", "4.00x", "2.00x", "3.00x", "2.00x", "4.00x"},
		{"weak", "w", "64", "3.00x", "1.50x", "2.25x", "1.50x", "3.00x"},
	} {
		if f := strings.Fields(summary[2+i]); len(f) != 10 || !slices.Equal(f[:8], want) {
			t.Errorf("summary line %q, want it to begin with %q", summary[2+i], want)
		}
	}
	if n := strings.Count(csv, "\n"); n != 9 || !strings.HasSuffix(strings.Split(csv, "\n")[3], ",2") {
		t.Errorf("CSV:\n%s", csv)
	}
}

// A short in-process run of two rounds without a peer: progress lines and
// summary lines name the rounds.
func TestBenchLoadInProcessRounds(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	var out, progress bytes.Buffer
	err := executeWithin(t, time.Minute, newRootCmd(), nil, &out, &progress, "bench", "load", "--in-process",
		"--workload", "w", "--keys", "20", "--modes", "weak", "--concurrency", "2", "--conns", "1",
		"--warmup", "0s", "--duration", "200ms", "--rounds", "2")
	if err != nil {
		t.Fatalf("bench load: %v\n%s\n%s", err, progress.String(), out.String())
	}
	for _, want := range []string{"=> correctables weak c=2 round 1/2: ", "=> correctables weak c=2 round 2/2: "} {
		if !strings.Contains(progress.String(), want) {
			t.Errorf("progress lacks %q:\n%s", want, progress.String())
		}
	}
	if strings.Index(progress.String(), "round 1/2:") > strings.Index(progress.String(), "round 2/2:") {
		t.Errorf("round 2 before round 1:\n%s", progress.String())
	}
	var rows, summary int
	for _, l := range strings.Split(out.String(), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) > 5 && f[0] == "correctables" && f[1] == "weak" && f[3] == "2":
			rows++
			if f[4] != fmt.Sprint(rows) {
				t.Errorf("row %d says round %s: %q", rows, f[4], l)
			}
		case len(f) == 8 && f[0] == "weak" && f[2] == "2":
			summary++
		}
	}
	if rows != 2 || summary != 1 || !strings.Contains(out.String(), "over the rounds, correctables") ||
		strings.Contains(out.String(), "odd rounds") {
		t.Errorf("%d rows, %d summary lines:\n%s", rows, summary, out.String())
	}
}
