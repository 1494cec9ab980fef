package client

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/correctable"
)

// ErrSLANotMet: a Get under an SLA met none of its subSLAs (Pileus SOSP'13
// §3.3: "the Get call returns with an error code and no data"). The error
// names the SLA.
var ErrSLANotMet = errors.New("client: no subSLA met")

// MaxSubSLAs bounds the subSLAs of one SLA.
const MaxSubSLAs = 64

// SubSLA is one consistency-latency target of an SLA and its utility
// (Pileus §3.3).
type SubSLA struct {
	Consistency Consistency
	// Latency bounds the Get's round trip.
	Latency time.Duration
	// Utility is what meeting this subSLA is worth to the application.
	Utility float64
}

// String renders the subSLA as in the paper's figures.
func (s SubSLA) String() string {
	return fmt.Sprintf("%v<=%v:%g", s.Consistency, s.Latency, s.Utility)
}

// SLA is a consistency-based service level agreement: subSLAs in order of
// preference, the first the application's ideal (Pileus §3.3).
type SLA struct {
	Name string
	Subs []SubSLA
}

// Validate checks an SLA: a name, 1 to MaxSubSLAs subSLAs, each with one of
// the six guarantees, a latency bound in (0, 1h] and a finite utility >= 0,
// utilities not increasing down the list (a lower subSLA is worth less).
func (s SLA) Validate() error {
	var errs []error
	if s.Name == "" {
		errs = append(errs, errors.New("no name"))
	}
	if len(s.Subs) == 0 || len(s.Subs) > MaxSubSLAs {
		errs = append(errs, fmt.Errorf("%d subSLAs, want 1 to %d", len(s.Subs), MaxSubSLAs))
	}
	for i, sub := range s.Subs {
		if err := sub.Consistency.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("subSLA %d: %w", i+1, err))
		}
		if sub.Latency <= 0 || sub.Latency > time.Hour {
			errs = append(errs, fmt.Errorf("subSLA %d: latency %v not in (0, 1h]", i+1, sub.Latency))
		}
		if sub.Utility < 0 || math.IsNaN(sub.Utility) || math.IsInf(sub.Utility, 0) {
			errs = append(errs, fmt.Errorf("subSLA %d: utility %v is not a finite number >= 0", i+1, sub.Utility))
		}
		if i > 0 && sub.Utility > s.Subs[i-1].Utility {
			errs = append(errs, fmt.Errorf("subSLA %d: utility %g above subSLA %d's %g (lower subSLAs are worth less)", i+1, sub.Utility, i, s.Subs[i-1].Utility))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: SLA %q: %w", ErrInvalidArgument, s.Name, err)
	}
	return nil
}

// maxLatency is the largest latency bound: past it no subSLA can be met.
func (s SLA) maxLatency() time.Duration {
	var d time.Duration
	for _, sub := range s.Subs {
		d = max(d, sub.Latency)
	}
	return d
}

// met returns the first subSLA a reply with guarantees g and latency
// elapsed meets, or -1 (Pileus §4.6.2).
func (s SLA) met(g Guarantees, elapsed time.Duration) int {
	for i, sub := range s.Subs {
		if elapsed <= sub.Latency && g.Satisfies(sub.Consistency) {
			return i
		}
	}
	return -1
}

// The SLAs of the Pileus paper's figures.
var (
	// ShoppingCartSLA is Figure 4: read-my-writes within 300 ms (1.0),
	// else eventual within 300 ms (0.5).
	ShoppingCartSLA = SLA{Name: "cart", Subs: []SubSLA{
		{Guarantee(correctable.ReadMyWrites), 300 * time.Millisecond, 1.0},
		{Guarantee(correctable.Eventual), 300 * time.Millisecond, 0.5},
	}}
	// WebSLA is Figure 5: bounded(300 s) staleness, with utility falling as
	// the latency grows.
	WebSLA = SLA{Name: "web", Subs: []SubSLA{
		{Bounded(300 * time.Second), 200 * time.Millisecond, 0.00001},
		{Bounded(300 * time.Second), 400 * time.Millisecond, 0.000008},
		{Bounded(300 * time.Second), 600 * time.Millisecond, 0.000005},
		{Bounded(300 * time.Second), 1000 * time.Millisecond, 0},
	}}
	// PasswordSLA is Figure 6: strong within 150 ms (1.0), eventual within
	// 150 ms (0.5), strong within 1 s (0.25).
	PasswordSLA = SLA{Name: "password", Subs: []SubSLA{
		{Guarantee(correctable.Strong), 150 * time.Millisecond, 1.0},
		{Guarantee(correctable.Eventual), 150 * time.Millisecond, 0.5},
		{Guarantee(correctable.Strong), time.Second, 0.25},
	}}
)

