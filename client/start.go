package client

import (
	"context"
	"errors"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/correctables/correctables/correctable"
)

// Start implements correctable.Starter: an operation that asks for one
// view and goes first to an endpoint whose pipe is open is queued on that
// pipe, and the pipe's reader emits its view; no goroutine waits for it,
// and it costs the caller no hand-off to one. Any other operation (both
// views, no open pipe, a request over 64 KiB, a full send queue) is left to
// Submit (false). An operation that fails on the pipe goes on as Submit
// would have gone on after that attempt: the error if it may have run,
// otherwise Submit's whole route, on a goroutine of its own.
func (c *Client) Start(ctx context.Context, op Op, levels []correctable.Level, emit correctable.Emitter[Result], done func(error)) bool {
	if len(levels) != 1 || !c.cfg.pipe || ctx.Err() != nil || c.isClosed() {
		return false
	}
	ls, err := toLevelSet(levels)
	if err != nil {
		return false
	}
	pop, err := toAPIOp(op)
	if err != nil {
		return false
	}
	route := c.routeFor(op, ls)
	if len(route) == 0 {
		return false
	}
	e := route[0]
	p := e.pipe.Load()
	if p == nil || !p.live() || e.noPipe.Load() {
		return false
	}
	req := toAPIRequest(pop, ls, false, c.cfg.noConfirm)
	size := proto.Size(req)
	if size > maxBatchedCall {
		return false
	}
	start := time.Now()
	tr := &OpTrace{Op: op, Endpoint: e.addr, Attempts: 1}
	if c.cfg.recorder != nil {
		emit = c.cfg.recorder.traceEmitter(op, traceStart(ctx), levels[0], emit)
	}
	po := newPipeOp(ctx, req, size)
	// A caller that gives up takes the operation out of the pipe, as one
	// waiting in pipeCall does; one that ends otherwise stops watching.
	var stop func() bool
	po.then = func() {
		stop()
		c.startedEnd(ctx, op, levels, ls, e, po, emit, done, start, tr)
	}
	stop = context.AfterFunc(ctx, func() {
		if p.remove(po) {
			done(c.ended(ctx, start, tr, context.Cause(ctx)))
		}
	})
	c.stats.ops.Add(1)
	if !p.add(po) {
		stop()
		c.stats.ops.Add(^uint64(0)) // not started: Submit counts it
		return false
	}
	select {
	case p.sendq <- po:
	default:
		// The queue is full: Submit waits for room, as a caller should.
		if p.remove(po) {
			stop()
			c.stats.ops.Add(^uint64(0))
			return false
		}
		// The pipe failed meanwhile: then has run, or runs, and goes on.
	}
	return true
}

// startedEnd is the end of an operation Start queued, run once its pipe
// resolved it: what callAt and runRoute do after the first attempt.
func (c *Client) startedEnd(ctx context.Context, op Op, levels []correctable.Level, ls levelSet, e *endpoint, po *pipeOp,
	emit correctable.Emitter[Result], done func(error), start time.Time, tr *OpTrace) {
	if ctx.Err() != nil {
		// The caller gave up (the Correctable has failed already).
		done(c.ended(ctx, start, tr, context.Cause(ctx)))
		return
	}
	rep, sent, err := c.pipeOutcome(ctx, e, po, tr)
	viewed := false
	if err == nil {
		sent, viewed, err = c.emitCalled(rep, ls, emit, tr)
		if err == nil {
			done(c.ended(ctx, start, tr, nil))
			return
		}
	}
	if errors.Is(err, errNoPipe) {
		c.goOn(ctx, op, levels, emit, done, start, tr, false) // calls, from the first endpoint
		return
	}
	if next, _, err := c.attemptFailed(op, e, sent, viewed, op.retryable(), err); !next {
		done(c.ended(ctx, start, tr, err))
		return
	}
	c.goOn(ctx, op, levels, emit, done, start, tr, true)
}

// goOn runs an operation whose start on a pipe failed before it ran, as
// Submit runs one, on a goroutine of its own (it may wait for a
// connection, or back off); a failover if the pipe's endpoint failed it.
func (c *Client) goOn(ctx context.Context, op Op, levels []correctable.Level, emit correctable.Emitter[Result], done func(error), start time.Time, tr *OpTrace, failover bool) {
	if failover {
		c.stats.failovers.Add(1)
	}
	go func() {
		done(c.ended(ctx, start, tr, c.run(ctx, op, levels, false, emit, tr)))
	}()
}
