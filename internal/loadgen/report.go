package loadgen

import (
	"encoding/csv"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Ratios compare a row with the peer system's row of the same workload,
// mode and concurrency: ours divided by theirs.
type Ratios struct {
	OpsPerSec, P99, CPUPerOp, RSS float64 // 0: unknown
}

// Peer returns the row of rows that r is compared with: the same workload,
// distribution, mode, concurrency and round on another system (nil if
// none).
func Peer(r *Result, rows []*Result) *Result {
	for _, o := range rows {
		if o != r && o.System != r.System && o.Workload == r.Workload && o.Dist == r.Dist &&
			o.Mode == r.Mode && o.Concurrency == r.Concurrency && o.round() == r.round() {
			return o
		}
	}
	return nil
}

// round is the row's round, 1 for a single one.
func (r *Result) round() int { return max(r.Round, 1) }

// Label names the row in progress and report lines: system, mode and
// concurrency ("correctables weak c=256"), and its round when there are
// several ("correctables weak c=256 round 2/3").
func (r *Result) Label() string {
	s := fmt.Sprintf("%s %s c=%d", r.System, r.Mode, r.Concurrency)
	if r.Rounds > 1 {
		s += fmt.Sprintf(" round %d/%d", r.round(), r.Rounds)
	}
	return s
}

// MultiRound reports whether rows come from more than one round: reports
// then show each row's round, and WriteRoundSummary summarizes them.
func MultiRound(rows []*Result) bool {
	for _, r := range rows {
		if r.Rounds > 1 || r.Round > 1 {
			return true
		}
	}
	return false
}

// Compare returns r's ratios to p.
func Compare(r, p *Result) Ratios {
	var q Ratios
	div := func(a, b float64) float64 {
		if a <= 0 || b <= 0 {
			return 0
		}
		return a / b
	}
	q.OpsPerSec = div(r.OpsPerSec(), p.OpsPerSec())
	if r.Ops > 0 && p.Ops > 0 {
		q.P99 = div(float64(r.LastView().ValueAtQuantile(99)), float64(p.LastView().ValueAtQuantile(99)))
	}
	a, ok1 := r.CPUPer1kOps()
	b, ok2 := p.CPUPer1kOps()
	if ok1 && ok2 {
		q.CPUPerOp = div(a, b)
	}
	if r.Server != nil && p.Server != nil {
		q.RSS = div(float64(r.Server.PeakRSS), float64(p.Server.PeakRSS))
	}
	return q
}

func ms(h interface{ ValueAtQuantile(float64) int64 }, n int64, q float64) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", float64(h.ValueAtQuantile(q))/1000)
}

func ratio(x float64) string {
	if x == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", x)
}

// WriteTable writes the rows as an aligned table: throughput, the p50 and
// p99 of each view (ms), divergence, bytes per op on the client link,
// server CPU seconds per 1,000 ops and peak RSS (MiB), errors; rows of the
// system named ours that have a peer row also get their ratios to it
// (ours / peer: above 1 means more throughput, but more latency, CPU or
// memory).
func WriteTable(w io.Writer, rows []*Result, ours string) error {
	peers := false
	for _, r := range rows {
		peers = peers || (r.System == ours && Peer(r, rows) != nil)
	}
	rounds := MultiRound(rows)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "system\tmode\twl\tconc\t"
	if rounds {
		head += "round\t"
	}
	head += "ops/s\tpreliminary p50\tp99\tfinal p50\tp99\tdiverged\tB/op\tCPU s/1k ops\tpeak RSS MiB\terrors\t"
	if peers {
		head += "ops/s ratio\tp99 ratio\tCPU/op ratio\tRSS ratio\t"
	}
	fmt.Fprintln(tw, head)
	for _, r := range rows {
		div := "-"
		if d, ok := r.DivergenceRate(); ok {
			div = fmt.Sprintf("%.2f%%", d*100)
		}
		bpo := "-"
		if b, ok := r.BytesPerOp(); ok {
			bpo = fmt.Sprintf("%.0f", b)
		}
		cpu, rss := "-", "-"
		if c, ok := r.CPUPer1kOps(); ok {
			cpu = fmt.Sprintf("%.3f", c)
		}
		if r.Server != nil && r.Server.PeakRSS > 0 {
			rss = fmt.Sprintf("%.0f", float64(r.Server.PeakRSS)/(1<<20))
		}
		vs := ""
		if peers {
			vs = "\t\t\t\t"
		}
		if p := Peer(r, rows); r.System == ours && p != nil {
			q := Compare(r, p)
			vs = fmt.Sprintf("%s\t%s\t%s\t%s\t", ratio(q.OpsPerSec), ratio(q.P99), ratio(q.CPUPerOp), ratio(q.RSS))
		}
		round := ""
		if rounds {
			round = strconv.Itoa(r.round()) + "\t"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n",
			r.System, r.Mode, r.Workload, r.Concurrency, round, r.OpsPerSec(),
			ms(r.Prelim, r.Prelim.TotalCount(), 50), ms(r.Prelim, r.Prelim.TotalCount(), 99),
			ms(r.Final, r.Final.TotalCount(), 50), ms(r.Final, r.Final.TotalCount(), 99),
			div, bpo, cpu, rss, r.Errors, vs)
	}
	return tw.Flush()
}

