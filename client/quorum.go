package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/correctables/correctables/api"

	"github.com/correctables/correctables/correctable"
)

// Quorum is the level of a quorum read's view (InvokeQuorum): the freshest
// of the tentative states of a majority of the replicas. It ranks above
// correctable.Eventual, whose view is one replica's tentative state, and
// below every session guarantee and correctable.Strong: a quorum read
// promises none of them.
var Quorum = correctable.NewLevel("quorum", 150)

// All is the level of InvokeAll's view: the quorum level with every
// replica for the majority (Cassandra's ALL). It ranks above Quorum and
// below every session guarantee.
var All = correctable.NewLevel("all", 160)

// quorumLevels and allLevels are what the quorum and all bindings' Levels
// return; never modified.
var (
	quorumLevels = []correctable.Level{Quorum}
	allLevels    = []correctable.Level{All}
)

// InvokeQuorum runs op at the quorum level and returns its one view, at
// level Quorum: for a read-only op (Get, Scan, a Txn without writes) a
// quorum read, for an update a quorum write. Continuous Partial Quorums
// (SCDM'15) §1 calls the pair QUORUM; with both, a quorum read includes
// every quorum write that completed before it started (two majorities share
// a replica).
//
// A quorum read is the weak protocol sent to a majority of the Client's
// endpoints at once, the nearest healthy ones (an endpoint that is
// unavailable is replaced by the next); if they have not all answered
// within twice the slowest one's round-trip time (at least a millisecond;
// WithQuorumHedge sets another time, or every endpoint at once), the read
// asks the other endpoints too and takes the first majority to answer (a
// hedge, counted in Stats.Hedges). Their answers' stamps say which
// operations each replica had received (version vectors), and what each
// answer's result depends on (Stamp.ReadVV: what the replica had committed,
// and the operations up to its last tentative one of the keys read, with
// the keys that transactions among those guard or write):
//
//   - if one answer's replica had received what every answer's result
//     depends on, the read returns it (among several such, the one with the
//     longest committed order, then the nearest);
//   - otherwise (the replicas held different updates of the keys read), the
//     read asks every replica that answered again, with the union of what
//     the first answers depend on as the request's min_vv (the replica runs
//     the read once it has received all of it), and returns the first
//     answer that covers the union. Gossip brings the missing operations;
//     asking every replica of the majority, not only the nearest, keeps one
//     slow link (a retransmission on a lossy network) off the read's path.
//
// Stats.QuorumWaits counts the reads that asked again. Either way the view
// is one replica's tentative state that includes every operation of the
// keys read (of every key, for a Scan) that any replica of the majority had
// received when it answered, and every operation any of them had
// committed. So it includes every update of those keys that a majority of
// the replicas had received before the read started, and, when the nearest
// replica is among those that answered (unless the hedge or a failure left
// it out), everything a weak read of it would have seen. Two addresses of
// one replica count once. It is no raft round: it costs one round trip to
// the farthest replica of the nearest majority, and the wait for one of
// them to catch up when their states differ on the keys read.
//
// A quorum write is the weak protocol at the nearest replica (with the
// failover of InvokeWeak), which gossips the update to the others at once;
// the write then asks the other endpoints' Status, all at once, with the
// update's id as the request's min_vv (a replica answers once it has
// received it, or after its wait bound), until enough of them have it that a
// majority of the endpoints has (the origin counts). Its view is the weak
// view, at level Quorum. Like a Cassandra write at QUORUM, it costs one
// round trip more than a weak write and no consensus: the update's place in
// the committed order is fixed later, as for any weak update. An endpoint
// whose Status fails is asked again; the write fails with ErrUnavailable
// once too few endpoints have answered for a second, and with ctx's error
// if ctx ends first. Either way its origin accepted it and will deliver it
// to the others when they can hear from it, so retrying a write that failed
// this way may apply it twice.
//
// What the level does not promise: it is not linearizable. A weak update is
// acknowledged once its origin has it, and a strong update counts as
// received once a committed raft entry has brought it, which is when it is
// in a majority's logs, not yet necessarily applied there; so a quorum read
// that starts after such an update completed may miss it (after a quorum
// write it does not), and
// two quorum reads may order concurrent updates differently (the views are
// tentative states). Committed weak updates are in commit order, which for
// updates from different replicas need not follow real time (Creek §4.1):
// a quorum read includes every quorum write completed before it, but may,
// rarely, return an earlier write's value over a later one's. The majority is of the endpoints the Client was
// dialled with: give it every replica's endpoint. If no replica of the
// majority catches up (they stopped receiving from the others), the read
// waits until ctx ends.
//
// With fewer endpoints answering than a majority, a read fails with
// ErrUnavailable; an op the server refuses fails as it would weakly.
func (c *Client) InvokeQuorum(ctx context.Context, op Op) *correctable.Correctable[Result] {
	return correctable.Invoke(ctx, quorumOp{c: c}, op)
}

