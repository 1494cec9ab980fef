package client

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/correctables/correctables/api"
)

// A pipe is an endpoint's Pipe stream (api Store.Pipe): the single-view
// operations sent to the endpoint share it, a share of a message each way
// per operation, instead of a call each (a stream to set up, headers and
// trailers). One goroutine sends what the operations queue, in the order
// they queue it, several to a message; another reads the replies and hands
// each result to the operation its id names. A pipe that fails (the connection broke, the replica
// stopped) fails every operation it holds with that error, as a broken
// call would, and the next operation opens a new one.
type pipe struct {
	a      *attempt // the stream's wire counter: sizes of the last messages
	stream grpc.BidiStreamingClient[api.PipeRequest, api.PipeReply]
	cancel context.CancelFunc
	sendq  chan *pipeOp
	done   chan struct{} // closed once the pipe failed

	// unanswered counts the operations sent and not yet answered; the
	// reader signals replied after each message it dispatched.
	unanswered atomic.Int64
	replied    chan struct{}

	mu      sync.Mutex
	next    uint64
	pending map[uint64]*pipeOp
	err     error // why the pipe failed
}

// pipeOp is one operation in a pipe. Whoever takes it out of the pipe's
// pending map (the reader with its reply, fail, or its caller giving up)
// resolves it.
type pipeOp struct {
	call *api.PipeCall
	size int           // the call's encoded size
	hold time.Duration // how long the sender may hold it (holdFor)
	sent atomic.Bool   // handed to the stream: it may have left
	// reqBytes and inBytes are the operation's shares of the encoded
	// sizes of the messages that carried it, as the wire counter saw them
	// (-1 if it did not).
	reqBytes atomic.Int64
	inBytes  int64
	res      *api.CallResult
	err      error
	done     chan struct{}
	// then, if set, runs once the operation is resolved, on the reader's
	// goroutine (or the failing pipe's): an operation Client.Start queued,
	// which no goroutine waits for.
	then func()
}

// pipeSendQueue bounds the operations queued for a pipe's sender.
const pipeSendQueue = 1024

// errNoPipe: the endpoint answered Pipe with Unimplemented.
var errNoPipe = errors.New("client: Pipe not implemented by the endpoint")

// pipeFor returns e's pipe, opening one if it has none or its last failed.
func (c *Client) pipeFor(e *endpoint) (*pipe, error) {
	if p := e.pipe.Load(); p != nil && p.live() {
		return p, nil
	}
	e.pipeMu.Lock()
	defer e.pipeMu.Unlock()
	if p := e.pipe.Load(); p != nil && p.live() {
		return p, nil
	}
	a := newAttempt()
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), attemptKey{}, a))
	stream, err := e.store.Pipe(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	p := &pipe{
		a:       a,
		stream:  stream,
		cancel:  cancel,
		sendq:   make(chan *pipeOp, pipeSendQueue),
		done:    make(chan struct{}),
		replied: make(chan struct{}, 1),
		pending: make(map[uint64]*pipeOp),
	}
	e.pipe.Store(p)
	go p.send()
	go p.read()
	return p, nil
}

// pipeUsable reports whether an operation may take e's pipe now: e has
// one that has not failed, or its connection is ready to open one. Opening
// a stream on a connection that is still connecting would wait for it
// without the operation's deadline (the pipe outlives the operation): an
// operation then takes a call, which its context bounds, and the next one
// finds the connection ready.
func (e *endpoint) pipeUsable() bool {
	if p := e.pipe.Load(); p != nil && p.live() {
		return true
	}
	return e.conn.GetState() == connectivity.Ready
}

// live reports whether p has not failed.
func (p *pipe) live() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// closePipe ends e's pipe, if any (Client.Close).
func (e *endpoint) closePipe() {
	e.pipeMu.Lock()
	p := e.pipe.Swap(nil)
	e.pipeMu.Unlock()
	if p != nil {
		p.fail(status.Error(codes.Canceled, "client: closed"))
	}
}