// CSVHeader is the header row of WriteCSV. round, the row's round (1 for a
// single one), comes last so that the columns before it keep their places.
var CSVHeader = []string{"system", "mode", "workload", "dist", "concurrency", "conns", "seconds", "ops", "errors",
	"ops_per_s", "preliminary_p50_ms", "preliminary_p99_ms", "final_p50_ms", "final_p99_ms", "divergence",
	"bytes_per_op", "server_cpu_s_per_1k_ops", "server_peak_rss_mib", "server_note",
	"ratio_ops_per_s", "ratio_p99", "ratio_cpu_per_op", "ratio_rss", "slowest_second_ops_per_s", "served_by", "round"}

// WriteCSV writes the rows as CSV with CSVHeader; empty cells are unknown.
func WriteCSV(w io.Writer, rows []*Result, ours string) error {
	cw := csv.NewWriter(w)
	cw.Write(CSVHeader)
	f := func(x float64, ok bool, prec int) string {
		if !ok {
			return ""
		}
		return strconv.FormatFloat(x, 'f', prec, 64)
	}
	lat := func(r *Result, final bool, q float64) string {
		h := r.Prelim
		if final {
			h = r.Final
		}
		if h.TotalCount() == 0 {
			return ""
		}
		return f(float64(h.ValueAtQuantile(q))/1000, true, 3)
	}
	for _, r := range rows {
		d, dok := r.DivergenceRate()
		b, bok := r.BytesPerOp()
		c, cok := r.CPUPer1kOps()
		var rss, note string
		if r.Server != nil {
			rss = f(float64(r.Server.PeakRSS)/(1<<20), r.Server.PeakRSS > 0, 1)
			note = r.Server.Note
		}
		var q Ratios
		if p := Peer(r, rows); r.System == ours && p != nil {
			q = Compare(r, p)
		}
		cw.Write([]string{r.System, string(r.Mode), r.Workload, r.Dist, strconv.Itoa(r.Concurrency), strconv.Itoa(r.Conns),
			f(r.Elapsed.Seconds(), true, 3), strconv.FormatUint(r.Ops, 10), strconv.FormatUint(r.Errors, 10),
			f(r.OpsPerSec(), true, 1), lat(r, false, 50), lat(r, false, 99), lat(r, true, 50), lat(r, true, 99),
			f(d, dok, 5), f(b, bok, 1), f(c, cok, 4), rss, note,
			f(q.OpsPerSec, q.OpsPerSec > 0, 3), f(q.P99, q.P99 > 0, 3), f(q.CPUPerOp, q.CPUPerOp > 0, 3), f(q.RSS, q.RSS > 0, 3),
			f(r.SlowestSecond, r.SlowestSecond > 0, 1), RouteShares(r), strconv.Itoa(r.round())})
	}
	cw.Flush()
	return cw.Error()
}

// Describe is a one-line summary of a row, for the progress output.
func Describe(r *Result) string {
	s := fmt.Sprintf("%s: %.0f ops/s, %d ops, %d errors", r.Label(), r.OpsPerSec(), r.Ops, r.Errors)
	if r.Prelim.TotalCount() > 0 {
		s += fmt.Sprintf(", preliminary p50/p99 %s/%s ms", ms(r.Prelim, 1, 50), ms(r.Prelim, 1, 99))
	}
	if r.Final.TotalCount() > 0 {
		s += fmt.Sprintf(", final p50/p99 %s/%s ms", ms(r.Final, 1, 50), ms(r.Final, 1, 99))
	}
	if c, ok := r.CPUPer1kOps(); ok {
		s += fmt.Sprintf(", %.3f CPU s/1k ops", c)
	}
	if r.SlowestSecond > 0 || r.Elapsed >= 2*time.Second {
		s += fmt.Sprintf(", slowest second %.0f ops/s", r.SlowestSecond)
	}
	if rt := RouteShares(r); rt != "" {
		s += ", served by " + rt
	}
	return s + " (" + r.Elapsed.Round(time.Millisecond).String() + ")"
}

// RouteShares describes which endpoints served the row's operations
// ("127.0.0.1:7101 80%, ..."), most first; "" if unknown.
func RouteShares(r *Result) string {
	var total uint64
	type ep struct {
		addr string
		n    uint64
	}
	var eps []ep
	for a, n := range r.Routes {
		total += n
		eps = append(eps, ep{a, n})
	}
	if total == 0 {
		return ""
	}
	sort.Slice(eps, func(i, j int) bool { return eps[i].n > eps[j].n || eps[i].n == eps[j].n && eps[i].addr < eps[j].addr })
	var parts []string
	for _, e := range eps {
		parts = append(parts, fmt.Sprintf("%s %.0f%%", e.addr, float64(e.n)*100/float64(total)))
	}
	return strings.Join(parts, ", ")
}

