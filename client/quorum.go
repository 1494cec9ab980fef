package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/correctables/correctables/correctable"
)

// Quorum is the level of a quorum read's view (InvokeQuorum): the freshest
// of the tentative states of a majority of the replicas. It ranks above
// correctable.Eventual, whose view is one replica's tentative state, and
// below every session guarantee and correctable.Strong: a quorum read
// promises none of them.
var Quorum = correctable.NewLevel("quorum", 150)

// quorumLevels is what the quorum binding's Levels returns; never modified.
var quorumLevels = []correctable.Level{Quorum}

// InvokeQuorum runs the read-only op (Get, Scan, a Txn without writes) as a
// quorum read and returns its one view, at level Quorum. The read is the
// weak protocol sent to a majority of the Client's endpoints at once, the
// nearest healthy ones (an endpoint that is unavailable is replaced by the
// next). Their answers' stamps say which operations each replica had
// received (version vectors):
//
//   - if one answer's version vector covers every other's, the read returns
//     it (among several such, the one with the longest committed order,
//     then the nearest);
//   - otherwise (each had received operations the others had not, the usual
//     case under concurrent updates at several replicas), the read asks the
//     nearest of them again, with a short backoff, until its answer covers
//     the union of the answers' version vectors, and returns that answer.
//     Gossip brings the missing operations: on a WAN the nearest replica
//     usually has them by the time the farther answers arrive.
//
// Either way the view is one replica's tentative state that includes every
// operation any replica of the majority had received when it answered. So
// it includes every update that a majority of the replicas had received
// before the read started (two majorities share a replica), and everything
// a weak read of the nearest replica would have seen. It is no raft round:
// it costs one round trip to the farthest replica of the nearest majority,
// and the wait for the nearest to catch up when the states differ.
// Continuous Partial Quorums (SCDM'15) §1 calls such a read QUORUM.
//
// What it does not promise: it is not linearizable. An update counts as
// received where gossip or a committed raft entry has brought it; an update
// is acknowledged earlier than a majority receives it, a weak update once
// its origin has it and a strong update once raft has committed it, which
// is when it is in a majority's logs, not yet necessarily applied there. So
// a quorum read that starts after an update completed may miss it, and two
// quorum reads may order concurrent updates differently (the views are
// tentative states). The majority is of the endpoints the Client was
// dialled with: give it every replica's endpoint. If the nearest replica
// stops receiving from the others, the read waits for it until ctx ends.
//
// A non-read-only op fails with ErrInvalidArgument; with fewer endpoints
// answering than a majority the read fails with ErrUnavailable.
func (c *Client) InvokeQuorum(ctx context.Context, op Op) *correctable.Correctable[Result] {
	return correctable.Invoke(ctx, quorumRead{c}, op)
}

// quorumRead is the binding behind InvokeQuorum.
type quorumRead struct{ c *Client }

func (b quorumRead) Levels() []correctable.Level { return quorumLevels }

// quorumAnswer is one replica's answer to a quorum read.
type quorumAnswer struct {
	pos   int // position in the route: 0 is the nearest asked
	e     *endpoint
	view  correctable.View[Result]
	stamp Stamp
	err   error
}

func (b quorumRead) Submit(ctx context.Context, op Op, levels []correctable.Level, emit correctable.Emitter[Result]) error {
	c := b.c
	if !op.ReadOnly() {
		return fmt.Errorf("client: %v: %w: a quorum read is for read-only operations", op, ErrInvalidArgument)
	}
	start := time.Now()
	c.stats.ops.Add(1)
	tr := OpTrace{Op: op}
	if c.cfg.recorder != nil {
		emit = c.cfg.recorder.traceEmitter(op, traceStart(ctx), Quorum, emit)
	}
	err := c.quorum(ctx, op, emit, &tr)
	if err != nil && ctx.Err() == nil {
		c.stats.failed.Add(1)
	}
	if c.cfg.trace != nil {
		tr.Elapsed, tr.Err = time.Since(start), err
		c.cfg.trace(tr)
	}
	return err
}

func (c *Client) quorum(ctx context.Context, op Op, emit correctable.Emitter[Result], tr *OpTrace) error {
	if c.isClosed() {
		return fmt.Errorf("client: %v: %w", op, ErrClosed)
	}
	pop, err := toAPIOp(op)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	ls := levelSet{eventual: true}
	req := toAPIRequest(pop, ls, false, c.cfg.noConfirm)
	if n := proto.Size(req); n > MaxRequestBytes {
		return fmt.Errorf("client: %v: request of %d bytes over %d: %w", op, n, MaxRequestBytes, ErrInvalidArgument)
	}
	route := c.route()
	need := len(route)/2 + 1
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
	next := 0
	for ; next < need; next++ {
		ask(next)
	}
	var got []quorumAnswer
	var errs []error
	for pending := need; len(got) < need; pending-- {
		if pending == 0 {
			return fmt.Errorf("client: %v: quorum read: %d of %d endpoints answered, want %d: %w: %w", op, len(got), len(route), need, ErrUnavailable, errors.Join(errs...))
		}
		a := <-answers
		tr.Attempts++
		if a.err == nil {
			got = append(got, a)
			continue
		}
		if c.isClosed() {
			return fmt.Errorf("client: %v at %s: %w", op, a.e.addr, ErrClosed)
		}
		err := fmt.Errorf("client: %v at %s: %w", op, a.e.addr, a.err)
		if !errors.Is(err, ErrUnavailable) {
			return err
		}
		c.markDown(a.e, err)
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
		// Wait for the nearest to have received what any of them had.
		union := unionVV(stamps)
		backoff := 500 * time.Microsecond
		for {
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("client: %v: quorum read: waiting for %s to catch up: %w", op, best.e.addr, context.Cause(ctx))
			case <-t.C:
			}
			backoff = min(2*backoff, 20*time.Millisecond)
			var t2 OpTrace
			a := quorumAnswer{e: best.e}
			_, _, err := c.invokeAt(ctx, best.e, req, ls, func(v correctable.View[Result]) error {
				a.view = v
				return nil
			}, &t2)
			tr.Attempts++
			if err != nil {
				return fmt.Errorf("client: %v at %s: quorum read: %w", op, best.e.addr, err)
			}
			a.stamp, _ = StampOf(a.view)
			if a.stamp.Covers(Stamp{VV: union}) {
				best = a
				break
			}
		}
	}
	tr.Endpoint = best.e.addr
	v := best.view
	v.Level, v.Final, v.Elapsed, v.Confirmed = Quorum, false, 0, false
	if err := emit(v); err != nil && !errors.Is(err, correctable.ErrClosed) {
		return fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	return nil
}

// coversAll returns the index of the stamp whose version vector covers
// every other's (the longest committed order first, then the lowest index),
// or -1 if none does.
func coversAll(s []Stamp) int {
	best := -1
	for i := range s {
		all := true
		for j := range s {
			if !s[i].Covers(s[j]) {
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

// unionVV is the least version vector covering every stamp's.
func unionVV(s []Stamp) map[uint64]uint64 {
	u := map[uint64]uint64{}
	for _, x := range s {
		for o, seq := range x.VV {
			u[o] = max(u[o], seq)
		}
	}
	return u
}
