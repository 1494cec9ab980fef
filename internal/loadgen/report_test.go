package loadgen

import (
	"bytes"
	"encoding/csv"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func fakeRow(system string, mode Mode, ops uint64, latMs int64, cpu time.Duration, rss uint64) *Result {
	r := &Result{System: system, Mode: mode, Workload: "w", Dist: "uniform", Concurrency: 16, Conns: 4,
		Elapsed: time.Second, Ops: ops, Prelim: NewHistogram(), Final: NewHistogram(),
		Bytes: LinkBytes{Sent: ops * 100, Received: ops * 50}, BytesOK: true,
		Server: &ServerStats{CPU: cpu, PeakRSS: rss, Procs: 3}}
	h := r.Final
	if mode == Weak {
		h = r.Prelim
	}
	for range ops {
		h.RecordValue(latMs * 1000)
	}
	return r
}

func TestReport(t *testing.T) {
	ours := fakeRow("correctables", Strong, 1000, 10, time.Second, 100<<20)
	etcd := fakeRow("etcd", Strong, 2000, 5, time.Second, 50<<20)
	weak := fakeRow("correctables", Weak, 3000, 2, time.Second, 100<<20)
	rows := []*Result{ours, etcd, weak}
	if Peer(ours, rows) != etcd || Peer(etcd, rows) != ours || Peer(weak, rows) != nil {
		t.Fatalf("peers wrong")
	}
	q := Compare(ours, etcd)
	near := func(a, b float64) bool { return a > b*0.99 && a < b*1.01 }
	if !near(q.OpsPerSec, 0.5) || !near(q.P99, 2) || !near(q.CPUPerOp, 2) || !near(q.RSS, 2) {
		t.Errorf("ratios %+v; want 0.5, 2, 2, 2", q)
	}
	var tb bytes.Buffer
	if err := WriteTable(&tb, rows, "correctables"); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(tb.String()), "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], "ops/s ratio") || !strings.Contains(lines[1], "0.50x") ||
		!strings.Contains(lines[1], "2.00x") || strings.Contains(lines[2], "x ") {
		t.Errorf("table:\n%s", tb.String())
	}
	if !strings.Contains(lines[1], " 1.000 ") || !strings.Contains(lines[1], " 150 ") {
		t.Errorf("CPU s/1k ops 1.000 and 150 B/op expected in %q", lines[1])
	}
	var cb bytes.Buffer
	if err := WriteCSV(&cb, rows, "correctables"); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&cb).ReadAll()
	if err != nil || len(recs) != 4 || len(recs[0]) != len(CSVHeader) {
		t.Fatalf("CSV: %v %v", recs, err)
	}
	col := func(name string) int {
		i := slices.Index(CSVHeader, name)
		if i < 0 {
			t.Fatalf("no CSV column %s", name)
		}
		return i
	}
	if recs[1][col("ratio_ops_per_s")] != "0.500" || recs[2][col("ratio_ops_per_s")] != "" {
		t.Errorf("CSV ratios: %v / %v", recs[1], recs[2])
	}
	// round comes last (the columns before keep their places), 1 for a
	// single round.
	if CSVHeader[len(CSVHeader)-1] != "round" || recs[1][col("round")] != "1" || recs[3][col("round")] != "1" {
		t.Errorf("CSV round column: %v / %v", recs[0], recs[1])
	}
	// Without a peer, no ratio columns.
	tb.Reset()
	WriteTable(&tb, []*Result{weak}, "correctables")
	if strings.Contains(tb.String(), "ratio") {
		t.Errorf("ratio columns without a peer:\n%s", tb.String())
	}
}

// roundRows are three rounds of ours and etcd's weak rows at 16: ours
// 2, 4 and 3 times etcd's throughput, with p99 ratios 2, 0.5 and 0.25 and
// CPU/op ratios 0.3, 0.1 and 0.2.
func roundRows() []*Result {
	var rows []*Result
	for i, x := range []struct {
		ops        uint64
		etcdLatMs  int64
		cpuPerKOps float64
	}{{2000, 5, 0.3}, {4000, 20, 0.1}, {3000, 40, 0.2}} {
		ours := fakeRow("correctables", Weak, x.ops, 10, time.Duration(float64(x.ops)*x.cpuPerKOps)*time.Millisecond, 100<<20)
		etcd := fakeRow("etcd", Weak, 1000, x.etcdLatMs, time.Second, 50<<20)
		for _, r := range []*Result{ours, etcd} {
			r.Round, r.Rounds = i+1, 3
		}
		rows = append(rows, ours, etcd)
	}
	return rows
}