// RoundSummary is one (workload, distribution, mode, concurrency)'s rows
// over the rounds: index i of each slice is round i+1, 0 where unknown (no
// row or no peer row in that round, or a figure not measured).
type RoundSummary struct {
	Workload, Dist string
	Mode           Mode
	Concurrency    int
	// Peer is the system ours is compared with, "" if ours has no peer
	// row in any round: OpsPerSec then holds our throughput, and P99 and
	// CPUPerOp are nil.
	Peer string
	// OpsPerSec, P99 and CPUPerOp are each round's ratios, ours / the
	// peer's (Compare).
	OpsPerSec, P99, CPUPerOp []float64
}

// Summarize gathers the rows of the system named ours by workload,
// distribution, mode and concurrency (in the order of their first row),
// each with its figures in every round up to the largest round of rows.
func Summarize(rows []*Result, ours string) []RoundSummary {
	n := 1
	for _, r := range rows {
		n = max(n, r.Rounds, r.round())
	}
	type key struct {
		wl, dist string
		mode     Mode
		conc     int
	}
	var out []RoundSummary
	at := map[key]int{}
	for _, r := range rows {
		if r.System != ours {
			continue
		}
		k := key{r.Workload, r.Dist, r.Mode, r.Concurrency}
		i, ok := at[k]
		if !ok {
			i = len(out)
			at[k] = i
			out = append(out, RoundSummary{Workload: r.Workload, Dist: r.Dist, Mode: r.Mode, Concurrency: r.Concurrency,
				OpsPerSec: make([]float64, n)})
		}
		if p := Peer(r, rows); p != nil && out[i].Peer == "" {
			out[i].Peer = p.System
			out[i].P99, out[i].CPUPerOp = make([]float64, n), make([]float64, n)
		}
	}
	for _, r := range rows {
		if r.System != ours {
			continue
		}
		s := &out[at[key{r.Workload, r.Dist, r.Mode, r.Concurrency}]]
		j := r.round() - 1
		if s.Peer == "" {
			s.OpsPerSec[j] = r.OpsPerSec()
			continue
		}
		if p := Peer(r, rows); p != nil {
			q := Compare(r, p)
			s.OpsPerSec[j], s.P99[j], s.CPUPerOp[j] = q.OpsPerSec, q.P99, q.CPUPerOp
		}
	}
	return out
}

// Spread is the median, minimum and maximum of the known (positive) values
// of a list; N counts them, 0 if none is known. The median of an even
// count is the mean of the two middle values.
type Spread struct {
	Median, Min, Max float64
	N                int
}

// SpreadOf is the Spread of xs, ignoring zeros (unknown values).
func SpreadOf(xs []float64) Spread {
	var v []float64
	for _, x := range xs {
		if x > 0 {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return Spread{}
	}
	sort.Float64s(v)
	s := Spread{Min: v[0], Max: v[len(v)-1], N: len(v)}
	if m := len(v) / 2; len(v)%2 == 1 {
		s.Median = v[m]
	} else {
		s.Median = (v[m-1] + v[m]) / 2
	}
	return s
}

// WriteRoundSummary writes, when rows come from more than one round
// (MultiRound; nothing otherwise), one line per Summarize entry: the ops/s
// ratio ours / peer in each round, their median, minimum and maximum, and
// the medians of the p99 and CPU/op ratios; without a peer, our ops/s in
// each round, their median, minimum and maximum.
func WriteRoundSummary(w io.Writer, rows []*Result, ours string) error {
	if !MultiRound(rows) {
		return nil
	}
	sums := Summarize(rows, ours)
	if len(sums) == 0 {
		return nil
	}
	peer := ""
	for _, s := range sums {
		if s.Peer != "" {
			peer = s.Peer
			break
		}
	}
	if peer != "" {
		fmt.Fprintf(w, "over the rounds, ours / %s's (median, min and max of the rounds' ratios; - unknown):\n", peer)
	} else {
		fmt.Fprintf(w, "over the rounds, %s (median, min and max of the rounds' ops/s; - unknown):\n", ours)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	if peer != "" {
		fmt.Fprintln(tw, "mode\twl\tconc\tops/s ratio by round\tmedian\tmin\tmax\tp99 ratio median\tCPU/op ratio median\t")
	} else {
		fmt.Fprintln(tw, "mode\twl\tconc\tops/s by round\tmedian\tmin\tmax\t")
	}
	ops := func(x float64) string {
		if x == 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f", x)
	}
	for _, s := range sums {
		cell, xs := ratio, s.OpsPerSec
		switch {
		case s.Peer == "" && peer != "":
			// No peer row to compare with in any round: no ratio.
			xs = make([]float64, len(xs))
		case s.Peer == "":
			cell = ops
		}
		each := make([]string, len(xs))
		for i, x := range xs {
			each[i] = cell(x)
		}
		sp := SpreadOf(xs)
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t", s.Mode, s.Workload, s.Concurrency, strings.Join(each, " "),
			cell(sp.Median), cell(sp.Min), cell(sp.Max))
		switch {
		case s.Peer != "":
			fmt.Fprintf(tw, "%s\t%s\t", ratio(SpreadOf(s.P99).Median), ratio(SpreadOf(s.CPUPerOp).Median))
		case peer != "":
			fmt.Fprint(tw, "-\t-\t")
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}
