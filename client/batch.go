package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/correctables/correctables/api"
)

// Call batching. An operation that asks for one view goes to its replica
// as the unary Call while fewer than cfg.batchInflight calls of its kind
// are in flight to that replica; past that it waits in a queue, and when a
// call in flight returns, everything queued goes as one CallBatch. Under
// light load nothing waits; under heavy load one round trip carries many
// operations, which saves both ends most of a call's cost (its HTTP/2
// stream, headers, handler goroutine and write syscalls), the cost that
// dominated a weak put's CPU. Each operation still gets its own view or
// error, and is acknowledged as it would be alone: the replica answers a
// batched call only once that call's view is ready, durable where the
// view says so.
//
// Calls are queued by kind (batchKind), so that a weak update never waits
// behind a strong one, nor a read behind an update.

// Batching limits.
const (
	// DefaultBatchInflight is the calls of one kind in flight to one
	// replica before the next ones queue to go together.
	DefaultBatchInflight = 4
	// maxBatchCalls bounds the calls of one CallBatch (the server's limit
	// is api's 4,096).
	maxBatchCalls = 512
	// maxBatchBytes bounds a batch's encoded requests; maxBatchedCall is
	// the largest request that is batched at all (larger ones go alone:
	// batching saves nothing on them).
	maxBatchBytes  = 1 << 20
	maxBatchedCall = 64 << 10
)

// errNoBatch: the endpoint answered CallBatch with Unimplemented.
var errNoBatch = errors.New("client: CallBatch not implemented by the endpoint")

// errBatchFull: the endpoint left a read's result out of a batch's reply
// (api.BatchFullMarker); it ran nothing that matters, and goes again alone.
var errBatchFull = errors.New("client: batch reply full")

// batchKinds is the number of request kinds: the four flags of
// InvokeRequest (preliminary, final, strong, no_confirmation) and whether
// the operation is a read (Get or Scan): a replica never holds a read back
// as busy, while it may park an update (server.Config.BusyWait), and a
// read must not wait behind one.
const batchKinds = 32

func batchKind(req *api.InvokeRequest) int {
	k := 0
	if req.GetPreliminary() {
		k |= 1
	}
	if req.GetFinal() {
		k |= 2
	}
	if req.GetStrong() {
		k |= 4
	}
	if req.GetNoConfirmation() {
		k |= 8
	}
	switch req.GetOp().GetKind() {
	case api.Kind_KIND_GET, api.Kind_KIND_SCAN:
		k |= 16
	}
	return k
}

// batcher queues the calls of one kind to one endpoint.
type batcher struct {
	mu       sync.Mutex
	queue    []*pendingCall
	inflight int // calls and batches in flight
	// outstanding counts the operations in batchedCall: in a call or a
	// batch in flight, or queued.
	outstanding int
}

// adaptiveOutstanding: with the default batching (WithCallBatching not
// set), once more than this many operations of one kind are outstanding
// to one replica, one call or batch at a time goes to it instead of
// DefaultBatchInflight: the operations that queue meanwhile go in one
// batch per round trip rather than in one of several smaller ones, each
// costing both ends a call. Below it, an operation goes at once as its own
// call, as before: at a few outstanding, waiting a round trip behind the
// one call in flight cost more than the calls saved.
const adaptiveOutstanding = 2 * DefaultBatchInflight

// limit returns how many calls and batches of b may be in flight. b.mu is
// held.
func (c *Client) limit(b *batcher) int {
	if !c.cfg.batchSet && b.outstanding > adaptiveOutstanding {
		return 1
	}
	return c.cfg.batchInflight
}

// next, called as a call or batch of b returns, takes the queue as the
// next batch to send on the slot it frees, or frees the slot: when the
// queue is empty, or when more are in flight than limit allows (another
// one still in flight will take the queue). b.mu is held.
func (c *Client) next(b *batcher) ([]*pendingCall, *sentBatch) {
	if b.inflight > c.limit(b) {
		b.inflight--
		return nil, nil
	}
	batch, sb := b.take()
	if len(batch) == 0 {
		b.inflight--
	}
	return batch, sb
}

// pendingCall states.
const (
	pcQueued int32 = iota
	pcTaken        // in a batch that is being sent
	pcGone         // its caller gave up while it was queued: never sent
)

