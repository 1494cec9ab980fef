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
// smoothed over the last Window periods (the stale fraction is a ratio of
// counts, so it sums counts; the p95 is the caller's, over the same window):
//
//	stale over X, latency within L   p += step(e_s), e_s = (stale-X)/X
//	latency over L, stale within X   p -= step(e_l), e_l = (p95-L)/L
//	both within                      hold p
//	both over                        hold p; count the period as infeasible
//
// with step(e) = clamp(Gain*e, MinStep, MaxStep): a proportional step with
// a floor (so a small, persistent violation still moves p) and a ceiling
// (so one noisy window cannot swing p across the range). The SLA is
// reported infeasible after Patience consecutive periods with both bounds
// violated, or with the violated bound pushing p past 0 or 1 (stale over X
// at p = 1, latency over L at p = 0); it is reported met after Patience
// consecutive periods with both bounds within.
//
// A period without a measurement (no read finished, no value scored)
// holds p and does not count towards any verdict.
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
	// Window is the number of periods the stale fraction is summed over
	// (default 3).
	Window int
	// Gain, MinStep and MaxStep shape the step (defaults 0.1, 0.01, 0.1).
	Gain, MinStep, MaxStep float64
	// Patience is the number of consecutive periods a verdict needs
	// (default 3).
	Patience int
}

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
	// values in the window); P95 the latency it used.
	Stale float64
	P95   time.Duration
	// LatencyOK and StaleOK say whether each bound held in this period.
	LatencyOK, StaleOK bool
	Verdict            Verdict
	// Why explains an infeasible verdict.
	Why string
}

// Controller tunes p. It is not safe for concurrent use.
type Controller struct {
	cfg    Config
	p      float64
	window []Observation // the last Window observations, oldest first
	ok     int           // consecutive periods within the SLA
	bad    int           // consecutive periods judged infeasible
	last   Decision
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
		cfg.MaxStep = 0.1
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

func (c *Controller) step(e float64) float64 {
	return min(max(c.cfg.Gain*e, c.cfg.MinStep), c.cfg.MaxStep)
}

// Step takes one period's observation and returns the decision.
func (c *Controller) Step(o Observation) Decision {
	c.window = append(c.window, o)
	if len(c.window) > c.cfg.Window {
		c.window = c.window[1:]
	}
	var values, positive int
	for _, w := range c.window {
		values += w.Values
		positive += w.Positive
	}
	d := Decision{P: c.p, Stale: math.NaN(), P95: o.P95, Verdict: c.last.Verdict}
	if values == 0 || o.P95 == 0 {
		c.last = d
		return d // nothing measured: hold
	}
	sla := c.cfg.SLA
	d.Stale = float64(positive) / float64(values)
	d.StaleOK = d.Stale <= sla.Stale
	d.LatencyOK = o.P95 <= sla.Latency
	infeasible := ""
	switch {
	case d.StaleOK && d.LatencyOK:
	case !d.StaleOK && !d.LatencyOK:
		infeasible = fmt.Sprintf("both bounds violated at p = %.2f (stale %.4f, p95 %v)", c.p, d.Stale, o.P95)
	case !d.StaleOK:
		if c.p >= 1 {
			infeasible = fmt.Sprintf("stale %.4f over %.4f at p = 1", d.Stale, sla.Stale)
		}
		c.p = min(1, c.p+c.step((d.Stale-sla.Stale)/sla.Stale))
	default:
		if c.p <= 0 {
			infeasible = fmt.Sprintf("p95 %v over %v at p = 0", o.P95, sla.Latency)
		}
		c.p = max(0, c.p-c.step(float64(o.P95-sla.Latency)/float64(sla.Latency)))
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
	default:
		d.Verdict = Adjusting
	}
	c.last = d
	return d
}
