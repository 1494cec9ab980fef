package cpqctl

import (
	"errors"
	"math"
	"testing"
	"time"
)

// plant is a model of a store under CPQ: the stale fraction falls linearly
// from s0 at p = 0 to 0 at p = 1, and the p95 read latency rises from weak
// to strong as p goes from 0 to knee (past knee, more than 5% of reads are
// strong and the p95 is the strong level's).
type plant struct {
	s0           float64
	weak, strong time.Duration
	knee         float64
}

func (pl plant) observe(p float64) Observation {
	const values = 1000
	stale := pl.s0 * (1 - p)
	lat := pl.weak + time.Duration(float64(pl.strong-pl.weak)*min(1, p/pl.knee))
	return Observation{P95: lat, Values: values, Positive: int(math.Round(stale * values))}
}

func run(t *testing.T, c *Controller, pl plant, periods int) []Decision {
	t.Helper()
	out := make([]Decision, periods)
	for i := range out {
		out[i] = c.Step(pl.observe(c.P()))
	}
	return out
}

func TestConvergesIntoTheSLA(t *testing.T) {
	pl := plant{s0: 0.10, weak: time.Millisecond, strong: 20 * time.Millisecond, knee: 0.8}
	// Feasible p: stale <= 0.05 needs p >= 0.5; p95 <= 15ms needs p <= 0.59.
	for _, start := range []float64{0.01, 0.5, 1} {
		c, err := New(Config{SLA: SLA{Latency: 15 * time.Millisecond, Stale: 0.05}, P: start})
		if err != nil {
			t.Fatal(err)
		}
		ds := run(t, c, pl, 40)
		last := ds[len(ds)-1]
		if last.Verdict != Met || last.P < 0.5 || last.P > 0.59 {
			t.Fatalf("start %v: after 40 periods p = %.3f, verdict %v", start, last.P, last.Verdict)
		}
		// Once met, it stays within the bounds.
		for i, d := range ds[25:] {
			if !d.LatencyOK || !d.StaleOK {
				t.Fatalf("start %v: period %d left the SLA: %+v", start, 25+i, d)
			}
		}
	}
}

