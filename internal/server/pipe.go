package server

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/correctables/correctables/api"
)

// MaxPipeInflight bounds the operations of one Pipe stream that run at
// once: past it the stream takes no more requests until one replies (the
// client's sends then wait on the stream's flow control), so that a client
// that sends and does not read cannot make the replica hold an unbounded
// number of replies. Each operation also takes one of the replica's
// inflight slots (Config.MaxInflight), as a Call does.
const MaxPipeInflight = 4096

// Pipe implements api.StoreServer: each operation runs as a Call runs it
// (begin, its one view or error), and its result goes out through the
// stream's one sender as soon as it is there, whatever the order of the
// requests, in one message with the others there then. No goroutine waits
// for an operation that the loop runs: the loop hands its outcome to the
// stream's sender (pipeOp.ready), which gathers a round's results into one
// message, so that an operation costs the server neither a goroutine nor a
// wake-up of its own. The cluster-id check is the stream interceptor's
// (clusterServerOptions), once for the stream.
func (s *Server) Pipe(st grpc.BidiStreamingServer[api.PipeRequest, api.PipeReply]) error {
	ctx, cancel := context.WithCancel(st.Context())
	defer cancel()
	k := &pipeSink{
		pending: map[*pipeOp]struct{}{},
		wake:    make(chan struct{}, 1),
		slots:   make(chan struct{}, MaxPipeInflight),
	}
	sent := make(chan error, 1)
	go func() {
		err := s.pipeSend(ctx, st, k)
		if err != nil {
			cancel() // no result can go out: the receiver stops too
		}
		sent <- err
	}()
	if err := s.pipeRecv(ctx, st, k); err != nil {
		// The operations still pending are dropped. The sender is not
		// waited for: it may be held in Send by a client that reads no
		// more, and ends once the stream does.
		cancel()
		k.close()
		return err
	}
	// The client sends no more: answer what runs, then end.
	k.recvDone.Store(true)
	k.poke()
	err := <-sent
	k.close()
	return err
}

// pipeRecv reads the stream's requests and starts their operations, until
// the client closes its side (nil) or the stream fails.
func (s *Server) pipeRecv(ctx context.Context, st grpc.BidiStreamingServer[api.PipeRequest, api.PipeReply], k *pipeSink) error {
	for {
		in, err := st.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		calls := in.GetCalls()
		if n := len(calls); n == 0 || n > MaxCallBatch {
			return toStatus(fmt.Errorf("%w: a pipe request holds 1 to %d operations, not %d", ErrInvalidRequest, MaxCallBatch, n))
		}
		for _, pc := range calls {
			if pc.GetCall() == nil {
				return toStatus(fmt.Errorf("%w: pipe operation %d without a call", ErrInvalidRequest, pc.GetId()))
			}
		}
		for _, pc := range calls {
			select {
			case k.slots <- struct{}{}:
			case <-ctx.Done():
				return ctx.Err()
			}
			s.pipeStart(ctx, k, pc)
		}
	}
}

// pipeStart starts one of a Pipe's operations, which holds a slot of
// k.slots until the sender has sent its result.
func (s *Server) pipeStart(ctx context.Context, k *pipeSink, pc *api.PipeCall) {
	r := pc.GetCall()
	if r.GetPreliminary() == r.GetFinal() {
		k.push(pipeItem{id: pc.GetId(), res: errorResult(errOneView)})
		return
	}
	// Pending before it is submitted: the loop may answer it before begin
	// returns.
	op := &pipeOp{id: pc.GetId(), sink: k}
	k.add(op)
	c, err := s.beginOp(ctx, r, op)
	switch {
	case err != nil:
		op.resolve(pipeItem{res: errorResult(err)})
	case c.now != nil:
		// A weak read run off the loop: its view is there, to send once
		// what it read is durable.
		if c.after == nil || closed(c.after) {
			op.resolve(pipeItem{c: c, res: callResult(c.next(ctx))})
			return
		}
		go func() { op.resolve(pipeItem{c: c, res: callResult(c.next(ctx))}) }()
	default:
		if t := pc.GetTimeoutUs(); t > 0 {
			d := time.Duration(min(t, uint64(maxPipeTimeout/time.Microsecond))) * time.Microsecond
			tm := time.AfterFunc(d, op.expire)
			op.timer.Store(tm)
			if op.done.Load() {
				tm.Stop() // answered meanwhile
			}
		}
	}
}