// pipeEager is how many operations may be in flight on a pipe before its
// sender waits for a reply, at most a hold, to send the next message: under
// load the operations that queue meanwhile then leave together (the
// adaptive limit of WithCallBatching, for the pipe), one message and one
// write each way for many operations.
//
// How long it waits depends on the operation it holds. A weak read is
// answered as it arrives (off the replica's loop), so replies come close
// together and waiting for the next one (pipeReadHold at most) gathers
// many reads for little delay. Anything else is answered at the end of a
// round of the replica's loop, after its synced write, and a held
// operation sent when the next reply comes (as a round ends) reaches the
// replica just after its loop has begun its next round: it then waits for
// all of that round, synced write included, rather than for the end of the
// one in progress. Those are held pipeHold only, long enough to gather
// the burst of operations that a reply's results set off in a closed loop
// (each caller sends its next as its last returns). Measured on three local
// replicas: weak puts at 64 outstanding were 5-23% faster with 50 us than
// with 500 us (6 of 6 alternations; at 256, where fewer messages save CPU,
// within noise), and weak gets at 256 5-8% slower, hence the two holds.
const (
	pipeEager    = 2 * DefaultBatchInflight
	pipeHold     = 50 * time.Microsecond
	pipeReadHold = 500 * time.Microsecond
)

// holdFor is how long the sender may hold op's message for a reply
// (pipeEager).
func holdFor(req *api.InvokeRequest) time.Duration {
	if req.GetStrong() {
		return pipeHold
	}
	switch op := req.GetOp(); op.GetKind() {
	case api.Kind_KIND_GET, api.Kind_KIND_SCAN:
		return pipeReadHold
	case api.Kind_KIND_TXN:
		if len(op.GetTxn().GetThenWrites()) == 0 && len(op.GetTxn().GetElseWrites()) == 0 {
			return pipeReadHold
		}
	}
	return pipeHold
}

// pipeRequestBytes bounds the calls one PipeRequest gathers (each is at
// most maxBatchedCall).
const pipeRequestBytes = 256 << 10

// send writes the queued operations to the stream until the pipe fails:
// each message carries the first and every other one queued then, up to
// MaxCallBatch operations and pipeRequestBytes.
func (p *pipe) send() {
	var held *pipeOp // taken from sendq, for the next message
	var ops []*pipeOp
	wait := time.NewTimer(time.Hour)
	wait.Stop()
	for {
		op := held
		held = nil
		if op == nil {
			select {
			case op = <-p.sendq:
			case <-p.done:
				return
			}
		}
		if p.unanswered.Load() > pipeEager {
			// Many in flight: wait for a reply (or pipeHold) so that what
			// queues meanwhile leaves in one message, as the replica
			// answers a round's operations together.
			wait.Reset(op.hold)
			select {
			case <-p.replied:
			case <-wait.C:
			case <-p.done:
				return
			}
			wait.Stop()
		}
		ops = append(ops[:0], op)
		n := op.size
	gather:
		for n < pipeRequestBytes && len(ops) < maxBatchCalls {
			select {
			case op := <-p.sendq:
				if n+op.size > pipeRequestBytes {
					held = op
					break gather
				}
				n += op.size
				ops = append(ops, op)
			default:
				break gather
			}
		}
		msg := &api.PipeRequest{Calls: make([]*api.PipeCall, 0, len(ops))}
		p.mu.Lock()
		for _, op := range ops {
			if p.pending[op.call.GetId()] == op { // its caller has not given up
				op.sent.Store(true) // from here on it may reach the replica
				msg.Calls = append(msg.Calls, op.call)
			}
		}
		p.mu.Unlock()
		if len(msg.Calls) == 0 {
			continue
		}
		p.unanswered.Add(int64(len(msg.Calls)))
		if err := p.stream.Send(msg); err != nil {
			// The stream ended: its reader has, or will have, the
			// reason.
			p.cancelOnSendError(err)
			return
		}
		share := p.a.reqBytes.Load()
		if share >= 0 {
			share /= int64(len(msg.Calls))
		}
		for _, op := range ops {
			if op.sent.Load() {
				op.reqBytes.Store(share)
			}
		}
		clear(ops)
	}
}

// cancelOnSendError ends the stream after a failed Send that is not its
// end (io.EOF: the reader gets the status from Recv).
func (p *pipe) cancelOnSendError(err error) {
	if !errors.Is(err, io.EOF) {
		p.cancel()
	}
}

// read hands each result to its operation until the stream fails.
func (p *pipe) read() {
	for {
		p.a.inBytes.Store(-1)
		rep, err := p.stream.Recv()
		if err != nil {
			p.fail(err)
			return
		}
		rs := rep.GetResults()
		share := p.a.inBytes.Load()
		if share >= 0 && len(rs) > 0 {
			share /= int64(len(rs))
		}
		p.unanswered.Add(-int64(len(rs)))
		select {
		case p.replied <- struct{}{}:
		default:
		}
		for _, r := range rs {
			p.mu.Lock()
			op := p.pending[r.GetId()]
			delete(p.pending, r.GetId())
			p.mu.Unlock()
			if op == nil {
				continue // its caller gave up
			}
			op.inBytes = share
			op.res = r.GetResult()
			op.resolved()
		}
	}
}

