package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
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

// pipeReplyQueue is how many replies wait for the stream's sender.
const pipeReplyQueue = 256

// Pipe implements api.StoreServer: each operation runs as a Call runs it
// (begin, its one view or error), the operations of a request in groups of
// one kind, a goroutine each (pipeGroups), and each result goes out
// through the stream's one sender as soon as it is there, whatever the
// order of the requests, together with the others queued then. The
// cluster-id check is the stream interceptor's (clusterServerOptions),
// once for the stream.
func (s *Server) Pipe(st grpc.BidiStreamingServer[api.PipeRequest, api.PipeReply]) error {
	ctx, cancel := context.WithCancel(st.Context())
	defer cancel()
	out := make(chan []*api.PipeResult, pipeReplyQueue)
	sent := make(chan error, 1)
	go func() {
		err := pipeSend(ctx, st, out)
		if err != nil {
			cancel() // no result can go out: the operations waiting give up
		}
		sent <- err
	}()
	slots := make(chan struct{}, MaxPipeInflight)
	var running sync.WaitGroup
	err := func() error {
		for {
			in, err := st.Recv()
			if err == io.EOF {
				return nil // the client sends no more: answer what runs
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
			for _, g := range pipeGroups(calls) {
				for range g {
					select {
					case slots <- struct{}{}:
					case <-ctx.Done():
						return ctx.Err()
					}
				}
				running.Add(1)
				go func() {
					defer running.Done()
					s.pipeGroup(ctx, g, out)
					for range g {
						<-slots
					}
				}()
			}
		}
	}()
	if err != nil {
		cancel() // the operations still waiting give up; their results are dropped
		running.Wait()
		return err
	}
	running.Wait()
	close(out)
	return <-sent
}

// pipeGroups splits a request's operations into groups that run together,
// as a CallBatch's do: operations of one kind (the same views, protocol
// and operation), which the loop answers in the same rounds, so that one
// goroutine waits for a group's views where one per operation would be
// woken once each. A read with a min_vv, which may wait at the replica,
// goes alone, and so does every operation of a one-operation request.
func pipeGroups(calls []*api.PipeCall) [][]*api.PipeCall {
	if len(calls) == 1 {
		return [][]*api.PipeCall{calls}
	}
	type kind struct {
		prelim, final, strong, noConfirm bool
		op                               api.Kind
	}
	var groups [][]*api.PipeCall
	at := map[kind]int{}
	for _, pc := range calls {
		r := pc.GetCall()
		if len(r.GetMinVv()) > 0 {
			groups = append(groups, []*api.PipeCall{pc})
			continue
		}
		k := kind{r.GetPreliminary(), r.GetFinal(), r.GetStrong(), r.GetNoConfirmation(), r.GetOp().GetKind()}
		i, ok := at[k]
		if !ok {
			i = len(groups)
			at[k] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], pc)
	}
	return groups
}

// pipeGroup runs a group of a Pipe's operations as a CallBatch runs its
// calls: each submitted to the loop before the first is waited for, each
// result sent to out as soon as it and those before it are there. The
// group's deadline is the latest of its operations' (none if one has
// none).
func (s *Server) pipeGroup(ctx context.Context, g []*api.PipeCall, out chan<- []*api.PipeResult) {
	stream := ctx // emit gives up only when the stream ends, not at the group's deadline
	var latest uint64
	for _, pc := range g {
		t := pc.GetTimeoutUs()
		if t == 0 {
			latest = 0
			break
		}
		latest = max(latest, t)
	}
	if latest > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(min(latest, uint64(maxPipeTimeout/time.Microsecond)))*time.Microsecond)
		defer cancel()
	}
	// Results go out in chunks: those that are there together (a round's
	// views) in one channel send, so that the sender gathers them into one
	// message; a chunk goes before the group waits for a view.
	var chunk []*api.PipeResult
	flush := func() {
		if len(chunk) == 0 {
			return
		}
		select {
		case out <- chunk:
		case <-stream.Done():
		}
		chunk = nil
	}
	emit := func(pc *api.PipeCall, r *api.CallResult) {
		chunk = append(chunk, &api.PipeResult{Id: pc.GetId(), Result: r})
	}
	defer flush()
	var calls []*call
	if len(g) > 1 {
		calls = make([]*call, len(g))
	}
	for i, pc := range g {
		r := pc.GetCall()
		if r.GetPreliminary() == r.GetFinal() {
			emit(pc, errorResult(errOneView))
			continue
		}
		c, err := s.begin(ctx, r)
		if err != nil {
			emit(pc, errorResult(err))
			continue
		}
		if calls == nil {
			flush()
			pipeWait(ctx, pc, c, emit)
			return
		}
		calls[i] = c
	}
	for i, c := range calls {
		if c == nil {
			continue
		}
		if !c.ready() {
			flush()
		}
		pipeWait(ctx, g[i], c, emit)
	}
}

// pipeWait waits for c's one view and emits it, or its error.
func pipeWait(ctx context.Context, pc *api.PipeCall, c *call, emit func(*api.PipeCall, *api.CallResult)) {
	rep, _, err := c.next(ctx)
	c.release()
	switch {
	case err != nil:
		emit(pc, errorResult(err))
	case rep == nil:
		emit(pc, errorResult(errors.New("server: invariant: request ended without its view")))
	default:
		emit(pc, &api.CallResult{Reply: rep})
	}
}

// ready reports whether c's next view is there, so that next would not
// wait for the loop.
func (c *call) ready() bool {
	if c.now != nil {
		if c.after == nil {
			return true
		}
		select {
		case <-c.after:
			return true
		default:
			return false
		}
	}
	return len(c.req.out) > 0
}

// maxPipeTimeout caps an operation's timeout_us (a year: no deadline in
// practice, without overflowing a time.Duration).
const maxPipeTimeout = 365 * 24 * time.Hour

// pipeReplyBytes bounds, roughly (resultSize), the results one PipeReply
// gathers: a result over it goes alone, and results queued behind a large
// one wait for the next message rather than for its encoding.
const pipeReplyBytes = 256 << 10

// pipeSend sends the results of out until it is closed (nil) or the stream
// fails: each message carries the first chunk and every other one queued
// then, up to MaxCallBatch results and about pipeReplyBytes (a chunk is
// split where it would take a message past them).
func pipeSend(ctx context.Context, st grpc.BidiStreamingServer[api.PipeRequest, api.PipeReply], out <-chan []*api.PipeResult) error {
	var held []*api.PipeResult // taken from out, for the next message
	for {
		if len(held) == 0 {
			select {
			case c, ok := <-out:
				if !ok {
					return nil
				}
				held = c
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		msg := &api.PipeReply{}
		n := 0
	gather:
		for {
			for len(held) > 0 {
				m := resultSize(held[0].GetResult())
				if len(msg.Results) > 0 && (n+m > pipeReplyBytes || len(msg.Results) == MaxCallBatch) {
					break gather
				}
				n += m
				msg.Results = append(msg.Results, held[0])
				held = held[1:]
			}
			select {
			case c, ok := <-out:
				if !ok {
					break gather // closed: this message, then the end
				}
				held = c
			default:
				break gather
			}
		}
		if err := st.Send(msg); err != nil {
			return err
		}
	}
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
