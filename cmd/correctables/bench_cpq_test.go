package main

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/correctables/correctables/internal/cpqbench"
	"github.com/correctables/correctables/internal/cpqctl"
	"github.com/correctables/correctables/internal/loadgen"
)

func TestBenchCPQBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--dists", "zipfian"}, "--dists"},
		{[]string{"--figures", "4"}, "--figures"},
		{[]string{"--p", "1.5"}, "--p"},
		{[]string{"--pq", "-0.1"}, "--pq"},
		{[]string{"--ad", "-5ms"}, "--ad"},
		{[]string{"--rate", "0"}, "--rate"},
		{[]string{"--duration", "0s"}, "--duration"},
		{[]string{"--period", "1ms"}, "--period"},
		{[]string{"--sla-stale", "1"}, "--sla-stale"},
		{[]string{"--figures", "ctl"}, "--sla-latency"},
		{[]string{"--figures", "2,ctl", "--ctl-quorum"}, "figure q"},
		{[]string{"--change-at", "1h"}, "--change-at"},
		{[]string{"--replica-delay", "-1ms"}, "--replica-delay"},
		{[]string{"--replica-loss", "1.5", "--replica-loss-stall", "1ms"}, "--replica-loss 1.5"},
		{[]string{"--replica-loss", "0.01"}, "give both or neither"},
		{[]string{"--replica-loss-stall", "10ms"}, "give both or neither"},
		{[]string{"--sla-stale-at", "1"}, "--sla-stale-at"},
		{[]string{"--ctl-z", "-1"}, "--ctl-z"},
		{[]string{"--ctl-stronger-stale", "1"}, "--ctl-stronger-stale"},
	} {
		cmd := newCPQCmd()
		cmd.SetArgs(tc.args)
		cmd.SetOut(&strings.Builder{})
		cmd.SetErr(&strings.Builder{})
		err := cmd.Execute()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("bench cpq %s: %v, want an error naming %s", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}

func TestControllerSummaryReconvergence(t *testing.T) {
	sla := cpqctl.SLA{Latency: 100 * time.Millisecond, Stale: 0.02}
	r := &cpqbench.Result{ReadLat: loadgen.NewHistogram(), WriteLat: loadgen.NewHistogram()}
	// Within until the change at 10 s, violated at 13-15 s, met again from 18 s.
	for i := range 25 {
		pt := cpqbench.Point{T: time.Duration(i) * time.Second, P: 0.4, ReadP95: 50 * time.Millisecond, Stale: 0.01, Verdict: "met"}
		if i >= 14 {
			pt.P = 0.7
		}
		if i == 10 {
			pt.Event = "+10ms"
		}
		if i >= 13 && i <= 15 {
			pt.Stale, pt.Verdict = 0.05, "adjusting"
		}
		if i >= 16 && i < 18 {
			pt.Verdict = "adjusting"
		}
		r.Timeline = append(r.Timeline, pt)
	}
	got := controllerSummary("latest", sla, 10*time.Second, true, r)
	if !strings.Contains(got, "outside the SLA from 3s later; within both bounds again from 6s and met (three judged periods in a row) 8s after the change; p 0.40 at the change, 0.70 when met again") ||
		!strings.Contains(got, "from then on, within both bounds in every period (7 of 7)") {
		t.Fatalf("summary:\n%s", got)
	}
	// Outside again at 21 s: within from 12 s after the change on.
	r.Timeline[21].Stale = 0.05
	got = controllerSummary("latest", sla, 10*time.Second, true, r)
	if !strings.Contains(got, "from then on, within both bounds in 6 of 7 periods, in every period from 12s after the change") {
		t.Fatalf("summary with a violation after met:\n%s", got)
	}
}

// A row of q that measured nothing (starved: no values, no reads) must not
// win the comparison with its proportion of 0 and read p95 of 0.
func TestCompareCPQADSkipsUnmeasuredRows(t *testing.T) {
	row := func(label string, readP float64, delay time.Duration, values, positive int, readMS ...int64) *cpqbench.Result {
		r := &cpqbench.Result{Row: cpqbench.Row{Label: label, ReadP: readP, QuorumReads: readP > 0, ReadDelay: delay},
			ReadLat: loadgen.NewHistogram(), WriteLat: loadgen.NewHistogram(), Values: values, Positive: positive}
		for _, ms := range readMS {
			if err := r.ReadLat.RecordValue(ms * 1000); err != nil {
				t.Fatal(err)
			}
		}
		return r
	}
	rows := []cpqRow{
		{"3", "latest", row("AD 5ms", 0, 5*time.Millisecond, 200, 0, 6, 6, 6, 30)},
		{"q", "latest", row("reads quorum", 1, 0, 200, 0, 1, 1, 1, 9)},
		{"q", "latest", row("pq=0.90", 0.9, 0, 0, 0)},
	}
	got := compareCPQAD(rows)
	if strings.Contains(got, "pq=0.90") || !strings.Contains(got, "reads quorum proportion 0.0000") || !strings.Contains(got, "ratio 0.30 (p50s: 0.17)") {
		t.Fatalf("comparison:\n%s", got)
	}
	rows[1].res.Values = 0
	if got := compareCPQAD(rows); !strings.Contains(got, "no CPQ row as fresh") {
		t.Fatalf("comparison without a measured row of q:\n%s", got)
	}
	// Figure 2's rows are CPQ rows too: p = 1 (strong reads and writes) is
	// as fresh as AD 5ms and twice as fast at the p95 here (the quorum
	// row is still unmeasured).
	rows = append(rows, cpqRow{"2", "latest", row("p=1.00", 1, 0, 200, 0, 2, 2, 2, 15)})
	if got := compareCPQAD(rows); !strings.Contains(got, "p=1.00 proportion 0.0000") || !strings.Contains(got, "ratio 0.50") {
		t.Fatalf("comparison with a row of figure 2:\n%s", got)
	}
	// A longer delay that is no fresher than a shorter one is not compared:
	// AD 50ms would show a flattering ratio where AD 5ms is as fresh.
	rows = append(rows, cpqRow{"3", "latest", row("AD 50ms", 0, 50*time.Millisecond, 200, 0, 51, 51, 51, 52)})
	got = compareCPQAD(rows)
	if !strings.Contains(got, "AD 50ms   proportion 0.0000, read p95 52.031ms: AD 5ms is as fresh (0.0000) with a shorter delay; no comparison") ||
		!strings.Contains(got, "ratio 0.50") {
		t.Fatalf("comparison with a dominated AD row:\n%s", got)
	}
	// Figure qq's rows (the quorum level for reads and writes) are CPQ rows.
	rows = append(rows, cpqRow{"qq", "latest", row("quorum-quorum", 1, 0, 200, 0, 1, 1, 1, 3)})
	if got := compareCPQAD(rows); !strings.Contains(got, "quorum-quorum proportion 0.0000") || !strings.Contains(got, "ratio 0.10") {
		t.Fatalf("comparison with a row of figure qq:\n%s", got)
	}
	rows = rows[:len(rows)-1]
	// So are figure wa's (reads weak, updates at all).
	rows = append(rows, cpqRow{"wa", "latest", row("weak-all", 0, 0, 200, 0, 1, 1, 1, 2)})
	if got := compareCPQAD(rows); !strings.Contains(got, "weak-all proportion 0.0000") || !strings.Contains(got, "ratio 0.07") {
		t.Fatalf("comparison with a row of figure wa:\n%s", got)
	}
	rows = rows[:len(rows)-1]
	// AD 0 as fresh as every delayed row does not silence the comparison.
	rows = append(rows, cpqRow{"3", "latest", row("AD 0s", 0, 0, 200, 0, 1, 1, 1, 2)})
	if got := compareCPQAD(rows); !strings.Contains(got, "AD 5ms    proportion 0.0000, read p95 30.015ms; p=1.00") {
		t.Fatalf("comparison with an AD 0 row as fresh:\n%s", got)
	}
}

// The SLA is derived from the levels the controller tunes between: figure
// 2's p = 0 and p = 1, or with --ctl-quorum figure q's weak and quorum reads
// (whose staleness is not 0: the stale bound lies between the two).
func TestDeriveSLABetweenTheLevels(t *testing.T) {
	row := func(r cpqbench.Row, values, positive int, readMS int64) *cpqbench.Result {
		res := &cpqbench.Result{Row: r, ReadLat: loadgen.NewHistogram(), WriteLat: loadgen.NewHistogram(), Values: values, Positive: positive}
		for range 100 {
			if err := res.ReadLat.RecordValue(readMS * 1000); err != nil {
				t.Fatal(err)
			}
		}
		return res
	}
	rows := []cpqRow{
		{"2", "latest", row(cpqbench.Row{Label: "p=0.00"}, 1000, 40, 2)},
		{"2", "latest", row(cpqbench.Row{Label: "p=1.00", ReadP: 1, WriteP: 1}, 1000, 0, 102)},
		{"q", "latest", row(cpqbench.Row{Label: "reads weak"}, 1000, 30, 2)},
		{"q", "latest", row(cpqbench.Row{Label: "reads quorum", ReadP: 1, QuorumReads: true}, 1000, 10, 12)},
		{"q", "latest", row(cpqbench.Row{Label: "reads strong", ReadP: 1}, 1000, 0, 52)},
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	within := func(d, want time.Duration) bool { return d >= want-want/100 && d <= want+want/100 }
	sla, err := deriveSLA(rows, "latest", false, 0.6, 0)
	if err != nil || !within(sla.Latency, 92*time.Millisecond) || !near(sla.Stale, 0.024) {
		t.Fatalf("weak-strong SLA %v, %v; want p95 <= 92ms, stale <= 0.024", sla, err)
	}
	sla, err = deriveSLA(rows, "latest", true, 0.6, 0)
	if err != nil || !within(sla.Latency, 11*time.Millisecond) || !near(sla.Stale, 0.022) {
		t.Fatalf("weak-quorum SLA %v, %v; want p95 <= 11ms, stale <= 0.022", sla, err)
	}
	// --sla-stale-at 0.8: 80% of the way from the quorum reads' 0.01 to
	// the weak reads' 0.03.
	if sla, err := deriveSLA(rows, "latest", true, 0.8, 0); err != nil || !near(sla.Stale, 0.026) {
		t.Fatalf("weak-quorum SLA at 0.8: %v, %v; want stale <= 0.026", sla, err)
	}
	// A level's p95 is the median of its row's windowed p95s: a stall in
	// two of five windows does not move it.
	rows[2].res.Timeline = []cpqbench.Point{{T: -time.Second, ReadP95: time.Second}, {T: 0, ReadP95: 2 * time.Millisecond},
		{T: time.Second, ReadP95: 900 * time.Millisecond}, {T: 2 * time.Second, ReadP95: 3 * time.Millisecond},
		{T: 3 * time.Second, ReadP95: 800 * time.Millisecond}, {T: 4 * time.Second, ReadP95: time.Millisecond}}
	if got := levelP95(rows[2].res); got != 3*time.Millisecond {
		t.Fatalf("weak reads' level p95 %v, want the median 3ms", got)
	}
	if sla, err := deriveSLA(rows, "latest", true, 0.6, 0); err != nil || !within(sla.Latency, 11100*time.Microsecond) {
		t.Fatalf("weak-quorum SLA with the weak row's timeline: %v, %v; want p95 <= 11.1ms", sla, err)
	}
	rows[2].res.Timeline = nil
	// A starved row (no Elapsed here: 0 ops/s) derives nothing.
	if _, err := deriveSLA(rows, "latest", true, 0.6, 800); err == nil || !strings.Contains(err.Error(), "starved") {
		t.Fatalf("SLA from starved rows: %v", err)
	}
	for _, r := range rows {
		r.res.Ops, r.res.Elapsed = 8000, 10*time.Second
	}
	if _, err := deriveSLA(rows, "latest", true, 0.6, 800); err != nil {
		t.Fatalf("SLA from rows at 800 ops/s: %v", err)
	}
	// The controller's model of the stronger level's staleness: a third
	// of the weak reads' for quorum reads, none for strong ones.
	if r := strongerStale(rows, "latest", true); !near(r, 1.0/3) {
		t.Fatalf("quorum reads' staleness %v of weak reads', want 1/3", r)
	}
	if r := strongerStale(rows, "latest", false); r != 0 {
		t.Fatalf("strong level's staleness %v of the weak level's, want 0", r)
	}
	if r := strongerStale(rows[2:], "latest", false); r != 0 {
		t.Fatalf("without figure 2's rows: %v, want 0", r)
	}
	rows[3].res.Positive = 30 // quorum reads as stale as weak ones: nothing between
	if r := strongerStale(rows, "latest", true); !near(r, 0.9) {
		t.Fatalf("quorum reads as stale as weak ones: %v, want the cap 0.9", r)
	}
	if _, err := deriveSLA(rows, "latest", true, 0.6, 0); err == nil || !strings.Contains(err.Error(), "no SLA between") {
		t.Fatalf("weak-quorum SLA without a gap: %v", err)
	}
	if _, err := deriveSLA(rows[2:], "latest", false, 0.6, 0); err == nil {
		t.Fatal("weak-strong SLA without figure 2's rows: no error")
	}
}