// InvokeAll runs op as InvokeQuorum does, with every endpoint of the Client
// for the majority (Cassandra's ALL), and returns its one view, at level
// All: an update returns once every endpoint's replica has received it, and
// a read asks every endpoint at once and returns a state that includes every
// update of the keys read that any replica had received when it answered.
//
// The pair a user picks it for is an update at All with reads at
// InvokeWeak (R = 1, W = N: the read and write sets intersect): a weak read
// of any replica that starts after such an update completed includes it,
// at the cost of a weak read, no round trip; the update pays the round
// trip to the farthest replica instead of the nearest majority's. It is
// not available while a replica is down or cut off: an update at All while
// the Client knows an endpoint is down (an operation or probe found it
// unavailable and no probe has answered since) fails with ErrUnavailable
// and runs nothing; one whose replica goes down meanwhile waits, and fails
// with ErrUnavailable once the endpoint's Status has failed for a second
// (the update is applied at its origin all the same, as a failed quorum
// write's is); a read at All fails at once. As at the
// quorum level, committed weak updates are in commit order, which for
// updates of different replicas need not follow real time (Creek §4.1).
// Every replica means every endpoint the Client was dialled with: give it
// every replica's endpoint, or an update at All is one at those replicas
// only.
func (c *Client) InvokeAll(ctx context.Context, op Op) *correctable.Correctable[Result] {
	return correctable.Invoke(ctx, quorumOp{c: c, all: true}, op)
}

// quorumOp is the binding behind InvokeQuorum and, with all, InvokeAll.
type quorumOp struct {
	c   *Client
	all bool
}

func (b quorumOp) Levels() []correctable.Level {
	if b.all {
		return allLevels
	}
	return quorumLevels
}

// level is the level of the binding's view.
func (b quorumOp) level() correctable.Level {
	if b.all {
		return All
	}
	return Quorum
}

// quorumAnswer is one replica's answer to a quorum read.
type quorumAnswer struct {
	pos   int // position in the route: 0 is the nearest asked
	e     *endpoint
	view  correctable.View[Result]
	stamp Stamp
	err   error
}

func (b quorumOp) Submit(ctx context.Context, op Op, levels []correctable.Level, emit correctable.Emitter[Result]) error {
	c := b.c
	start := time.Now()
	c.stats.ops.Add(1)
	tr := OpTrace{Op: op}
	if c.cfg.recorder != nil {
		emit = c.cfg.recorder.traceEmitter(op, traceStart(ctx), b.level(), emit)
	}
	var err error
	if op.ReadOnly() {
		err = c.quorum(ctx, op, emit, &tr, b.all)
	} else {
		err = c.quorumWrite(ctx, op, emit, &tr, b.all)
	}
	if err != nil && ctx.Err() == nil {
		c.stats.failed.Add(1)
	}
	if c.cfg.trace != nil {
		tr.Elapsed, tr.Err = time.Since(start), err
		c.cfg.trace(tr)
	}
	return err
}