func TestFollowsAChange(t *testing.T) {
	c, err := New(Config{SLA: SLA{Latency: 15 * time.Millisecond, Stale: 0.05}, P: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	before := plant{s0: 0.10, weak: time.Millisecond, strong: 20 * time.Millisecond, knee: 0.8}
	run(t, c, before, 30)
	if c.Last().Verdict != Met {
		t.Fatalf("not met before the change: %+v", c.Last())
	}
	// Replication slows down: weak reads are stale twice as often, so p must
	// rise past 0.75; the strong level is a little faster.
	after := plant{s0: 0.20, weak: time.Millisecond, strong: 18 * time.Millisecond, knee: 1}
	ds := run(t, c, after, 30)
	for i, d := range ds {
		if d.Verdict == Met && d.P >= 0.75 {
			if i > 10 {
				t.Fatalf("re-converged after %d periods", i)
			}
			return
		}
	}
	t.Fatalf("never re-converged: %+v", ds[len(ds)-1])
}

func TestReportsInfeasible(t *testing.T) {
	pl := plant{s0: 0.10, weak: time.Millisecond, strong: 20 * time.Millisecond, knee: 0.2}
	// stale <= 0.02 needs p >= 0.8, where p95 is 20ms > 5ms.
	c, err := New(Config{SLA: SLA{Latency: 5 * time.Millisecond, Stale: 0.02}})
	if err != nil {
		t.Fatal(err)
	}
	ds := run(t, c, pl, 60)
	if d := ds[len(ds)-1]; d.Verdict != Infeasible || d.Why == "" {
		t.Fatalf("verdict %v (%q) at p = %.3f", d.Verdict, d.Why, d.P)
	}
	// A stale bound no p meets, even p = 1 (a plant whose strong level
	// still reads stale values).
	c, _ = New(Config{SLA: SLA{Latency: time.Second, Stale: 0.01}, P: 0.9})
	for range 40 {
		c.Step(Observation{P95: time.Millisecond, Values: 100, Positive: 5})
	}
	if d := c.Last(); d.Verdict != Infeasible || d.P != 1 {
		t.Fatalf("stale over the bound at p = 1: %+v", d)
	}
}

func TestHoldsWithoutMeasurements(t *testing.T) {
	c, _ := New(Config{SLA: SLA{Latency: time.Millisecond, Stale: 0.1}, P: 0.3})
	for range 5 {
		if d := c.Step(Observation{}); d.P != 0.3 || d.Verdict != Adjusting {
			t.Fatalf("no measurement moved p: %+v", d)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{SLA: SLA{Latency: time.Millisecond, Stale: 1}},
		{SLA: SLA{Latency: -1, Stale: 0.1}},
		{SLA: SLA{Latency: time.Millisecond, Stale: 0.1}, P: 1.5},
		{SLA: SLA{Latency: time.Millisecond, Stale: 0.1}, MinStep: 0.2, MaxStep: 0.1},
		{SLA: SLA{Latency: time.Millisecond, Stale: 0.1}, Window: -1},
	} {
		if _, err := New(cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("New(%+v): %v, want ErrConfig", cfg, err)
		}
	}
}

// TestFollowsAChangeWithLag runs the plant as the bench measures it: a
// value is scored a period after its write, so each period's staleness is
// that of the p of the period before. After the change, the SLA must hold
// again (Patience periods in a row within both bounds) from at most 7
// periods after the change, and the verdict say so by 9.
func TestFollowsAChangeWithLag(t *testing.T) {
	c, err := New(Config{SLA: SLA{Latency: 15 * time.Millisecond, Stale: 0.05}, P: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	before := plant{s0: 0.10, weak: time.Millisecond, strong: 20 * time.Millisecond, knee: 0.8}
	after := plant{s0: 0.20, weak: time.Millisecond, strong: 18 * time.Millisecond, knee: 1}
	prev := c.P()
	var ds []Decision
	for i := range 60 {
		pl := before
		if i >= 30 {
			pl = after
		}
		o := pl.observe(c.P())
		o.Positive = pl.observe(prev).Positive // staleness of the period before
		if i == 30 {
			o.Positive = before.observe(prev).Positive // written before the change
		}
		prev = c.P()
		ds = append(ds, c.Step(o))
	}
	if ds[29].Verdict != Met {
		t.Fatalf("not met before the change: %+v", ds[29])
	}
	within := func(d Decision) bool { return d.P >= 0.75 && d.P <= 0.82 }
	streak, met := -1, -1
	for i := 30; i < len(ds); i++ {
		if streak < 0 && within(ds[i]) {
			ok := true
			for _, d := range ds[i:] {
				ok = ok && within(d)
			}
			if ok {
				streak = i - 30
			}
		}
		if met < 0 && ds[i].Verdict == Met && within(ds[i]) {
			met = i - 30
		}
	}
	if streak < 0 || streak > 7 || met < 0 || met > 9 {
		for i, d := range ds[28:] {
			t.Logf("%d: p %.3f stale %.4f held %v %v", i-2, d.P, d.Stale, d.Held, d.Verdict)
		}
		t.Fatalf("after the change: in the feasible interval for good from period %d, met at %d; want 7 and 9 at most", streak, met)
	}
}

func TestHoldsAfterARise(t *testing.T) {
	c, _ := New(Config{SLA: SLA{Latency: time.Second, Stale: 0.05}, P: 0.2, Hold: 2})
	d := c.Step(Observation{P95: time.Millisecond, Values: 100, Positive: 20})
	// stale 0.2 at p = 0.2: the model puts 0.8*0.05 at 1 - 0.8*0.04/0.2 = 0.84,
	// more than MaxStep away.
	if math.Abs(d.P-0.5) > 1e-9 {
		t.Fatalf("p %.3f after stale 0.2 at p 0.2, want 0.5 (the step's ceiling)", d.P)
	}
	for i := range 2 {
		if d := c.Step(Observation{P95: time.Millisecond, Values: 100, Positive: 20}); !d.Held || d.P != 0.5 || c.Span() != 1 {
			t.Fatalf("period %d after the rise: %+v (span %d), want held at 0.5", i, d, c.Span())
		}
	}
	// Judged again, on a fresh window: stale 0.1 at p = 0.5 aims at
	// 1 - 0.5*0.04/0.1 = 0.8.
	if d := c.Step(Observation{P95: time.Millisecond, Values: 100, Positive: 10}); d.Held || math.Abs(d.P-0.8) > 1e-9 {
		t.Fatalf("after the hold: %+v, want p 0.8", d)
	}
	// Too few values: no judgement.
	c, _ = New(Config{SLA: SLA{Latency: time.Second, Stale: 0.05}, P: 0.2, MinValues: 100})
	if d := c.Step(Observation{P95: time.Millisecond, Values: 60, Positive: 30}); d.P != 0.2 {
		t.Fatalf("judged on 60 values: %+v", d)
	}
	if d := c.Step(Observation{P95: time.Millisecond, Values: 60, Positive: 0}); d.P <= 0.2 || c.Span() != 1 {
		t.Fatalf("120 values, 30 positive: %+v (span %d), want p up", d, c.Span())
	}
}
