package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/correctable"
)

var _ correctable.Binding[Op, Result] = (*Client)(nil)

// levels is what Levels returns; never modified.
var levels = []correctable.Level{correctable.Eventual, correctable.Strong}

// Levels returns correctable.Eventual and correctable.Strong: the
// preliminary view, executed at once on one replica's tentative state, and
// the final view, strongly consistent (CAB for updates, ReadIndex for
// reads).
func (c *Client) Levels() []correctable.Level { return levels }

// Submit runs op at the requested levels and emits its views; it implements
// correctable.Binding. Use Invoke, InvokeWeak and InvokeStrong rather than
// calling it. The levels map to one request:
//
//	Eventual          preliminary            (weak protocol)
//	Strong            final, strong          (strong protocol)
//	Eventual, Strong  preliminary, final, strong
//
// A final view that equals the preliminary one arrives as a confirmation:
// the view has Confirmed set and the preliminary view's value.
func (c *Client) Submit(ctx context.Context, op Op, levels []correctable.Level, emit correctable.Emitter[Result]) error {
	return c.submit(ctx, op, levels, false, emit)
}

// Invoke runs op and returns its views at the given levels, weakest first;
// with no levels, at both: a preliminary view and a final one (Correctables
// §3.2 invoke).
func (c *Client) Invoke(ctx context.Context, op Op, levels ...correctable.Level) *correctable.Correctable[Result] {
	return correctable.Invoke(ctx, c, op, levels...)
}

// InvokeWeak runs op with the weak protocol and returns its one view, from
// the nearest replica's tentative state (Correctables §3.2 invokeWeak).
func (c *Client) InvokeWeak(ctx context.Context, op Op) *correctable.Correctable[Result] {
	return correctable.InvokeWeak(ctx, c, op)
}

// InvokeStrong runs op with the strong protocol and returns its one,
// strongly consistent view (Correctables §3.2 invokeStrong).
func (c *Client) InvokeStrong(ctx context.Context, op Op) *correctable.Correctable[Result] {
	return correctable.InvokeStrong(ctx, c, op)
}

// InvokeWeakCommitted runs update op with the weak protocol, like
// InvokeWeak, and also returns its committed view: the preliminary view at
// correctable.Eventual at once, then, once a later strong operation (or the
// replicas' periodic strong no-op) has fixed the update's place in the
// committed order, its result in that order as the final view, at
// correctable.Strong. The committed order respects real time (an operation
// is committed after it was invoked and before its final view arrives), so
// final views are linearizable like those of strong operations; the update
// itself did not wait for consensus.
//
// Weak reads have no committed view: for a read-only op (Get, Scan, a Txn
// without writes) the Correctable fails with ErrInvalidArgument.
func (c *Client) InvokeWeakCommitted(ctx context.Context, op Op) *correctable.Correctable[Result] {
	return correctable.Invoke(ctx, weakCommitted{c}, op)
}

// weakCommitted is the binding behind InvokeWeakCommitted: the Client's
// levels, with the final view from the weak protocol.
type weakCommitted struct{ c *Client }

func (b weakCommitted) Levels() []correctable.Level { return levels }

func (b weakCommitted) Submit(ctx context.Context, op Op, levels []correctable.Level, emit correctable.Emitter[Result]) error {
	if op.ReadOnly() {
		return fmt.Errorf("client: %v: %w: a weak read has no committed view", op, ErrInvalidArgument)
	}
	return b.c.submit(ctx, op, levels, true, emit)
}

// levelSet is a request's levels.
type levelSet struct{ eventual, strong bool }

func toLevelSet(ls []correctable.Level) (levelSet, error) {
	var s levelSet
	for _, l := range ls {
		switch l {
		case correctable.Eventual:
			s.eventual = true
		case correctable.Strong:
			s.strong = true
		default:
			return s, fmt.Errorf("%w: level %v (the Client offers %v)", ErrInvalidArgument, l, levels)
		}
	}
	if !s.eventual && !s.strong {
		return s, fmt.Errorf("%w: no level", ErrInvalidArgument)
	}
	return s, nil
}