// NamedSLA returns an example SLA by name: cart, password or web.
func NamedSLA(name string) (SLA, error) {
	for _, s := range []SLA{ShoppingCartSLA, PasswordSLA, WebSLA} {
		if s.Name == name {
			s.Subs = append([]SubSLA(nil), s.Subs...)
			return s, nil
		}
	}
	return SLA{}, fmt.Errorf("%w: no SLA named %q (known: cart, password, web)", ErrInvalidArgument, name)
}

// slaJSON is an SLA file:
//
//	{"name": "cart", "subslas": [
//	  {"consistency": "read-my-writes", "latency": "300ms", "utility": 1},
//	  {"consistency": "eventual", "latency": "300ms", "utility": 0.5}]}
type slaJSON struct {
	Name    string `json:"name"`
	SubSLAs []struct {
		Consistency *string  `json:"consistency"`
		Latency     *string  `json:"latency"`
		Utility     *float64 `json:"utility"`
	} `json:"subslas"`
}

// ParseSLA parses an SLA from JSON (see slaJSON's example). Unknown fields,
// missing fields and invalid values are errors that say where.
func ParseSLA(data []byte) (SLA, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var j slaJSON
	if err := dec.Decode(&j); err != nil {
		return SLA{}, fmt.Errorf("%w: SLA file: %w", ErrInvalidArgument, err)
	}
	if dec.More() {
		return SLA{}, fmt.Errorf("%w: SLA file: data after the SLA object", ErrInvalidArgument)
	}
	s := SLA{Name: j.Name}
	for i, js := range j.SubSLAs {
		var errs []string
		if js.Consistency == nil {
			errs = append(errs, `no "consistency"`)
		}
		if js.Latency == nil {
			errs = append(errs, `no "latency"`)
		}
		if js.Utility == nil {
			errs = append(errs, `no "utility"`)
		}
		if len(errs) > 0 {
			return SLA{}, fmt.Errorf("%w: SLA %q: subSLA %d: %s", ErrInvalidArgument, s.Name, i+1, strings.Join(errs, ", "))
		}
		c, err := ParseConsistency(*js.Consistency)
		if err != nil {
			return SLA{}, fmt.Errorf("SLA %q: subSLA %d: %w", s.Name, i+1, err)
		}
		d, err := time.ParseDuration(*js.Latency)
		if err != nil {
			return SLA{}, fmt.Errorf("%w: SLA %q: subSLA %d: latency %q: want a duration such as \"300ms\"", ErrInvalidArgument, s.Name, i+1, *js.Latency)
		}
		s.Subs = append(s.Subs, SubSLA{Consistency: c, Latency: d, Utility: *js.Utility})
	}
	if err := s.Validate(); err != nil {
		return SLA{}, err
	}
	return s, nil
}

// SLAResult is a Get's result under an SLA and what the reply met.
type SLAResult struct {
	Result Result
	// SLA is the SLA's name; SubSLA the index of the subSLA the reply met
	// (0 is the top), Met that subSLA and Utility its utility.
	SLA     string
	SubSLA  int
	Met     SubSLA
	Utility float64
	// Target is the subSLA the client aimed at and TargetReplica where it
	// sent the Get; the reply may meet a higher subSLA (Pileus §4.6.2).
	Target        int
	TargetReplica uint64
	// Replica answered, with Guarantees for the session, in Latency.
	Replica    uint64
	Guarantees Guarantees
	Latency    time.Duration
}

// Monitor returns the Client's monitor of its replicas.
func (c *Client) Monitor() *Monitor { return c.mon }