// closed reports whether ch is closed.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// callResult is what a call's next returned, as a Pipe's result.
func callResult(rep *api.ViewReply, _ bool, err error) *api.CallResult {
	switch {
	case err != nil:
		return errorResult(err)
	case rep == nil:
		return errorResult(fmt.Errorf("server: invariant: request ended without its view"))
	}
	return &api.CallResult{Reply: rep}
}

// maxPipeTimeout caps an operation's timeout_us (a year: no deadline in
// practice, without overflowing a time.Duration).
const maxPipeTimeout = 365 * 24 * time.Hour

// A pipeSink collects a Pipe's results for its sender: the loop's
// outcomes, the errors and the reads answered at once, the operations'
// timeouts.
type pipeSink struct {
	// slots bounds the operations started and not yet answered
	// (MaxPipeInflight).
	slots chan struct{}
	// recvDone: the client sends no more; the sender ends once every
	// slot is free.
	recvDone atomic.Bool
	wake     chan struct{} // the sender has items (one token)

	mu      sync.Mutex
	items   []pipeItem
	pending map[*pipeOp]struct{} // submitted, not resolved
	ended   bool                 // close ran: nothing more goes out
}

// A pipeItem is one operation's result for the sender: res, or, if
// fromLoop, the outcome the loop left in c's request.
type pipeItem struct {
	id       uint64
	c        *call // released once sent (nil: none, or released already)
	res      *api.CallResult
	fromLoop bool
}

// A pipeOp is one of a Pipe's operations between begin and its result:
// whoever resolves it first (the loop with its outcome, its timeout, the
// stream's end) gives its result; the others find it done.
type pipeOp struct {
	id    uint64
	sink  *pipeSink
	c     *call // set by beginOp before the loop can see the request
	done  atomic.Bool
	timer atomic.Pointer[time.Timer]
}

// ready is the loop's: the operation's outcome is in its request's
// channel (a view, a refusal, or the channel closed).
func (o *pipeOp) ready() { o.resolve(pipeItem{c: o.c, fromLoop: true}) }

// expire is the operation's timeout: it fails, as a Call whose context
// expired; the loop's outcome, when it comes, is dropped.
func (o *pipeOp) expire() {
	o.resolve(pipeItem{c: o.c, res: errorResult(context.DeadlineExceeded)})
}

// resolve hands the operation's result to the sender, unless it was
// resolved already (then it releases nothing: it.c is the first
// resolver's to release).
func (o *pipeOp) resolve(it pipeItem) {
	if !o.done.CompareAndSwap(false, true) {
		return
	}
	if t := o.timer.Load(); t != nil {
		t.Stop()
	}
	it.id = o.id
	k := o.sink
	k.mu.Lock()
	delete(k.pending, o)
	k.pushLocked(it)
}

// add registers a submitted operation, so that the stream's end releases
// it if nothing resolved it.
func (k *pipeSink) add(o *pipeOp) {
	k.mu.Lock()
	k.pending[o] = struct{}{}
	k.mu.Unlock()
}

// push hands the sender a result that no pipeOp resolves.
func (k *pipeSink) push(it pipeItem) {
	k.mu.Lock()
	k.pushLocked(it)
}

// pushLocked appends it and unlocks k.mu; the first item wakes the sender.
func (k *pipeSink) pushLocked(it pipeItem) {
	if k.ended {
		k.mu.Unlock()
		if it.c != nil {
			it.c.release()
		}
		return
	}
	k.items = append(k.items, it)
	first := len(k.items) == 1
	k.mu.Unlock()
	if first {
		k.poke()
	}
}