// submit runs op at the nearest healthy endpoint (an update for the final
// view only at the leader, see leaderFirst), failing over to the next
// one on Unavailable as long as that cannot run op twice: before any view
// arrived, and, for an update, only if its request never left the client;
// and on a replica's refusal before running it (api.RefusedMarker).
func (c *Client) submit(ctx context.Context, op Op, levels []correctable.Level, weak bool, emit correctable.Emitter[Result]) error {
	start := time.Now()
	c.stats.ops.Add(1)
	tr := OpTrace{Op: op}
	if c.cfg.recorder != nil && len(levels) > 0 {
		emit = c.cfg.recorder.traceEmitter(op, traceStart(ctx), levels[len(levels)-1], emit)
	}
	return c.ended(ctx, start, &tr, c.run(ctx, op, levels, weak, emit, &tr))
}

// ended counts and traces an operation's end, and returns its error.
func (c *Client) ended(ctx context.Context, start time.Time, tr *OpTrace, err error) error {
	if err != nil && ctx.Err() == nil {
		c.stats.failed.Add(1)
	}
	if c.cfg.trace != nil {
		tr.Elapsed, tr.Err = time.Since(start), err
		c.cfg.trace(*tr)
	}
	return err
}

// MaxRequestBytes bounds an encoded request. Servers refuse operations whose
// keys and values exceed 3 MiB together (state limits) in any case.
const MaxRequestBytes = 16 << 20