// pendingCall is one operation in a batcher's queue or in a batch.
type pendingCall struct {
	req  *api.InvokeRequest
	size int
	// deadline is the caller's, if it has one: a batch whose callers all
	// have one ends at the latest.
	deadline    time.Time
	hasDeadline bool
	state       atomic.Int32
	batch       *sentBatch    // set when taken
	done        chan struct{} // closed when rep, err and sent are set
	rep         *api.ViewReply
	err         error
	sent        bool
	// recvBytes is the call's share of the batch reply's encoded size, as
	// the wire counter saw it, or -1 if it saw none.
	recvBytes int
}

// sentBatch is one CallBatch in flight. cancel ends it once every caller
// in it gave up.
type sentBatch struct {
	live   atomic.Int32
	ctx    context.Context
	cancel context.CancelFunc
}

func (b *sentBatch) abandon() {
	if b.live.Add(-1) == 0 {
		b.cancel()
	}
}

// batchedCall runs req, which asks for one view, at e: at once as a Call if
// fewer than the limit are in flight, otherwise in the next batch. It
// returns the reply, whether the request may have left the client, and
// errNoCall or errNoBatch if e does not implement Call or CallBatch.
func (c *Client) batchedCall(ctx context.Context, e *endpoint, req *api.InvokeRequest, size int, tr *OpTrace) (*api.ViewReply, bool, error) {
	b := &e.batchers[batchKind(req)]
	b.mu.Lock()
	b.outstanding++
	defer func() {
		b.mu.Lock()
		b.outstanding--
		b.mu.Unlock()
	}()
	if b.inflight < c.limit(b) {
		b.inflight++
		b.mu.Unlock()
		rep, sent, err := c.unaryCall(ctx, e, req, tr)
		c.batchDone(e, b)
		return rep, sent, err
	}
	pc := &pendingCall{req: req, size: size, done: make(chan struct{})}
	pc.deadline, pc.hasDeadline = ctx.Deadline()
	b.queue = append(b.queue, pc)
	b.mu.Unlock()
	select {
	case <-pc.done:
	case <-ctx.Done():
		if pc.state.CompareAndSwap(pcQueued, pcGone) {
			b.remove(pc)
			return nil, false, context.Cause(ctx)
		}
		// Taken: the batch may have left; it ends once all its callers
		// gave up.
		pc.batch.abandon()
		return nil, true, context.Cause(ctx)
	}
	switch {
	case pc.err == nil:
	case pc.err == errNoBatch:
		return nil, pc.sent, pc.err
	case pc.sent && isBatchFull(pc.err):
		return nil, true, errBatchFull
	default:
		if pc.sent {
			c.stats.bytesSent.Add(uint64(size))
			tr.BytesSent += size
		}
		return nil, pc.sent, errorFromStatus(ctx, pc.err)
	}
	c.stats.bytesSent.Add(uint64(size))
	tr.BytesSent += size
	// The batch reply's size as the wire counter saw it, shared out over
	// its calls: computing each reply's encoded size again (proto.Size)
	// cost the client more CPU than any other step of a batched call's
	// bookkeeping (version vectors make it a slow walk).
	n := pc.recvBytes
	if n < 0 {
		n = proto.Size(pc.rep)
	}
	c.stats.bytesReceived.Add(uint64(n))
	tr.BytesReceived += n
	return pc.rep, true, nil
}

// isBatchFull reports whether err is the refusal of a read left out of a
// batch's reply (api.BatchFullMarker).
func isBatchFull(err error) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.ResourceExhausted && strings.Contains(st.Message(), api.BatchFullMarker)
}

// remove takes pc, whose caller gave up, out of the queue.
func (b *batcher) remove(pc *pendingCall) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if i := slices.Index(b.queue, pc); i >= 0 {
		b.queue = slices.Delete(b.queue, i, i+1)
	}
}

// batchDone is called when a call or batch in flight to e's batcher b
// returns: it sends what queued meanwhile as the next batch, on a
// goroutine of its own, or frees the slot.
func (c *Client) batchDone(e *endpoint, b *batcher) {
	b.mu.Lock()
	batch, sb := c.next(b)
	b.mu.Unlock()
	if len(batch) > 0 {
		go c.sendBatch(e, b, batch, sb)
	}
}