// SelectTarget picks the subSLA and replica with the highest expected
// utility for op in session s, PNodeSla times the subSLA's utility, ties
// going to the closest replica and then to the higher subSLA (Pileus §4.6.1,
// Figure 8). It returns the subSLA's index and the replica's id.
func (c *Client) SelectTarget(s *Session, sla SLA, op Op) (sub int, replica uint64, err error) {
	ids := c.replicaIDs()
	if len(ids) == 0 {
		return 0, 0, fmt.Errorf("%w: SLA %q: no replica has answered a probe yet", ErrUnavailable, sla.Name)
	}
	var trace []TargetEstimate
	best := -1.0
	var bestRTT time.Duration
	for i, x := range sla.Subs {
		for _, id := range ids {
			strong := x.Consistency.Level == correctable.Strong
			pc := c.mon.PNodeCons(s, id, x.Consistency, op)
			pl, n, fromStrong := c.mon.pNodeLat(id, x.Latency, strong)
			u := pc * pl * x.Utility
			rtt := c.mon.closeness(id)
			if c.cfg.targetTrace != nil {
				trace = append(trace, TargetEstimate{SubSLA: i, Replica: id, PNodeCons: pc, PNodeLat: pl,
					Samples: n, StrongSamples: fromStrong, Expected: u, Closeness: rtt})
			}
			if u > best || u == best && rtt < bestRTT {
				best, bestRTT, sub, replica = u, rtt, i, id
			}
		}
	}
	if c.cfg.targetTrace != nil {
		c.cfg.targetTrace(TargetDecision{SLA: sla.Name, Key: op.key, Leader: c.mon.Leader(),
			Estimates: trace, SubSLA: sub, Replica: replica})
	}
	return sub, replica, nil
}

// TargetEstimate is what SelectTarget knew of one subSLA at one replica
// (Pileus §4.5): PNodeCons, PNodeLat and their product times the subSLA's
// utility, the expected utility.
type TargetEstimate struct {
	SubSLA  int
	Replica uint64
	// PNodeLat came from Samples round trips in the monitor's window,
	// strong reads' if StrongSamples.
	PNodeCons, PNodeLat float64
	Samples             int
	StrongSamples       bool
	Expected            float64
	// Closeness is the replica's median round trip, which breaks ties.
	Closeness time.Duration
}

// TargetDecision is one choice of SelectTarget (WithTargetTrace): the SLA,
// the key, the leader the monitor knew, every estimate and the target
// chosen.
type TargetDecision struct {
	SLA       string
	Key       string
	Leader    uint64
	Estimates []TargetEstimate
	SubSLA    int
	Replica   uint64
}

// rankFor returns the replicas by PNodeSla for subSLA x, highest first,
// ties to the closest, and their PNodeSla.
func (c *Client) rankFor(s *Session, x SubSLA, op Op) ([]uint64, []float64) {
	type cand struct {
		id  uint64
		p   float64
		rtt time.Duration
	}
	var cs []cand
	for _, id := range c.replicaIDs() {
		cs = append(cs, cand{id, c.mon.PNodeSla(s, id, x, op), c.mon.closeness(id)})
	}
	slices.SortStableFunc(cs, func(a, b cand) int {
		if a.p != b.p {
			return cmp.Compare(b.p, a.p)
		}
		return cmp.Compare(a.rtt, b.rtt)
	})
	ids, ps := make([]uint64, len(cs)), make([]float64, len(cs))
	for i, x := range cs {
		ids[i], ps[i] = x.id, x.p
	}
	return ids, ps
}