// quorum runs the read-only op as InvokeQuorum describes; with all, every
// endpoint is the majority, and all are asked at once.
func (c *Client) quorum(ctx context.Context, op Op, emit correctable.Emitter[Result], tr *OpTrace, all bool) error {
	if c.isClosed() {
		return fmt.Errorf("client: %v: %w", op, ErrClosed)
	}
	pop, err := toAPIOp(op)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	ls := levelSet{eventual: true}
	req := toAPIRequest(pop, ls, false, c.cfg.noConfirm)
	req.ReadVv = true // Stamp.ReadVV: what each answer's result depends on
	if n := proto.Size(req); n > MaxRequestBytes {
		return fmt.Errorf("client: %v: request of %d bytes over %d: %w", op, n, MaxRequestBytes, ErrInvalidArgument)
	}
	route := c.route()
	need, level := len(route)/2+1, Quorum
	if all {
		need, level = len(route), All
	}
	qctx, cancel := context.WithCancel(ctx)
	defer cancel() // the answers not waited for
	answers := make(chan quorumAnswer, len(route))
	ask := func(pos int) {
		e := route[pos]
		go func() {
			var t OpTrace
			a := quorumAnswer{pos: pos, e: e}
			_, _, a.err = c.invokeAt(qctx, e, req, ls, func(v correctable.View[Result]) error {
				a.view = v
				return nil
			}, &t)
			if a.err == nil {
				a.stamp, _ = StampOf(a.view)
			}
			answers <- a
		}()
	}
	first := need
	if all || c.cfg.quorumHedgeSet && c.cfg.quorumHedge == 0 {
		first = len(route) // every endpoint at once
	}
	next := 0
	for ; next < first; next++ {
		ask(next)
	}
	// The hedge: if the majority asked has not answered by then, ask the
	// other endpoints too and take the first majority of all.
	wait := quorumHedge(route[:need])
	if c.cfg.quorumHedgeSet {
		wait = c.cfg.quorumHedge
	}
	hedge := time.NewTimer(wait)
	defer hedge.Stop()
	var got []quorumAnswer
	var errs []error
	for pending := first; len(got) < need; pending-- {
		if pending == 0 {
			return fmt.Errorf("client: %v: %v read: %d of %d endpoints answered, want %d: %w: %w", op, level, len(got), len(route), need, ErrUnavailable, errors.Join(errs...))
		}
		var a quorumAnswer
		select {
		case a = <-answers:
		case <-hedge.C:
			for ; next < len(route); next++ {
				c.stats.hedges.Add(1)
				ask(next)
				pending++
			}
			pending++ // this turn received nothing
			continue
		}
		tr.Attempts++
		if a.err == nil && !answeredBy(got, a.stamp.Replica) {
			got = append(got, a)
			continue
		}
		if c.isClosed() {
			return fmt.Errorf("client: %v at %s: %w", op, a.e.addr, ErrClosed)
		}
		var err error
		if a.err == nil {
			// A second address of a replica that answered: it does not
			// count towards the majority.
			err = fmt.Errorf("client: %v at %s: replica %d answered already", op, a.e.addr, a.stamp.Replica)
		} else if err = fmt.Errorf("client: %v at %s: %w", op, a.e.addr, a.err); !refusedUnrun(a.err) {
			// Refused before running (overloaded, busy) leaves the
			// endpoint up and another replica may answer; otherwise
			// only an unavailable endpoint is replaced.
			if !errors.Is(err, ErrUnavailable) {
				return err
			}
			c.markDown(a.e, err)
		}
		errs = append(errs, err)
		if next < len(route) {
			c.stats.failovers.Add(1)
			ask(next)
			next++
			pending++
		}
	}
	// Nearest first.
	for i := range got {
		for j := i; j > 0 && got[j].pos < got[j-1].pos; j-- {
			got[j], got[j-1] = got[j-1], got[j]
		}
	}
	stamps := make([]Stamp, len(got))
	for i, a := range got {
		stamps[i] = a.stamp
	}
	best := got[0]
	if i := coversAll(stamps); i >= 0 {
		best = got[i]
	} else {
		c.stats.quorumWaits.Add(1)
		if best, err = c.catchUp(ctx, op, req, ls, got, answers, Stamp{VV: unionVV(stamps)}, tr); err != nil {
			return err
		}
	}
	tr.Endpoint = best.e.addr
	v := best.view
	v.Level, v.Final, v.Elapsed, v.Confirmed = level, false, 0, false
	if err := emit(v); err != nil && !errors.Is(err, correctable.ErrClosed) {
		return fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	return nil
}

// catchUp asks every replica that answered a quorum read again, at once,
// to run the read once it has received what want (the union of the first
// answers' version vectors) counts (the request's min_vv: the replica
// holds it until then, so the answer comes as soon as gossip has brought
// the missing operations, with no polling), and returns the first answer
// that covers want; an answer of the first round still on its way (late)
// counts too. A replica that refuses the read before running it (it was
// still behind after its wait bound) is asked again, and one that answers
// without covering want (a replica that ignores min_vv) is polled with a
// backoff; one that fails otherwise stops being asked; the read fails once
// none is left, or when ctx ends.
func (c *Client) catchUp(ctx context.Context, op Op, req *api.InvokeRequest, ls levelSet, got []quorumAnswer, late <-chan quorumAnswer, want Stamp, tr *OpTrace) (quorumAnswer, error) {
	pctx, cancel := context.WithCancel(ctx)
	defer cancel() // the polls not waited for
	req = proto.CloneOf(req)
	req.MinVv = want.VV
	answers := make(chan quorumAnswer, len(got))
	for _, g := range got {
		go func() {
			backoff := quorumPollBackoff
			for first := true; first || pollPause(pctx, &backoff); first = false {
				var t2 OpTrace
				a := quorumAnswer{pos: g.pos, e: g.e}
				_, _, a.err = c.invokeAt(pctx, g.e, req, ls, func(v correctable.View[Result]) error {
					a.view = v
					return nil
				}, &t2)
				if a.err == nil {
					a.stamp, _ = StampOf(a.view)
					if !a.stamp.Covers(want) {
						continue
					}
				} else if refusedUnrun(a.err) {
					continue
				}
				select {
				case answers <- a:
				case <-pctx.Done():
				}
				return
			}
		}()
	}
	var errs []error
	for left := len(got); left > 0; left-- {
		select {
		case <-ctx.Done():
			return quorumAnswer{}, fmt.Errorf("client: %v: quorum read: waiting for a replica of the majority to receive what the others had: %w", op, context.Cause(ctx))
		case a := <-late:
			tr.Attempts++
			left++ // not one of the polls
			if a.err == nil && a.stamp.Covers(want) {
				return a, nil
			}
		case a := <-answers:
			tr.Attempts++
			if a.err == nil {
				return a, nil
			}
			errs = append(errs, fmt.Errorf("client: %v at %s: quorum read: %w", op, a.e.addr, a.err))
		}
	}
	return quorumAnswer{}, errors.Join(errs...)
}

// answeredBy reports whether one of got came from replica id (0: unknown,
// never a match).
func answeredBy(got []quorumAnswer, id uint64) bool {
	if id == 0 {
		return false
	}
	for _, g := range got {
		if g.stamp.Replica == id {
			return true
		}
	}
	return false
}

// quorumHedge is how long a quorum read waits for the majority it asked
// before it asks the other endpoints too: twice the slowest of their
// round-trip times as the Client's probes measured them, and at least
// quorumHedgeMin. One slow replica or link (a retransmission on a lossy
// network, a replica in a pause) then costs a read little more than that.
func quorumHedge(asked []*endpoint) time.Duration {
	var rtt time.Duration
	for _, e := range asked {
		e.mu.Lock()
		rtt = max(rtt, e.rttLocked())
		e.mu.Unlock()
	}
	return max(2*rtt, quorumHedgeMin)
}

// quorumHedgeMin bounds quorumHedge from below.
const quorumHedgeMin = time.Millisecond

// pollPause waits backoff, then doubles it up to quorumPollMax; it
// reports false, at once, if ctx ends first.
func pollPause(ctx context.Context, backoff *time.Duration) bool {
	t := time.NewTimer(*backoff)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	}
	*backoff = min(2**backoff, quorumPollMax)
	return true
}