func TestSpreadOf(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want Spread
	}{
		{nil, Spread{}},
		{[]float64{0, 0}, Spread{}},
		{[]float64{3}, Spread{Median: 3, Min: 3, Max: 3, N: 1}},
		{[]float64{2, 4, 3}, Spread{Median: 3, Min: 2, Max: 4, N: 3}},
		// Even count: the mean of the two middle values; 0 is unknown.
		{[]float64{10, 0, 1, 3, 2}, Spread{Median: 2.5, Min: 1, Max: 10, N: 4}},
	} {
		if got := SpreadOf(tc.xs); got != tc.want {
			t.Errorf("SpreadOf(%v) = %+v, want %+v", tc.xs, got, tc.want)
		}
	}
}

func TestRoundSummary(t *testing.T) {
	rows := roundRows()
	if !MultiRound(rows) {
		t.Fatal("three rounds not seen as several")
	}
	// Each row's peer is the other system's row of its round.
	for i, r := range rows {
		if p := Peer(r, rows); p != rows[i^1] {
			t.Errorf("row %d (%s round %d): peer %v", i, r.System, r.Round, p)
		}
	}
	near := func(a, b float64) bool { return a > b*0.99 && a < b*1.01 }
	sums := Summarize(rows, "correctables")
	if len(sums) != 1 || sums[0].Peer != "etcd" || sums[0].Mode != Weak || sums[0].Concurrency != 16 {
		t.Fatalf("summaries: %+v", sums)
	}
	s := sums[0]
	for i, want := range [][3]float64{{2, 2, 0.3}, {4, 0.5, 0.1}, {3, 0.25, 0.2}} {
		if !near(s.OpsPerSec[i], want[0]) || !near(s.P99[i], want[1]) || !near(s.CPUPerOp[i], want[2]) {
			t.Errorf("round %d: ops/s, p99, CPU/op ratios %v %v %v, want %v", i+1, s.OpsPerSec[i], s.P99[i], s.CPUPerOp[i], want)
		}
	}
	if sp := SpreadOf(s.OpsPerSec); !near(sp.Median, 3) || !near(sp.Min, 2) || !near(sp.Max, 4) || sp.N != 3 {
		t.Errorf("ops/s ratio spread %+v, want median 3, min 2, max 4", sp)
	}

	// The table: a round column, each round's ratios on our row.
	var tb bytes.Buffer
	if err := WriteTable(&tb, rows, "correctables"); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(tb.String()), "\n")
	if len(lines) != 7 || !strings.Contains(lines[0], " conc  round  ops/s ") {
		t.Fatalf("table:\n%s", tb.String())
	}
	for i, want := range []string{"2.00x", "4.00x", "3.00x"} {
		ours, etcd := strings.Fields(lines[1+2*i]), strings.Fields(lines[2+2*i])
		round := strconv.Itoa(i + 1)
		if ours[0] != "correctables" || ours[4] != round || ours[len(ours)-4] != want || etcd[0] != "etcd" || etcd[4] != round {
			t.Errorf("round %s: rows %q, %q; want round %s and ops/s ratio %s", round, lines[1+2*i], lines[2+2*i], round, want)
		}
	}
	t.Logf("table:\n%s", tb.String())

	// The summary: one line per (mode, concurrency).
	var sb bytes.Buffer
	if err := WriteRoundSummary(&sb, rows, "correctables"); err != nil {
		t.Fatal(err)
	}
	sl := strings.Split(strings.TrimSpace(sb.String()), "\n")
	if len(sl) != 3 || !strings.Contains(sl[0], "ours / etcd's") || !strings.Contains(sl[1], "ops/s ratio by round") {
		t.Fatalf("summary:\n%s", sb.String())
	}
	want := []string{"weak", "w", "16", "2.00x", "4.00x", "3.00x", "3.00x", "2.00x", "4.00x", "0.50x", "0.20x"}
	if got := strings.Fields(sl[2]); !slices.Equal(got, want) {
		t.Errorf("summary line %q, want the fields %q", sl[2], want)
	}
	t.Logf("summary:\n%s", sb.String())

	// CSV: each row's round.
	var cb bytes.Buffer
	if err := WriteCSV(&cb, rows, "correctables"); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&cb).ReadAll()
	if err != nil || len(recs) != 7 {
		t.Fatalf("CSV: %v %v", recs, err)
	}
	for i, rec := range recs[1:] {
		if got := rec[len(rec)-1]; got != strconv.Itoa(i/2+1) {
			t.Errorf("CSV row %d: round %s, want %d", i+1, got, i/2+1)
		}
	}

	// The progress line names the round.
	if d := Describe(rows[2]); !strings.HasPrefix(d, "correctables weak c=16 round 2/3: 4000 ops/s") {
		t.Errorf("Describe: %q", d)
	}
}

