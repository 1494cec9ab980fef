package main

import (
	"fmt"
	"time"

	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/internal/gamma"
)

// gammaWindow is bench load's Γ measurement of one row: a running estimate
// (gamma.Online) for the progress lines, and after the row the proportion of
// positive scores among the values written in the measured window, scored
// on the whole trace.
type gammaWindow struct {
	trace    *client.TraceRecorder
	online   *gamma.Online
	fed      int
	from, to int64
}

func newGammaWindow(trace *client.TraceRecorder) *gammaWindow {
	g := &gammaWindow{trace: trace, online: gamma.NewOnline(gamma.OnlineConfig{})}
	// The recent past, so that reads of values written before the row find
	// their write.
	g.fed = trace.Len()
	for _, r := range trace.Records(max(0, g.fed-50_000)) {
		g.online.Add(gamma.FromRecords([]client.TraceRecord{r})[0])
	}
	return g
}

func (g *gammaWindow) begin() { g.from = time.Now().UnixNano() }
func (g *gammaWindow) end()   { g.to = time.Now().UnixNano() }

// progress feeds what was recorded since the last call and returns the
// estimate over the values counted since it (those a read made stale, and
// those that settled fresh).
func (g *gammaWindow) progress() string {
	recs := g.trace.Records(g.fed)
	g.fed += len(recs)
	for _, op := range gamma.FromRecords(recs) {
		g.online.Add(op)
	}
	c := g.online.Collect(time.Now().UnixNano())
	if c.Values == 0 {
		return "Γ+ -"
	}
	return fmt.Sprintf("Γ+ %.4f of %d values", c.Proportion(), c.Values)
}

// summary scores the trace and reports the window's values.
func (g *gammaWindow) summary() string {
	if d := g.trace.Dropped(); d > 0 {
		return fmt.Sprintf("Γ: the trace dropped %d records (raise --gamma-capacity); not scored", d)
	}
	rep, err := gamma.Score(gamma.FromRecords(g.trace.Records(0)), gamma.Options{Scores: true})
	if err != nil {
		return fmt.Sprintf("Γ: %v", err)
	}
	var values, positive int
	var top time.Duration
	for _, s := range rep.Scores {
		if s.Value == gamma.Absent || s.WriteStart < g.from || s.WriteStart >= g.to {
			continue
		}
		values++
		if s.Score > 0 {
			positive++
		}
		top = max(top, s.Score)
	}
	prop := 0.0
	if values > 0 {
		prop = float64(positive) / float64(values)
	}
	return fmt.Sprintf("Γ: %d of %d values written in the window have a positive score (%.4f), max %v; %d reads of unknown values",
		positive, values, prop, top, rep.Unmatched)
}