// quorumPollBackoff and quorumPollMax space the repeated asks of a quorum
// read that waits for a replica to catch up and of a quorum write that
// waits for a majority to receive it: the first after quorumPollBackoff,
// each next twice as late, up to quorumPollMax apart.
const (
	quorumPollBackoff = 250 * time.Microsecond
	quorumPollMax     = 10 * time.Millisecond
)

// quorumWrite runs the update op weakly at the nearest replica, then waits
// until a majority of the endpoints (with all, every endpoint) has received
// it (see InvokeQuorum and InvokeAll).
func (c *Client) quorumWrite(ctx context.Context, op Op, emit correctable.Emitter[Result], tr *OpTrace, all bool) error {
	if all {
		// An update at all would wait for a replica known to be down, and
		// fail after applying at its origin: refuse it first, running
		// nothing (Cassandra's Unavailable).
		for _, e := range c.endpoints {
			if info := e.info(); !info.Healthy {
				return fmt.Errorf("client: %v: %v write: endpoint %s is down (%v); an update at all needs every replica: ran nothing: %w",
					op, All, e.addr, info.Err, ErrUnavailable)
			}
		}
	}
	var view correctable.View[Result]
	viewed := false
	if err := c.run(ctx, op, []correctable.Level{correctable.Eventual}, false, func(v correctable.View[Result]) error {
		view, viewed = v, true
		return nil
	}, tr); err != nil {
		return err
	}
	st, ok := StampOf(view)
	if !viewed || !ok || st.Op.IsZero() {
		return fmt.Errorf("client: %v at %s: %w: a weak update's view without its operation id", op, tr.Endpoint, ErrProtocol)
	}
	origin := tr.Endpoint
	route := c.route()
	need, level := len(route)/2+1-1, Quorum // the origin has it
	if all {
		need, level = len(route)-1, All
	}
	if need > 0 {
		if err := c.awaitReceived(ctx, op, st.Op, origin, route, need, level, tr); err != nil {
			return err
		}
	}
	view.Level, view.Final, view.Elapsed, view.Confirmed = level, false, 0, false
	if err := emit(view); err != nil && !errors.Is(err, correctable.ErrClosed) {
		return fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	return nil
}

// awaitReceived asks the Status of every endpoint but origin's, with id as
// min_vv (the replica answers once it has id, or at its wait bound), and
// again with a backoff while an answer lacks id, until need distinct
// replicas other than the origin report that they have received the
// operation id (their version vector includes it). An endpoint whose
// Status fails is marked down and asked again: it counts as unable to
// answer only once it has failed for quorumUnavailableAfter (a blip of the
// connection does not fail a write its origin has applied); the write
// fails with ErrUnavailable once fewer endpoints than it needs can answer.
func (c *Client) awaitReceived(ctx context.Context, op Op, id OpID, origin string, route []*endpoint, need int, level correctable.Level, tr *OpTrace) error {
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type receipt struct {
		e       *endpoint
		replica uint64
		err     error
	}
	receipts := make(chan receipt, len(route))
	asked := 0
	for _, e := range route {
		if e.addr == origin {
			continue
		}
		asked++
		go func() {
			backoff := quorumPollBackoff
			var failingSince time.Time
			for first := true; ; first = false {
				if !first && !pollPause(pctx, &backoff) {
					return
				}
				// The replica answers once it has the operation (or at
				// its wait bound): no polling, unless it ignores min_vv.
				rep, err := e.store.Status(pctx, &api.StatusRequest{MinVv: map[uint64]uint64{id.Origin: id.Seq}})
				if pctx.Err() != nil {
					return
				}
				var r receipt
				switch {
				case err != nil:
					err = errorFromStatus(pctx, err)
					if !errors.Is(err, ErrUnavailable) {
						r = receipt{e: e, err: err}
						break
					}
					if failingSince.IsZero() {
						failingSince = time.Now()
						c.markDown(e, err)
					}
					if time.Since(failingSince) < quorumUnavailableAfter {
						continue
					}
					r = receipt{e: e, err: err}
				case rep.GetId() == id.Origin:
					r = receipt{e: e, err: fmt.Errorf("replica %d, the write's origin, under another address", id.Origin)}
				case rep.GetVv()[id.Origin] >= id.Seq:
					r = receipt{e: e, replica: rep.GetId()}
				default:
					failingSince = time.Time{}
					continue
				}
				receipts <- r
				return
			}
		}()
	}
	confirmed := map[uint64]bool{}
	var errs []error
	for left := asked; need > 0; left-- {
		if left < need {
			if c.isClosed() {
				return fmt.Errorf("client: %v: %v write: %w", op, level, ErrClosed)
			}
			return fmt.Errorf("client: %v: %v write of operation %d:%d: %d more of the %d endpoints must receive it, %d can answer: %w: %w",
				op, level, id.Origin, id.Seq, need, len(route), left, ErrUnavailable, errors.Join(errs...))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("client: %v: %v write of operation %d:%d, accepted at %s: waiting for %d more replicas to receive it: %w", op, level, id.Origin, id.Seq, origin, need, context.Cause(ctx))
		case r := <-receipts:
			tr.Attempts++
			switch {
			case r.err != nil:
				errs = append(errs, fmt.Errorf("%s: %w", r.e.addr, r.err))
			case r.replica != 0 && confirmed[r.replica]:
				errs = append(errs, fmt.Errorf("%s: replica %d counted already", r.e.addr, r.replica))
			default:
				confirmed[r.replica] = true
				need--
			}
		}
	}
	return nil
}

// quorumUnavailableAfter is how long an endpoint's Status may fail before
// a quorum write stops counting on it.
const quorumUnavailableAfter = time.Second

// dependsOn returns what the result of the view stamped s depends on: its
// ReadVV, or, from a replica that does not report one, its whole VV.
func dependsOn(s Stamp) map[uint64]uint64 {
	if s.ReadVV != nil {
		return s.ReadVV
	}
	return s.VV
}

// coversAll returns the index of the stamp whose version vector covers what
// every stamp's result depends on (dependsOn: the longest committed order
// first, then the lowest index), or -1 if none does.
func coversAll(s []Stamp) int {
	best := -1
	for i := range s {
		all := true
		for j := range s {
			if !s[i].Covers(Stamp{VV: dependsOn(s[j])}) {
				all = false
				break
			}
		}
		if all && (best < 0 || s[i].CommittedCount > s[best].CommittedCount) {
			best = i
		}
	}
	return best
}

// unionVV is the least version vector covering what every stamp's result
// depends on (dependsOn).
func unionVV(s []Stamp) map[uint64]uint64 {
	u := map[uint64]uint64{}
	for _, x := range s {
		for o, seq := range dependsOn(x) {
			u[o] = max(u[o], seq)
		}
	}
	return u
}
