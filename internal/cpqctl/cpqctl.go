// Package cpqctl is a client-side controller that tunes the probability p of
// a continuous partial quorum policy (client.CPQ) to hold a
// consistency-latency SLA: "the p95 latency of reads is at most L and the
// stale fraction at most X". Continuous Partial Quorums (SCDM'15) §1 and §5
// motivate such SLAs and leave the mechanism to future work; this is one.
//
// The controller is a deterministic state machine: Step takes what was
// measured over the last control period and returns the next p and the
// controller's verdict. The caller measures (latency percentiles, the
// proportion of positive Γ scores from internal/gamma's Online) and applies
// p with CPQ.SetP.
//
// # The rule
//
// p trades latency for consistency monotonically: as p rises, more
// operations take the strong level, so read latency rises and the stale
// fraction falls. The SLA holds on an interval of p, [p_stale, p_latency],
// which may be empty. Each period the controller looks at the measurements
// of the periods since p last moved, at most the last Window of them (the
// stale fraction is a ratio of counts, so it sums counts; the p95 is the
// caller's, over the last Span periods):
//
//	stale over X, latency within L   p += clamp(p_X - p, MinStep, MaxStep)
//	latency over L, stale within X   p -= clamp(p - p_L, MinStep, MaxLatencyStep)
//	                                 (without the levels' counts: clamp(Gain*(p95-L)/L, ...))
//	latency over L at the weaker level alone, stale within X
//	                                 hold p; count the period as infeasible
//	latency over L at the weaker level alone, stale over X
//	                                 the stale step; count the period as infeasible
//	both within                      hold p
//	both over                        hold p; count the period as infeasible
//
// p_X is where a model of the stale fraction puts the bound: the stale
// fraction falls in proportion to the reads moved to the stronger level,
// whose reads are StrongerStale times as often stale as the weaker level's
// (0: always fresh), stale(p) = s0*(1-(1-r)*p); through the measured point,
// stale(p_X) = Margin*X at p_X = (1 - Margin*X/s0)/(1-r). One step goes
// most of the way there rather than a fixed gain's fraction of it. If p_X
// lies past p_L (below), where the latency step would aim, the stale step
// aims half way between the two models' bounds, p_Xb = (1 - X/s0)/(1-r)
// and p_Lb = (5% - f_w)/(f_s - f_w), and never past p_Lb: with the bounds
// close (loopback, weak and quorum reads' p95s 0.2-0.5 ms apart), a step to
// p_X crossed the latency bound (0.55 -> 0.94 in one run), the latency step
// took p back under the stale bound, and p swung between the two.
//
// p_L is where a model of the latency puts the bound. The p95 is over L
// when more than 5% of reads are slower than L, and a read is one of a
// mixture: with f_w and f_s the shares of the weaker and the stronger
// level's reads slower than L in the window (Observation's level counts),
// (1-p)*f_w + p*f_s of all reads are, which is Margin*5% at
// p_L = (Margin*0.05 - f_w)/(f_s - f_w). If the weaker level's reads alone
// are over L in more than 5% of cases (f_w > 0.05), no p brings the p95
// under L: a stall of the machine slows every read, whatever p is. Then p
// holds (or follows the stale bound alone, if that is violated too), and
// the period counts towards "infeasible" as latency over L at p = 0 does; stepping down there (the earlier rule) only brought back the
// staleness, and p had to climb again after the stall. Without the levels'
// counts the step is proportional. The latency step keeps a lower ceiling
// (one noisy window should not swing p across the range). The floor makes
// a small, persistent violation still move p.
//
// The window holds a few hundred scored values, and the count of stale
// ones among them is noisy: at the bound X its standard deviation is about
// sqrt(X*values) (a Poisson count's), 20-45% of it at the bench's 160
// values a period. A step to p_X on a count within Z (default 1) standard
// deviations over the bound would follow that noise, and since only the
// latency bound lowers p, p would ratchet up on false alarms while that
// bound is slack (0.50 -> 0.77 -> 0.94 -> 1 in 4 s in one run); within
// them, p rises by MinStep only, so a small persistent violation still
// moves it (without restarting the window: a rise that small leaves the
// window's values as good as they were). With the gate the stale step's
// ceiling is 0.5 (it was 0.3): after a latency change the first window
// over the bound mixes periods from before it, the model underestimates
// s0, and a ceiling of 0.3 cut the step short again (0.26 -> 0.56 where
// the model aimed at 0.74), leaving a residual violation too small for
// the gate to see in one or two periods' values.
//
// A stale step that lands still over the bound is followed by another
// once the window at the new p holds two periods, even within the gate:
// along the secant through the two measured points (the stale fraction
// that called for the step at its starting p, the window's now), to where
// it reaches Margin*X; if the stale fraction did not fall, to the model's
// p_X. The model's r comes from the levels measured before a latency
// change, and after one the stronger level's reads are relatively staler
// (quorum reads 0.27 of weak reads' staleness at 2 ms between replicas,
// 0.41 at 8 ms, bench cpq figure q at 800 ops/s), so the first step lands short, often within the
// gate's noise of the bound, where the floor alone took p up by 0.01 a
// period. The secant step is taken again after each step until the SLA
// is met or p falls.
//
// After p rises by more than MinStep, the measurements start again: the window is emptied and
// the next Hold periods are ignored, for a caller whose values scored in a
// period were written under the old p (one that scores a value a fixed
// time after its write, Hold periods' worth; a caller that counts a stale
// value when its stale read arrives, as gamma.Online does, needs none). Without that, a window still full of
// the old p's staleness pushes p on past the bound, step after step. After
// p falls (for latency, which answers at once) the window is kept: its
// staleness, from a higher p, can only understate the new p's, which costs
// at most one more step down before fresher values show it.
// The window also needs MinValues scored values before it judges.
//
// The SLA is reported infeasible after Patience consecutive judged periods
// with both bounds violated, or with the violated bound pushing p past 0 or
// 1 (stale over X at p = 1, latency over L at p = 0); it is reported met
// after Patience consecutive judged periods with both bounds within.
//
// A period without a measurement (no read finished, fewer than MinValues
// values scored) holds p and does not count towards any verdict.
package cpqctl

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// SLA is the target: the p95 read latency at most Latency and the stale
// fraction (proportion of positive Γ scores) at most Stale.
type SLA struct {
	Latency time.Duration
	Stale   float64
}

