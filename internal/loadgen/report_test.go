package loadgen

import (
	"bytes"
	"encoding/csv"
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
	if recs[1][len(CSVHeader)-6] != "0.500" || recs[2][len(CSVHeader)-6] != "" {
		t.Errorf("CSV ratios: %v / %v", recs[1], recs[2])
	}
	// Without a peer, no ratio columns.
	tb.Reset()
	WriteTable(&tb, []*Result{weak}, "correctables")
	if strings.Contains(tb.String(), "ratio") {
		t.Errorf("ratio columns without a peer:\n%s", tb.String())
	}
}