// GetSLA reads key under sla within session s, as Pileus does (§4.6):
// it selects a target subSLA and replica (SelectTarget), sends the Get
// there (strong reads with the strong protocol, others with the weak one),
// and reports which subSLA the reply met, which may be higher than the
// target. When the reply meets none, or none can be met any more (the
// largest latency bound passed), it fails with ErrSLANotMet naming the
// SLA. The session records the read; the monitor, its round trip and stamp.
func (c *Client) GetSLA(ctx context.Context, s *Session, sla SLA, key string) (SLAResult, error) {
	if err := sla.Validate(); err != nil {
		return SLAResult{}, fmt.Errorf("client: %w", err)
	}
	if s == nil {
		s = NewSession()
	}
	op := Get(key)
	target, id, err := c.SelectTarget(s, sla, op)
	if err != nil {
		return SLAResult{}, fmt.Errorf("client: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, sla.maxLatency())
	defer cancel()
	strong := sla.Subs[target].Consistency.Level == correctable.Strong
	r, err := c.readAt(ctx, s, id, op, strong)
	r.SLA, r.Target, r.TargetReplica = sla.Name, target, id
	if err != nil {
		if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
			return r, fmt.Errorf("client: SLA %q: %w: no reply from replica %d within %v (target subSLA %d, %v)", sla.Name, ErrSLANotMet, id, sla.maxLatency(), target+1, sla.Subs[target])
		}
		return r, fmt.Errorf("client: SLA %q: %w", sla.Name, err)
	}
	r.SubSLA = sla.met(r.Guarantees, r.Latency)
	if r.SubSLA < 0 {
		return r, fmt.Errorf("client: SLA %q: %w: replica %d answered in %v with %v (target subSLA %d, %v)", sla.Name, ErrSLANotMet, id, r.Latency.Round(time.Millisecond), r.Guarantees, target+1, sla.Subs[target])
	}
	r.Met, r.Utility = sla.Subs[r.SubSLA], sla.Subs[r.SubSLA].Utility
	return r, nil
}

// GetSLAAt reads key at replica id, with the strong protocol if strong,
// and reports which subSLA of sla the reply met: the fixed strategies
// Pileus is compared with (§5.1: Primary, Random, Closest) measured the
// same way. It fails with ErrSLANotMet naming the SLA when the reply meets
// no subSLA or none can be met any more.
func (c *Client) GetSLAAt(ctx context.Context, s *Session, sla SLA, id uint64, key string, strong bool) (SLAResult, error) {
	if err := sla.Validate(); err != nil {
		return SLAResult{}, fmt.Errorf("client: %w", err)
	}
	if s == nil {
		s = NewSession()
	}
	ctx, cancel := context.WithTimeout(ctx, sla.maxLatency())
	defer cancel()
	r, err := c.readAt(ctx, s, id, Get(key), strong)
	r.SLA, r.Target, r.TargetReplica = sla.Name, -1, id
	if err != nil {
		if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
			return r, fmt.Errorf("client: SLA %q: %w: no reply from replica %d within %v", sla.Name, ErrSLANotMet, id, sla.maxLatency())
		}
		return r, fmt.Errorf("client: SLA %q: %w", sla.Name, err)
	}
	if r.SubSLA = sla.met(r.Guarantees, r.Latency); r.SubSLA < 0 {
		return r, fmt.Errorf("client: SLA %q: %w: replica %d answered in %v with %v", sla.Name, ErrSLANotMet, id, r.Latency.Round(time.Millisecond), r.Guarantees)
	}
	r.Met, r.Utility = sla.Subs[r.SubSLA], sla.Subs[r.SubSLA].Utility
	return r, nil
}

// readAt reads op at replica id, strongly or weakly, within session s, and
// feeds the monitor. The result carries the reply's replica, guarantees
// and latency.
func (c *Client) readAt(ctx context.Context, s *Session, id uint64, op Op, strong bool) (SLAResult, error) {
	r := SLAResult{Replica: id, SubSLA: -1}
	e := c.endpointOf(id)
	if e == nil {
		return r, fmt.Errorf("%w: replica %d is not among the endpoints", ErrUnavailable, id)
	}
	pop, err := toAPIOp(op)
	if err != nil {
		return r, err
	}
	ls := levelSet{eventual: !strong, strong: strong}
	req := toAPIRequest(pop, ls, false, c.cfg.noConfirm)
	var got *correctable.View[Result]
	emit := func(v correctable.View[Result]) error {
		got = &v
		return nil
	}
	start := time.Now()
	c.stats.ops.Add(1)
	var tr OpTrace
	_, _, err = c.invokeAt(ctx, e, req, ls, s.wrap(op, emit), &tr)
	r.Latency = time.Since(start)
	if err == nil && got == nil {
		err = fmt.Errorf("%w: no view", ErrProtocol)
	}
	if err != nil {
		c.stats.failed.Add(1)
		return r, fmt.Errorf("%v at replica %d: %w", op, id, err)
	}
	r.Result = got.Value
	if st, ok := got.Stamp.(Stamp); ok {
		c.mon.observeStamp(id, st)
		if st.Guarantees != nil {
			r.Guarantees = *st.Guarantees
		}
	}
	c.mon.observeRTT(id, r.Latency, strong)
	return r, nil
}