func (s SLA) String() string {
	return fmt.Sprintf("p95 <= %v, stale <= %.4f", s.Latency, s.Stale)
}

// Config configures a Controller. Zero fields get the defaults.
type Config struct {
	SLA SLA
	// P is the starting probability (default 0.5).
	P float64
	// Window is the largest number of periods the stale fraction is
	// summed over (default 3).
	Window int
	// Gain, MinStep, MaxStep and MaxLatencyStep shape the steps
	// (defaults 0.1, 0.01, 0.5 for the stale step and 0.1 for the latency
	// step); Margin is where the stale step aims, as a fraction of the
	// bound (default 0.8).
	Gain, MinStep, MaxStep, MaxLatencyStep, Margin float64
	// Hold is the number of periods ignored after p moves (default 1;
	// -1 for none).
	Hold int
	// MinValues is the number of scored values a judgement needs (default
	// 50).
	MinValues int
	// Patience is the number of consecutive periods a verdict needs
	// (default 3).
	Patience int
	// Z is how far over the stale bound, in standard deviations of the
	// count of stale values at the bound (sqrt(X*values), a Poisson
	// count's), the window's stale count must be for the stale step to aim
	// at p_X; a smaller excess moves p by MinStep (default 1; -1 for 0,
	// every excess aims).
	Z float64
	// StrongerStale is how often reads at the stronger level are stale,
	// as a fraction of how often the weaker level's are (0, the default:
	// never, as strong reads; quorum reads are stale about a third as
	// often as weak ones). It shapes the stale step's model; less than 1.
	StrongerStale float64
}

// tail is the share of reads a p95 leaves above it.
const tail = 0.05

// ErrConfig is returned by New for an invalid configuration.
var ErrConfig = errors.New("cpqctl: invalid config")

// Observation is what one period measured.
type Observation struct {
	// P95 is the p95 read latency over the window (the caller's
	// percentile over the last Window periods); 0 if no read finished.
	P95 time.Duration
	// Values and Positive are the values the Γ estimate scored in this
	// period and those of them with a positive score.
	Values, Positive int
	// WeakReads and StrongReads count the reads at the weaker and the
	// stronger level over the same periods as P95, WeakSlow and StrongSlow
	// those of them slower than the SLA's latency bound. Optional (all 0:
	// the latency step is proportional, and a stall is not told apart).
	WeakReads, WeakSlow, StrongReads, StrongSlow int
}