// take removes the next batch from the queue: up to maxBatchCalls calls
// and maxBatchBytes bytes, skipping calls whose callers gave up. b.mu is
// held. The batch's sentBatch holds one reference for its sender, to drop
// once the batch is built (sb.abandon).
func (b *batcher) take() ([]*pendingCall, *sentBatch) {
	if len(b.queue) == 0 {
		return nil, nil
	}
	// The batch carries the latest of its callers' deadlines if each has
	// one (the server then drops what is left of it at that time, as it
	// drops a lone call past its deadline), none otherwise.
	latest, all := time.Time{}, true
	for _, pc := range b.queue[:min(len(b.queue), maxBatchCalls)] {
		all = all && pc.hasDeadline
		if pc.deadline.After(latest) {
			latest = pc.deadline
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	if all {
		ctx, cancel = context.WithDeadline(context.Background(), latest)
	}
	sb := &sentBatch{ctx: ctx, cancel: cancel}
	sb.live.Store(1)
	var batch []*pendingCall
	n, bytes := 0, 0
	for n < len(b.queue) && len(batch) < maxBatchCalls {
		pc := b.queue[n]
		if len(batch) > 0 && bytes+pc.size > maxBatchBytes {
			break
		}
		n++
		// The reference and the batch are set before the call is taken,
		// so that a caller who finds it taken can drop its reference.
		sb.live.Add(1)
		pc.batch = sb
		if !pc.state.CompareAndSwap(pcQueued, pcTaken) {
			sb.live.Add(-1) // gone
			continue
		}
		batch = append(batch, pc)
		bytes += pc.size
	}
	clear(b.queue[:n])
	b.queue = b.queue[n:]
	if len(b.queue) == 0 {
		b.queue = nil
	}
	if len(batch) == 0 {
		cancel()
		return nil, nil
	}
	return batch, sb
}

// sendBatch sends batch as one CallBatch, hands each caller its result,
// and goes on with what queued meanwhile.
func (c *Client) sendBatch(e *endpoint, b *batcher, batch []*pendingCall, sb *sentBatch) {
	for len(batch) > 0 {
		in := &api.CallBatchRequest{Calls: make([]*api.InvokeRequest, len(batch))}
		for i, pc := range batch {
			in.Calls[i] = pc.req
		}
		sb.abandon() // built: from now on the callers alone keep it alive
		a := newAttempt()
		actx := context.WithValue(sb.ctx, attemptKey{}, a)
		var rep *api.CallBatchReply
		var err error
		if len(batch) == 1 {
			// One call: a Call costs both ends less than a batch of one.
			var r *api.ViewReply
			if r, err = e.store.Call(actx, in.Calls[0]); err == nil {
				rep = &api.CallBatchReply{Results: []*api.CallResult{{Reply: r}}}
			} else if st, ok := status.FromError(err); ok && st.Code() != codes.Unimplemented {
				// The call's own status, as a batch would have carried it.
				rep, err = &api.CallBatchReply{Results: []*api.CallResult{{Code: uint32(st.Code()), Message: st.Message()}}}, nil
			}
		} else {
			rep, err = e.store.CallBatch(actx, in)
		}
		canceled := sb.ctx.Err() != nil
		sb.cancel()
		sent := a.sent.Load()
		switch {
		case err != nil && status.Code(err) == codes.Unimplemented && !canceled:
			err = errNoBatch
		case err == nil && len(rep.GetResults()) != len(batch):
			err = fmt.Errorf("%w: CallBatch returned %d results for %d calls", ErrProtocol, len(rep.GetResults()), len(batch))
		}
		shares := shareOut(a.inBytes.Load(), len(batch))
		for i, pc := range batch {
			pc.sent = sent
			pc.recvBytes = shares(i)
			switch {
			case err != nil:
				pc.err = err
			case rep.Results[i].GetReply() != nil:
				pc.rep = rep.Results[i].GetReply()
			default:
				r := rep.Results[i]
				code := codes.Code(r.GetCode())
				if code == codes.OK {
					code = codes.Internal // neither a reply nor an error
				}
				pc.err = status.Error(code, r.GetMessage())
			}
			close(pc.done)
		}
		b.mu.Lock()
		batch, sb = c.next(b)
		b.mu.Unlock()
	}
}

// shareOut splits n bytes (a batch reply's encoded size; negative if the
// wire counter did not see it) over k calls: the i-th call's share, the
// first ones taking the remainder, so that the shares add up to n; -1 for
// every call if n is negative.
func shareOut(n int64, k int) func(i int) int {
	return func(i int) int {
		if n < 0 || k == 0 {
			return -1
		}
		s := n / int64(k)
		if int64(i) < n%int64(k) {
			s++
		}
		return int(s)
	}
}