// fail fails the pipe and every operation in it with err.
func (p *pipe) fail(err error) {
	p.mu.Lock()
	if p.err != nil {
		p.mu.Unlock()
		return
	}
	p.err = err
	ops := p.pending
	p.pending = nil
	close(p.done)
	p.mu.Unlock()
	p.cancel()
	for _, op := range ops {
		op.err = err
		op.resolved()
	}
}

// resolved wakes op's caller, or runs its continuation (Client.Start).
func (op *pipeOp) resolved() {
	close(op.done)
	if op.then != nil {
		op.then()
	}
}

// add registers op under a new id; false if the pipe failed.
func (p *pipe) add(op *pipeOp) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return false
	}
	p.next++
	op.call.Id = p.next
	p.pending[p.next] = op
	return true
}

// remove takes op out of the pipe; false if someone else resolved it.
func (p *pipe) remove(op *pipeOp) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pending[op.call.GetId()] != op {
		return false
	}
	delete(p.pending, op.call.GetId())
	return true
}

// newPipeOp is a pipe operation for req (of encoded size size), with
// ctx's deadline as its timeout.
func newPipeOp(ctx context.Context, req *api.InvokeRequest, size int) *pipeOp {
	op := &pipeOp{call: &api.PipeCall{Call: req}, size: size, hold: holdFor(req), done: make(chan struct{})}
	op.reqBytes.Store(-1)
	if dl, ok := ctx.Deadline(); ok {
		// At least a microsecond: 0 would mean none.
		op.call.TimeoutUs = uint64(max(time.Until(dl).Microseconds(), 1))
	}
	return op
}

// pipeCall runs req, which asks for one view, through e's pipe and returns
// its reply, whether the request may have left the client, and errNoPipe
// if e does not implement Pipe.
func (c *Client) pipeCall(ctx context.Context, e *endpoint, req *api.InvokeRequest, size int, tr *OpTrace) (*api.ViewReply, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, context.Cause(ctx)
	}
	p, err := c.pipeFor(e)
	if err != nil {
		return nil, false, errorFromStatus(ctx, err)
	}
	op := newPipeOp(ctx, req, size)
	if !p.add(op) {
		<-p.done
		return nil, false, c.pipeErr(ctx, e, p.err)
	}
	select {
	case p.sendq <- op:
	case <-p.done:
	case <-ctx.Done():
	}
	select {
	case <-op.done:
	case <-ctx.Done():
		if p.remove(op) {
			return nil, op.sent.Load(), context.Cause(ctx)
		}
		<-op.done // resolved meanwhile
	}
	return c.pipeOutcome(ctx, e, op, tr)
}

// pipeOutcome is a resolved operation's reply, whether its request may
// have left the client, and errNoPipe if e does not implement Pipe (as
// pipeCall returns them).
func (c *Client) pipeOutcome(ctx context.Context, e *endpoint, op *pipeOp, tr *OpTrace) (*api.ViewReply, bool, error) {
	if op.err != nil {
		sent := op.sent.Load()
		if !sent || status.Code(op.err) == codes.Unimplemented {
			// Not sent (or refused whole): it did not run.
			return nil, false, c.pipeErr(ctx, e, op.err)
		}
		return nil, true, errorFromStatus(ctx, op.err)
	}
	n := int(op.reqBytes.Load())
	if n < 0 {
		n = op.size
	}
	c.stats.bytesSent.Add(uint64(n))
	tr.BytesSent += n
	res := op.res
	if res.GetCode() != uint32(codes.OK) || res.GetReply() == nil {
		code := codes.Code(res.GetCode())
		if code == codes.OK {
			code = codes.Internal // a reply without a view or an error
		}
		return nil, true, errorFromStatus(ctx, status.Error(code, res.GetMessage()))
	}
	m := int(op.inBytes)
	if m < 0 {
		m = proto.Size(res)
	}
	c.stats.bytesReceived.Add(uint64(m))
	tr.BytesReceived += m
	return res.GetReply(), true, nil
}

// pipeErr is the error of an operation that a pipe failed before it left:
// errNoPipe if the endpoint does not implement Pipe (it is then marked so),
// otherwise the pipe's error.
func (c *Client) pipeErr(ctx context.Context, e *endpoint, err error) error {
	if status.Code(err) == codes.Unimplemented {
		if !e.noPipe.Swap(true) {
			c.cfg.logger.Debug("client: endpoint does not implement Pipe; sending calls", "endpoint", e.addr)
		}
		return errNoPipe
	}
	return errorFromStatus(ctx, err)
}