// Verdict is the controller's judgement of the SLA.
type Verdict int

// The verdicts.
const (
	// Adjusting: not yet Patience periods in a row within the SLA.
	Adjusting Verdict = iota
	// Met: the last Patience periods were within both bounds.
	Met
	// Infeasible: no p in [0, 1] meets both bounds under the current
	// conditions (as far as the last Patience periods show).
	Infeasible
)

func (v Verdict) String() string {
	switch v {
	case Met:
		return "met"
	case Infeasible:
		return "infeasible"
	}
	return "adjusting"
}

// Decision is the outcome of one Step.
type Decision struct {
	// P is the probability to use from now on.
	P float64
	// Stale is the smoothed stale fraction the step used (NaN without
	// a judgement: too few values, or a held period); P95 the latency it
	// used.
	Stale float64
	P95   time.Duration
	// LatencyOK and StaleOK say whether each bound held in this period.
	LatencyOK, StaleOK bool
	// Held: the period came right after a move of p and was ignored.
	Held    bool
	Verdict Verdict
	// Why explains an infeasible verdict.
	Why string
}

// Controller tunes p. It is not safe for concurrent use.
type Controller struct {
	cfg    Config
	p      float64
	window []Observation // the last Window observations since p moved, oldest first
	hold   int           // periods still to ignore
	since  int           // judged periods since p last moved by more than MinStep (the p95's span)
	ok     int           // consecutive periods within the SLA
	bad    int           // consecutive periods judged infeasible
	last   Decision
	// The last stale step (rise of more than MinStep) since p last fell or
	// the SLA was last met: the p it started from and the stale fraction
	// that called for it, for the secant step.
	stepped             bool
	stepFrom, stepStale float64
}