func (c *Client) run(ctx context.Context, op Op, levels []correctable.Level, weak bool, emit correctable.Emitter[Result], tr *OpTrace) error {
	if c.isClosed() {
		return fmt.Errorf("client: %v: %w", op, ErrClosed)
	}
	ls, err := toLevelSet(levels)
	if err != nil {
		return fmt.Errorf("client: %v: %w", op, err)
	}
	pop, err := toAPIOp(op)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	req := toAPIRequest(pop, ls, weak, c.cfg.noConfirm)
	if n := proto.Size(req); n > MaxRequestBytes {
		// Refused here: a server would refuse it too, as a resource limit
		// that reads like overload and invites a retry that cannot succeed.
		return fmt.Errorf("client: %v: request of %d bytes over %d: %w", op, n, MaxRequestBytes, ErrInvalidArgument)
	}
	retryable := op.retryable()
	backoff := fencedBackoff
	for waited := time.Duration(0); ; {
		fenced, err := c.runRoute(ctx, op, req, ls, retryable, emit, tr)
		if err == nil || !fenced || waited >= fencedRetryFor || c.isClosed() {
			return err
		}
		// Every endpoint refused it as restarted and catching up (the whole
		// cluster restarted): they take updates once a leader's first
		// entry is applied, so try again shortly.
		c.cfg.logger.Debug("client: every replica is catching up after a restart; retrying", "op", op, "in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		waited += backoff
		backoff = min(2*backoff, fencedBackoffMax)
	}
}

// fencedBackoff and fencedBackoffMax space the rounds of an operation that
// every endpoint refused as restarted and catching up (api.FencedMarker);
// fencedRetryFor bounds their waits, a few election timeouts.
const (
	fencedBackoff    = 25 * time.Millisecond
	fencedBackoffMax = 500 * time.Millisecond
	fencedRetryFor   = 5 * time.Second
)

// runRoute tries req at the endpoints of the route in turn (see submit). It
// reports whether every endpoint tried refused it as restarted and catching
// up (fenced), which is worth another round.
func (c *Client) runRoute(ctx context.Context, op Op, req *api.InvokeRequest, ls levelSet, retryable bool, emit correctable.Emitter[Result], tr *OpTrace) (fenced bool, err error) {
	route := c.routeFor(op, ls)
	var errs []error
	fenced = len(route) > 0
	for i, e := range route {
		if i > 0 {
			c.stats.failovers.Add(1)
			c.cfg.logger.Debug("client: failing over", "op", op, "endpoint", e.addr, "err", errs[len(errs)-1])
		}
		tr.Endpoint = e.addr
		tr.Attempts++
		sent, viewed, err := c.invokeAt(ctx, e, req, ls, emit, tr)
		if err == nil {
			return false, nil
		}
		next, refused, err := c.attemptFailed(op, e, sent, viewed, retryable, err)
		if refused {
			fenced = fenced && refusedFenced(err)
			errs = append(errs, err)
			continue
		}
		fenced = false
		if !next {
			return false, err
		}
		errs = append(errs, err)
	}
	if len(errs) == 1 {
		return fenced, errs[0]
	}
	return fenced, errors.Join(errs...)
}

// routeFor returns the endpoints to try op at, in order: the nearest
// healthy first, the leader first for an update that asks for the final
// view only (leaderFirst).
func (c *Client) routeFor(op Op, ls levelSet) []*endpoint {
	route := c.route()
	if ls.strong && !ls.eventual && !op.ReadOnly() {
		route = c.leaderFirst(route)
	}
	return route
}

// attemptFailed decides what follows an attempt at e that failed with
// err: whether the operation may go on to the next endpoint (next), and
// whether e refused it before running it (refused; then next is true),
// with err as the operation reports it. An endpoint that is unavailable is
// marked down.
func (c *Client) attemptFailed(op Op, e *endpoint, sent, viewed, retryable bool, err error) (next, refused bool, _ error) {
	if c.isClosed() {
		return false, false, fmt.Errorf("client: %v at %s: %w", op, e.addr, ErrClosed)
	}
	err = fmt.Errorf("client: %v at %s: %w", op, e.addr, err)
	if refusedUnrun(err) && !viewed {
		// Refused before running (ResourceExhausted with
		// api.RefusedMarker): another replica may take the operation
		// now, e.g. when this one has just restarted and is catching up
		// with its cluster. The endpoint stays up.
		return true, true, err
	}
	if !errors.Is(err, ErrUnavailable) {
		return false, false, err
	}
	c.markDown(e, err)
	if viewed || (sent && !retryable && !notRun(err)) {
		return false, false, err
	}
	return true, false, err
}

// invokeAt runs req at e and emits its views. It reports whether the
// request left the client and whether any view arrived, so that the caller
// knows whether trying elsewhere could run the operation twice.
//
// A request for one view goes as the unary Call, which costs both ends
// less than the stream of Invoke; one for both views as Invoke. An
// endpoint that does not know Call (a replica older than it: Unimplemented,
// which gRPC answers before any handler runs) gets Invoke from then on.
func (c *Client) invokeAt(ctx context.Context, e *endpoint, req *api.InvokeRequest, ls levelSet, emit correctable.Emitter[Result], tr *OpTrace) (sent, viewed bool, err error) {
	if ls.eventual != ls.strong && !e.noCall.Load() {
		sent, viewed, err := c.callAt(ctx, e, req, ls, emit, tr)
		if err != errNoCall {
			return sent, viewed, err
		}
		e.noCall.Store(true)
		c.cfg.logger.Debug("client: endpoint does not implement Call; using Invoke for single-view operations", "endpoint", e.addr)
	}
	return c.streamAt(ctx, e, req, ls, emit, tr)
}

// errNoCall: the endpoint answered Call with Unimplemented.
var errNoCall = errors.New("client: Call not implemented by the endpoint")

// callAt runs req, which asks for one view, at e with the unary Call and
// emits the view; it returns errNoCall if e does not implement Call.
// Otherwise it reports and counts like streamAt: the same errors, the same
// stats and trace fields, the same protocol checks.
func (c *Client) callAt(ctx context.Context, e *endpoint, req *api.InvokeRequest, ls levelSet, emit correctable.Emitter[Result], tr *OpTrace) (sent, viewed bool, err error) {
	rep, sent, err := c.send1(ctx, e, req, tr)
	if err != nil {
		return sent, false, err
	}
	return c.emitCalled(rep, ls, emit, tr)
}

// emitCalled emits the one view of a call's reply; it reports as callAt.
func (c *Client) emitCalled(rep *api.ViewReply, ls levelSet, emit correctable.Emitter[Result], tr *OpTrace) (sent, viewed bool, err error) {
	var rd reader
	v, _, err := rd.view(rep, ls) // one view asked for: it is the last
	if err != nil {
		return true, false, err
	}
	c.stats.views.Add(1)
	tr.Views++
	if err := emit(v); err != nil {
		if errors.Is(err, correctable.ErrClosed) {
			return true, true, nil // the invocation ended: nothing to report
		}
		return true, true, fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	return true, true, nil
}

// send1 sends req, which asks for one view, to e: on e's pipe if it has
// one, otherwise as a Call or in a CallBatch. It returns the reply and
// whether the request may have left the client.
func (c *Client) send1(ctx context.Context, e *endpoint, req *api.InvokeRequest, tr *OpTrace) (*api.ViewReply, bool, error) {
	size := -1
	if c.cfg.pipe && !e.noPipe.Load() && e.pipeUsable() {
		// One message each way. A request over maxBatchedCall takes a call
		// of its own, so as not to hold back the pipe's other messages
		// while it is written.
		if size = proto.Size(req); size <= maxBatchedCall {
			rep, sent, err := c.pipeCall(ctx, e, req, size, tr)
			if err != errNoPipe {
				return rep, sent, err
			}
		}
	}
	// A read with a min_vv may wait at the replica: never in a batch,
	// whose reply it would hold back.
	if c.cfg.batchInflight > 0 && !e.noBatch.Load() && len(req.GetMinVv()) == 0 {
		if size < 0 {
			size = proto.Size(req)
		}
		if size <= maxBatchedCall {
			rep, sent, err := c.batchedCall(ctx, e, req, size, tr)
			if err == errNoBatch {
				e.noBatch.Store(true)
				c.cfg.logger.Debug("client: endpoint does not implement CallBatch; sending calls one by one", "endpoint", e.addr)
			}
			if err != errNoBatch && err != errBatchFull {
				return rep, sent, err
			}
		}
	}
	return c.unaryCall(ctx, e, req, tr)
}

// unaryCall sends req as one Call to e and returns the reply, whether the
// request left the client, and errNoCall if e does not implement Call.
func (c *Client) unaryCall(ctx context.Context, e *endpoint, req *api.InvokeRequest, tr *OpTrace) (*api.ViewReply, bool, error) {
	a := newAttempt()
	// No cancel of its own, unlike a stream: a unary call ends with its
	// reply.
	ctx = context.WithValue(ctx, attemptKey{}, a)
	rep, err := e.store.Call(ctx, req)
	sent := a.sent.Load()
	if sent {
		c.countSent(a, req, tr)
	}
	if err != nil {
		if ctx.Err() == nil && status.Code(err) == codes.Unimplemented {
			return nil, sent, errNoCall
		}
		return nil, sent, errorFromStatus(ctx, err)
	}
	c.countReceived(a, rep, tr)
	return rep, true, nil
}

// countSent and countReceived add a request's and a reply's encoded
// sizes (as the wire counter saw them in attempt a) to the Client's stats
// and the operation's trace.
func (c *Client) countSent(a *attempt, req *api.InvokeRequest, tr *OpTrace) {
	n := size(a.reqBytes.Load(), req)
	c.stats.bytesSent.Add(uint64(n))
	tr.BytesSent += n
}

func (c *Client) countReceived(a *attempt, rep *api.ViewReply, tr *OpTrace) {
	n := size(a.inBytes.Load(), rep)
	c.stats.bytesReceived.Add(uint64(n))
	tr.BytesReceived += n
}

// streamAt runs req at e with the server-streaming Invoke and emits its
// views.
func (c *Client) streamAt(ctx context.Context, e *endpoint, req *api.InvokeRequest, ls levelSet, emit correctable.Emitter[Result], tr *OpTrace) (sent, viewed bool, err error) {
	a := newAttempt()
	ctx, cancel := context.WithCancel(context.WithValue(ctx, attemptKey{}, a))
	defer cancel() // ends the stream whatever the server still sends
	stream, err := e.store.Invoke(ctx, req)
	if a.sent.Load() {
		c.countSent(a, req, tr)
	}
	if err != nil {
		return a.sent.Load(), false, errorFromStatus(ctx, err)
	}
	var rd reader
	for {
		a.inBytes.Store(-1)
		rep, err := stream.Recv()
		if err == io.EOF {
			return true, rd.viewed, fmt.Errorf("%w: the stream ended without the final view", ErrProtocol)
		}
		if err != nil {
			return true, rd.viewed, errorFromStatus(ctx, err)
		}
		c.countReceived(a, rep, tr)
		v, last, err := rd.view(rep, ls)
		if err != nil {
			return true, rd.viewed, err
		}
		c.stats.views.Add(1)
		tr.Views++
		if v.Confirmed {
			saved := proto.Size(rd.prelim)
			c.stats.confirmations.Add(1)
			c.stats.bytesSaved.Add(uint64(saved))
			tr.Confirmed, tr.BytesSaved = true, saved
		}
		if err := emit(v); err != nil {
			if errors.Is(err, correctable.ErrClosed) {
				return true, true, nil // the invocation ended: nothing to report
			}
			return true, true, fmt.Errorf("%w: %w", ErrProtocol, err)
		}
		if last {
			return true, true, nil
		}
	}
}

// reader turns a stream of replies into views, checking the protocol.
type reader struct {
	viewed bool
	prelim *api.Result // the preliminary view's result
}

// view decodes one reply. last reports that the view is at the strongest
// requested level: nothing follows it.
func (rd *reader) view(rep *api.ViewReply, ls levelSet) (v correctable.View[Result], last bool, err error) {
	switch {
	case !rep.GetFinal() && !ls.eventual:
		return v, false, fmt.Errorf("%w: a preliminary view, not requested", ErrProtocol)
	case !rep.GetFinal() && rd.viewed:
		return v, false, fmt.Errorf("%w: a second preliminary view", ErrProtocol)
	case rep.GetConfirmed() && !rep.GetFinal():
		return v, false, fmt.Errorf("%w: a confirmation in a preliminary view", ErrProtocol)
	case rep.GetConfirmed() && rd.prelim == nil:
		return v, false, fmt.Errorf("%w: a confirmation without a preliminary view", ErrProtocol)
	case !rep.GetConfirmed() && rep.GetResult() == nil:
		return v, false, fmt.Errorf("%w: a view without a result", ErrProtocol)
	}
	// Without a final view requested, the one reply is the eventual view,
	// whether or not the server marks it final.
	v.Level = correctable.Eventual
	last = true
	if !rep.GetFinal() {
		last = !ls.strong
		rd.prelim = rep.GetResult()
	} else if ls.strong {
		v.Level = correctable.Strong
	}
	if rep.GetConfirmed() {
		v.Confirmed = true
		v.Value = fromAPIResult(rd.prelim) // the Correctable reuses the previous value anyway
	} else {
		v.Value = fromAPIResult(rep.GetResult())
	}
	if rep.GetStamp() != nil || rep.GetId() != nil {
		v.Stamp = fromAPIStamp(rep.GetStamp(), rep.GetId())
	}
	rd.viewed = true
	return v, last, nil
}