// InvokeSLA reads key under sla within session s incrementally, as only a
// Correctable can: it sends the Get at once to Pileus's own target
// (SelectTarget), to the two replicas that best meet the top subSLA (the
// second only if it may meet it), and to the one that best meets the lowest
// subSLA, one request per replica and protocol (strong for a strong
// subSLA); every reply that meets a higher subSLA
// than the views before becomes a view, tagged with the subSLA it met (the
// view's Level ranks the subSLAs: the top one is the strongest). The
// Correctable closes when the top subSLA is met, when every reply has
// arrived, or when the largest latency bound has passed, with the best view
// as the final one; if no reply met any subSLA it fails with ErrSLANotMet
// naming the SLA. This goes past Pileus, whose client sends each Get to one
// replica (§6.3 "Parallel Gets", and §5.4: "after receiving a local
// response, the client could have performed the Get at the primary and
// still have met the third subSLA").
func (c *Client) InvokeSLA(ctx context.Context, s *Session, sla SLA, key string) *correctable.Correctable[SLAResult] {
	cor, res := correctable.New[SLAResult]()
	if err := sla.Validate(); err != nil {
		_ = res.Fail(fmt.Errorf("client: %w", err))
		return cor
	}
	if s == nil {
		s = NewSession()
	}
	op := Get(key)
	if len(c.replicaIDs()) == 0 {
		_ = res.Fail(fmt.Errorf("client: SLA %q: %w: no replica has answered a probe yet", sla.Name, ErrUnavailable))
		return cor
	}
	type target struct {
		sub    int
		id     uint64
		strong bool
	}
	// Pileus's own target, the best replica for the top subSLA and the best
	// for the lowest one; one request per replica and protocol.
	var targets []target
	add := func(i int, id uint64) {
		t := target{sub: i, id: id, strong: sla.Subs[i].Consistency.Level == correctable.Strong}
		for _, o := range targets {
			if o.id == t.id && o.strong == t.strong {
				return
			}
		}
		targets = append(targets, t)
	}
	if i, id, err := c.SelectTarget(s, sla, op); err == nil {
		add(i, id)
	}
	// For the top subSLA the two best replicas, if the second may meet it
	// too (Pileus §6.3, "Parallel Gets": a second chance when the first is
	// slower than its estimate).
	top, ps := c.rankFor(s, sla.Subs[0], op)
	for i, id := range top[:min(2, len(top))] {
		if i == 0 || ps[i] > 0 {
			add(0, id)
		}
	}
	if low, _ := c.rankFor(s, sla.Subs[len(sla.Subs)-1], op); len(low) > 0 {
		add(len(sla.Subs)-1, low[0])
	}
	ctx, cancel := context.WithTimeout(ctx, sla.maxLatency())
	start := time.Now()
	var (
		mu   sync.Mutex
		best = -1
		last correctable.View[SLAResult]
		errs []error
		wg   sync.WaitGroup
	)
	levelOf := func(i int) correctable.Level {
		return correctable.NewLevel(fmt.Sprintf("%s#%d", sla.Name, i+1), len(sla.Subs)-i)
	}
	for _, t := range targets {
		wg.Go(func() {
			r, err := c.readAt(ctx, s, t.id, op, t.strong)
			r.SLA, r.Target, r.TargetReplica = sla.Name, t.sub, t.id
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			r.Latency = time.Since(start) // from the invocation, as the caller sees it
			i := sla.met(r.Guarantees, r.Latency)
			if i < 0 || best >= 0 && i >= best {
				return
			}
			best = i
			r.SubSLA, r.Met, r.Utility = i, sla.Subs[i], sla.Subs[i].Utility
			last = correctable.View[SLAResult]{Value: r, Level: levelOf(i), Stamp: r.Guarantees, Elapsed: r.Latency}
			if i == 0 {
				_ = res.Close(last)
				cancel()
				return
			}
			_ = res.Update(last)
		})
	}
	go func() {
		wg.Wait()
		cancel()
		mu.Lock()
		defer mu.Unlock()
		if best >= 0 {
			_ = res.Close(last) // ErrClosed if the top subSLA closed it: fine
			return
		}
		_ = res.Fail(fmt.Errorf("client: SLA %q: %w within %v: %w", sla.Name, ErrSLANotMet, sla.maxLatency(), errors.Join(errs...)))
	}()
	return cor
}

// replicaIDs lists the replica ids the endpoints reported, in Dial's order.
func (c *Client) replicaIDs() []uint64 {
	var ids []uint64
	for _, e := range c.endpoints {
		e.mu.Lock()
		id := e.replica
		e.mu.Unlock()
		if id != 0 {
			ids = append(ids, id)
		}
	}
	return ids
}

// endpointOf returns the endpoint of replica id, or nil.
func (c *Client) endpointOf(id uint64) *endpoint {
	for _, e := range c.endpoints {
		e.mu.Lock()
		r := e.replica
		e.mu.Unlock()
		if r == id {
			return e
		}
	}
	return nil
}

// observeStatus feeds the monitor from a Status probe: round trip, leader
// and the replica's progress (a stamp without a stable time).
func (m *Monitor) observeStatus(rtt time.Duration, rep *api.StatusReply) {
	m.observeRTT(rep.GetId(), rtt, false)
	m.observeLeader(rep.GetLeader())
	m.observeStamp(rep.GetId(), Stamp{Replica: rep.GetId(), VV: rep.GetVv(), CommittedCount: rep.GetCommittedOps(), AppliedIndex: rep.GetAppliedIndex()})
}