// New returns a controller, or an error matching ErrConfig.
func New(cfg Config) (*Controller, error) {
	if cfg.P == 0 {
		cfg.P = 0.5
	}
	if cfg.Window == 0 {
		cfg.Window = 3
	}
	if cfg.Gain == 0 {
		cfg.Gain = 0.1
	}
	if cfg.MinStep == 0 {
		cfg.MinStep = 0.01
	}
	if cfg.MaxStep == 0 {
		cfg.MaxStep = 0.5
	}
	if cfg.MaxLatencyStep == 0 {
		cfg.MaxLatencyStep = 0.1
	}
	if cfg.Margin == 0 {
		cfg.Margin = 0.8
	}
	switch cfg.Hold {
	case 0:
		cfg.Hold = 1
	case -1:
		cfg.Hold = 0
	}
	if cfg.MinValues == 0 {
		cfg.MinValues = 50
	}
	switch cfg.Z {
	case 0:
		cfg.Z = 1
	case -1:
		cfg.Z = 0
	}
	if cfg.Patience == 0 {
		cfg.Patience = 3
	}
	var errs []error
	if cfg.SLA.Latency <= 0 {
		errs = append(errs, fmt.Errorf("latency bound %v: want more than 0", cfg.SLA.Latency))
	}
	if !(cfg.SLA.Stale > 0 && cfg.SLA.Stale < 1) {
		errs = append(errs, fmt.Errorf("stale bound %v: want more than 0 and less than 1", cfg.SLA.Stale))
	}
	if !(cfg.P >= 0 && cfg.P <= 1) {
		errs = append(errs, fmt.Errorf("starting p %v: want 0 to 1", cfg.P))
	}
	if cfg.Window < 1 || cfg.Window > 1000 {
		errs = append(errs, fmt.Errorf("window %d: want 1 to 1000", cfg.Window))
	}
	if !(cfg.Gain > 0) || !(cfg.MinStep > 0) || !(cfg.MaxStep >= cfg.MinStep) || cfg.MaxStep > 1 {
		errs = append(errs, fmt.Errorf("gain %v, steps %v to %v: want 0 < min step <= max step <= 1 and a positive gain", cfg.Gain, cfg.MinStep, cfg.MaxStep))
	}
	if !(cfg.MaxLatencyStep >= cfg.MinStep) || cfg.MaxLatencyStep > 1 {
		errs = append(errs, fmt.Errorf("max latency step %v: want min step %v to 1", cfg.MaxLatencyStep, cfg.MinStep))
	}
	if !(cfg.Margin > 0 && cfg.Margin <= 1) {
		errs = append(errs, fmt.Errorf("margin %v: want more than 0, at most 1", cfg.Margin))
	}
	if cfg.Hold < 0 || cfg.Hold > 1000 {
		errs = append(errs, fmt.Errorf("hold %d: want -1 (none) to 1000", cfg.Hold))
	}
	if cfg.MinValues < 1 {
		errs = append(errs, fmt.Errorf("min values %d: want 1 or more", cfg.MinValues))
	}
	if !(cfg.Z >= 0 && cfg.Z <= 10) {
		errs = append(errs, fmt.Errorf("z %v: want -1 (none) to 10", cfg.Z))
	}
	if !(cfg.StrongerStale >= 0 && cfg.StrongerStale < 1) {
		errs = append(errs, fmt.Errorf("stronger level's staleness %v: want 0 to less than 1", cfg.StrongerStale))
	}
	if cfg.Patience < 1 || cfg.Patience > 1000 {
		errs = append(errs, fmt.Errorf("patience %d: want 1 to 1000", cfg.Patience))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return &Controller{cfg: cfg, p: cfg.P}, nil
}

// P is the current probability.
func (c *Controller) P() float64 { return c.p }

// Last is the last Step's decision.
func (c *Controller) Last() Decision { return c.last }

// Span is the number of periods, this one included, that the next Step's
// Observation.P95 (and the level counts) should cover: those since p last
// moved by more than MinStep (after the held ones), at most Window. The
// stale window is kept after p falls, the p95's is not: reads answer at
// once at the new p, and a p95 that still holds periods from before the
// fall keeps stepping p down (0.83 -> 0.43 in four periods in one run).
func (c *Controller) Span() int {
	if c.hold > 0 {
		return 1
	}
	return min(c.since+1, c.cfg.Window)
}

func (c *Controller) clamp(step, ceiling float64) float64 {
	return min(max(step, c.cfg.MinStep), ceiling)
}

// latencyStep is how far p falls for a p95 over the bound, or hold (with
// the reason) when the weaker level's reads alone are over it.
func (c *Controller) latencyStep(o Observation) (step float64, hold bool, why string) {
	if o.WeakReads+o.StrongReads == 0 {
		return c.clamp(c.cfg.Gain*float64(o.P95-c.cfg.SLA.Latency)/float64(c.cfg.SLA.Latency), c.cfg.MaxLatencyStep), false, ""
	}
	var fw, fs float64
	if o.WeakReads > 0 {
		fw = float64(o.WeakSlow) / float64(o.WeakReads)
	}
	if o.StrongReads > 0 {
		fs = float64(o.StrongSlow) / float64(o.StrongReads)
	}
	if fw > tail {
		return 0, true, fmt.Sprintf("p95 %v over %v at the weaker level alone (%.1f%% of its reads over the bound) at p = %.2f", o.P95, c.cfg.SLA.Latency, 100*fw, c.p)
	}
	target := 0.0
	if fs > fw {
		target = (c.cfg.Margin*tail - fw) / (fs - fw)
	}
	return c.clamp(c.p-target, c.cfg.MaxLatencyStep), false, ""
}

// latencyBound is the p at which the latency model puts the p95 at the
// bound, (5% - f_w)/(f_s - f_w), and the p the latency step aims at, p_L
// (Margin*5% for 5%), when the levels' counts give them: both levels read,
// the stronger level's reads are slower than L more often than the
// weaker's, and the weaker's alone are within (not a stall).
func (c *Controller) latencyBound(o Observation) (atBound, aim float64, ok bool) {
	if o.WeakReads == 0 || o.StrongReads == 0 {
		return 0, 0, false
	}
	fw := float64(o.WeakSlow) / float64(o.WeakReads)
	fs := float64(o.StrongSlow) / float64(o.StrongReads)
	if fw > tail || fs <= fw {
		return 0, 0, false
	}
	return (tail - fw) / (fs - fw), (c.cfg.Margin*tail - fw) / (fs - fw), true
}

// Step takes one period's observation and returns the decision.
func (c *Controller) Step(o Observation) Decision {
	d := Decision{P: c.p, Stale: math.NaN(), P95: o.P95, Verdict: c.last.Verdict}
	if c.hold > 0 {
		c.hold--
		d.Held = true
		c.last = d
		return d // measures the old p: ignore
	}
	c.window = append(c.window, o)
	if len(c.window) > c.cfg.Window {
		c.window = c.window[1:]
	}
	var values, positive int
	for _, w := range c.window {
		values += w.Values
		positive += w.Positive
	}
	if values < c.cfg.MinValues || o.P95 == 0 {
		c.last = d
		return d // too little measured: hold
	}
	sla := c.cfg.SLA
	d.Stale = float64(positive) / float64(values)
	d.StaleOK = d.Stale <= sla.Stale
	d.LatencyOK = o.P95 <= sla.Latency
	infeasible := ""
	_, stalled, stall := c.latencyStep(o)
	stalled = stalled && !d.LatencyOK
	switch {
	case d.StaleOK && d.LatencyOK:
	case !d.StaleOK && !d.LatencyOK && !stalled:
		infeasible = fmt.Sprintf("both bounds violated at p = %.2f (stale %.4f, p95 %v)", c.p, d.Stale, o.P95)
	case !d.StaleOK:
		// Latency within, or over at the weaker level alone (a stall,
		// which no p mends): the stale bound decides.
		if c.p >= 1 {
			infeasible = fmt.Sprintf("stale %.4f over %.4f at p = 1", d.Stale, sla.Stale)
		} else if stalled {
			infeasible = stall
		}
		r := c.cfg.StrongerStale
		s0 := d.Stale / (1 - (1-r)*c.p)
		target := (1 - c.cfg.Margin*sla.Stale/s0) / (1 - r)
		atBound := sla.Stale * float64(values)
		gated := float64(positive)-atBound > c.cfg.Z*math.Sqrt(atBound)
		if !gated {
			target = c.p // within the count's noise of the bound: the floor
		}
		if !gated && c.stepped && len(c.window) >= 2 {
			// Still over the bound two periods after a stale step:
			// the model under-stepped (its r is the levels' before a
			// change; after it the stronger level's reads are
			// relatively staler). Aim along the secant through the
			// two measured points instead of creeping by MinStep.
			if slope := (c.stepStale - d.Stale) / (c.p - c.stepFrom); slope > 0 {
				target = c.p + (d.Stale-c.cfg.Margin*sla.Stale)/slope
			} else {
				target = (1 - c.cfg.Margin*sla.Stale/s0) / (1 - r)
			}
		}
		from, fromStale := c.p, d.Stale
		if atLatency, aim, ok := c.latencyBound(o); ok && target > aim {
			// Past where the latency step would aim (so near the latency
			// bound that the next period's p95 may cross it): aim
			// half way between where the two models put the bounds, at
			// most at the latency bound's p.
			atStale := (1 - sla.Stale/s0) / (1 - r)
			target = max(c.p, min(target, atLatency, (atStale+atLatency)/2))
		}
		c.p = min(1, c.p+c.clamp(target-c.p, c.cfg.MaxStep))
		if c.p > from+c.cfg.MinStep*(1+1e-9) {
			c.stepped, c.stepFrom, c.stepStale = true, from, fromStale
		}
	default:
		step, hold, why := c.latencyStep(o)
		if c.p <= 0 {
			infeasible = fmt.Sprintf("p95 %v over %v at p = 0", o.P95, sla.Latency)
		} else if hold {
			infeasible = why
		}
		if !hold {
			c.p = max(0, c.p-step)
		}
	}
	c.since++
	if c.p > d.P+c.cfg.MinStep*(1+1e-9) {
		// More than the floor: the window's values are the old p's.
		c.window, c.hold = c.window[:0], c.cfg.Hold
		c.since = 0
	} else if c.p < d.P-c.cfg.MinStep*(1+1e-9) {
		c.since = 0
		c.stepped = false
	}
	d.P = c.p
	if d.StaleOK && d.LatencyOK {
		c.ok++
	} else {
		c.ok = 0
	}
	if infeasible != "" {
		c.bad++
	} else {
		c.bad = 0
	}
	switch {
	case c.bad >= c.cfg.Patience:
		d.Verdict, d.Why = Infeasible, infeasible
	case c.ok >= c.cfg.Patience:
		d.Verdict = Met
		c.stepped = false
	default:
		d.Verdict = Adjusting
	}
	c.last = d
	return d
}