// A round without etcd's row (the run stopped there) has no ratio: the
// summary says so and takes the others.
func TestRoundSummaryMissingPeer(t *testing.T) {
	rows := roundRows()[:5] // round 3 has our row only
	var sb bytes.Buffer
	if err := WriteRoundSummary(&sb, rows, "correctables"); err != nil {
		t.Fatal(err)
	}
	sl := strings.Split(strings.TrimSpace(sb.String()), "\n")
	want := []string{"weak", "w", "16", "2.00x", "4.00x", "-", "3.00x", "2.00x", "4.00x", "1.25x", "0.20x"}
	if len(sl) != 3 || !slices.Equal(strings.Fields(sl[2]), want) {
		t.Errorf("summary:\n%s\nwant the fields %q", sb.String(), want)
	}
}

// Without a peer, the summary is of our throughput.
func TestRoundSummaryWithoutPeer(t *testing.T) {
	var rows []*Result
	for i, r := range roundRows() {
		if r.System == "correctables" {
			rows = append(rows, r)
		} else if i == 1 {
			rows = append(rows, fakeRow("correctables", Strong, 500, 1, time.Second, 1)) // another mode, one round
		}
	}
	var sb bytes.Buffer
	if err := WriteRoundSummary(&sb, rows, "correctables"); err != nil {
		t.Fatal(err)
	}
	sl := strings.Split(strings.TrimSpace(sb.String()), "\n")
	if len(sl) != 4 || strings.Contains(sb.String(), "ratio") || !strings.Contains(sl[1], "ops/s by round") {
		t.Fatalf("summary:\n%s", sb.String())
	}
	for i, want := range [][]string{
		{"weak", "w", "16", "2000", "4000", "3000", "3000", "2000", "4000"},
		{"strong", "w", "16", "500", "-", "-", "500", "500", "500"},
	} {
		if got := strings.Fields(sl[2+i]); !slices.Equal(got, want) {
			t.Errorf("summary line %q, want the fields %q", sl[2+i], want)
		}
	}
}

// One round (Round and Rounds 1, as bench load sets them, or left 0): the
// table, the CSV and the progress line are those of before rounds, and
// there is no summary.
func TestSingleRoundUnchanged(t *testing.T) {
	mk := func(round int) []*Result {
		rows := []*Result{fakeRow("correctables", Strong, 1000, 10, time.Second, 100<<20), fakeRow("etcd", Strong, 2000, 5, time.Second, 50<<20)}
		for _, r := range rows {
			r.Round, r.Rounds = round, round
		}
		return rows
	}
	zero, one := mk(0), mk(1)
	if MultiRound(zero) || MultiRound(one) {
		t.Fatal("one round seen as several")
	}
	var a, b bytes.Buffer
	WriteTable(&a, zero, "correctables")
	WriteTable(&b, one, "correctables")
	if a.String() != b.String() || strings.Contains(a.String(), "round") {
		t.Errorf("table with rounds 0:\n%s\nwith rounds 1:\n%s", a.String(), b.String())
	}
	if d := Describe(one[0]); strings.Contains(d, "round") || !strings.HasPrefix(d, "correctables strong c=16: 1000 ops/s") {
		t.Errorf("Describe: %q", d)
	}
	if l := one[0].Label(); l != "correctables strong c=16" {
		t.Errorf("Label: %q", l)
	}
	a.Reset()
	if err := WriteRoundSummary(&a, one, "correctables"); err != nil || a.Len() != 0 {
		t.Errorf("summary of one round: %q %v", a.String(), err)
	}
}