// poke wakes the sender.
func (k *pipeSink) poke() {
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

// take returns the items there, and leaves buf (emptied) for the next.
func (k *pipeSink) take(buf []pipeItem) []pipeItem {
	k.mu.Lock()
	items := k.items
	k.items = buf[:0]
	k.mu.Unlock()
	return items
}

// close ends the sink once the receiver and the sender have: the
// operations still pending or unsent release their inflight slots; the
// loop's outcomes for them, when they come, are dropped.
func (k *pipeSink) close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.ended = true
	for o := range k.pending {
		if o.done.CompareAndSwap(false, true) {
			if t := o.timer.Load(); t != nil {
				t.Stop()
			}
			if o.c != nil {
				o.c.release()
			}
		}
	}
	clear(k.pending)
	for _, it := range k.items {
		if it.c != nil {
			it.c.release()
		}
	}
	k.items = nil
}

// pipeReplyBytes bounds, roughly (resultSize), the results one PipeReply
// gathers: a result over it goes alone, and results behind a large one
// wait for the next message rather than for its encoding.
const pipeReplyBytes = 256 << 10

// pipeSend sends the results k collects, as many to a message as are
// there, up to MaxCallBatch results and about pipeReplyBytes, until the
// client sends no more and every operation is answered (nil), or the
// stream fails or the server stops.
func (s *Server) pipeSend(ctx context.Context, st grpc.BidiStreamingServer[api.PipeRequest, api.PipeReply], k *pipeSink) error {
	var items, spare []pipeItem
	msg := &api.PipeReply{}
	n := 0 // msg's size, roughly
	flush := func() error {
		if len(msg.Results) == 0 {
			return nil
		}
		err := st.Send(msg)
		// Each result's slot is free once it is sent: the receiver may
		// start another operation.
		for range msg.Results {
			<-k.slots
		}
		msg, n = &api.PipeReply{}, 0
		return err
	}
	for {
		items, spare = k.take(spare), items
		if len(items) == 0 {
			if k.recvDone.Load() && len(k.slots) == 0 {
				return nil
			}
			select {
			case <-k.wake:
				continue
			case <-ctx.Done():
				return ctx.Err()
			case <-s.done:
				return toStatus(ErrStopped)
			}
		}
		for i := range items {
			r := pipeResult(&items[i])
			m := resultSize(r)
			if len(msg.Results) > 0 && (n+m > pipeReplyBytes || len(msg.Results) == MaxCallBatch) {
				if err := flush(); err != nil {
					return err
				}
			}
			msg.Results = append(msg.Results, &api.PipeResult{Id: items[i].id, Result: r})
			n += m
			items[i] = pipeItem{}
		}
		if err := flush(); err != nil {
			return err
		}
	}
}

// pipeResult is an item's result; it releases the item's call.
func pipeResult(it *pipeItem) *api.CallResult {
	c := it.c
	if c == nil {
		return it.res
	}
	defer c.release()
	if !it.fromLoop {
		return it.res
	}
	// The loop's outcome is in the channel already (ready came after it).
	var o outcome
	select {
	case v, ok := <-c.req.out:
		if !ok {
			return errorResult(ErrStopped)
		}
		o = v
	default:
		return errorResult(fmt.Errorf("server: invariant: a pipe operation resolved without its outcome"))
	}
	return callResult(c.view(o))
}

// resultSize estimates a result's encoded size from the bytes it carries
// (keys and values) and a bound on the rest, without encoding it.
func resultSize(r *api.CallResult) int {
	const fixed = 256 // ids, stamp, codes: small against the bound
	n := fixed + len(r.GetMessage())
	res := r.GetReply().GetResult()
	n += len(res.GetValue())
	for _, kv := range res.GetItems() {
		n += len(kv.GetKey()) + len(kv.GetValue()) + 8
	}
	return n
}
