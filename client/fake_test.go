package client_test

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/correctable"
)

// fakeStore is a test double of a replica's Store service: it answers every
// Invoke with the views its fields script. The real server is
// internal/server; this one checks the client's side of the protocol only.
type fakeStore struct {
	api.UnimplementedStoreServer
	id uint64
	// delay is added to every RPC (Status and Invoke), before anything else.
	delay time.Duration
	// gate, if set, holds every Invoke until it is closed (or the call
	// ends), so that a test can attach to the Correctable first.
	gate chan struct{}
	// updateGate, if set, holds every operation that is not a Get the
	// same way.
	updateGate chan struct{}
	// prelim is the preliminary view's result; final the final view's, or
	// nil for a confirmation.
	prelim, final *api.Result
	// fail, if set, is returned by Invoke before any reply.
	fail error
	// script, if set, replaces the replies above.
	script func(*api.InvokeRequest, grpc.ServerStreamingServer[api.ViewReply]) error
	// statusFail makes Status fail while set.
	statusFail atomic.Bool
	// statusVV, if set, gives Status's version vector.
	statusVV func() map[uint64]uint64
	// noCall makes Call Unimplemented, like a replica older than Call.
	noCall bool
	// batch makes CallBatch answer each call as Call does; without it
	// CallBatch is Unimplemented, like a replica older than CallBatch.
	batch bool
	// failKey, if set, makes Call refuse an operation on that key with
	// InvalidArgument.
	failKey string
	// onBatch, if set, is called with each CallBatch's context.
	onBatch func(context.Context)
	// pipe makes Pipe answer each operation as Call does, each on a
	// goroutine of its own; without it Pipe is Unimplemented, like a
	// replica older than Pipe.
	pipe bool
	// pipeOps counts the operations Pipe received.
	pipeOps atomic.Int64

	mu       sync.Mutex
	reqs     []*api.InvokeRequest
	sent     []*api.ViewReply
	statuses int
	calls    int
	batches  []int // the size of each CallBatch answered
}

var testStamp = &api.Stamp{Replica: 7, AppliedIndex: 11, CommittedCount: 5, Vv: map[uint64]uint64{1: 3, 2: 4}, StableTime: 99}

func (f *fakeStore) Status(ctx context.Context, _ *api.StatusRequest) (*api.StatusReply, error) {
	if err := sleep(ctx, f.delay); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.statuses++
	f.mu.Unlock()
	if f.statusFail.Load() {
		return nil, errUnavailable
	}
	rep := &api.StatusReply{Id: f.id}
	if f.statusVV != nil {
		rep.Vv = f.statusVV()
	}
	return rep, nil
}

func (f *fakeStore) Invoke(req *api.InvokeRequest, stream grpc.ServerStreamingServer[api.ViewReply]) error {
	ctx := stream.Context()
	if err := sleep(ctx, f.delay); err != nil {
		return err
	}
	f.mu.Lock()
	f.reqs = append(f.reqs, req)
	f.mu.Unlock()
	if f.updateGate != nil && req.GetOp().GetKind() != api.Kind_KIND_GET {
		select {
		case <-f.updateGate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if f.gate != nil {
		select {
		case <-f.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if f.fail != nil {
		return f.fail
	}
	if f.script != nil {
		return f.script(req, stream)
	}
	send := func(r *api.ViewReply) error {
		f.mu.Lock()
		f.sent = append(f.sent, r)
		f.mu.Unlock()
		return stream.Send(r)
	}
	id := &api.OpID{Origin: f.id, Seq: 1}
	if req.GetPreliminary() {
		if err := send(&api.ViewReply{Final: !req.GetFinal(), Result: f.prelim, Id: id, Stamp: testStamp}); err != nil {
			return err
		}
	}
	if !req.GetFinal() {
		return nil
	}
	r := &api.ViewReply{Final: true, Result: f.final, Id: id, Stamp: testStamp}
	if f.final == nil {
		r.Confirmed = true
	}
	return send(r)
}

// Call answers a single-view request like Invoke does, with the one reply
// its stream would carry, unless noCall is set: then it is Unimplemented,
// as a replica older than Call answers.
func (f *fakeStore) Call(ctx context.Context, req *api.InvokeRequest) (*api.ViewReply, error) {
	f.mu.Lock()
	f.calls++
	f.mu.Unlock()
	if f.noCall {
		return nil, status.Error(codes.Unimplemented, "unknown method Call for service correctables.v1.Store")
	}
	if f.failKey != "" && req.GetOp().GetKey() == f.failKey {
		return nil, status.Error(codes.InvalidArgument, "fake: refused key "+f.failKey)
	}
	s := &unaryStream{ctx: ctx}
	if err := f.Invoke(req, s); err != nil {
		return nil, err
	}
	if len(s.replies) != 1 {
		return nil, status.Errorf(codes.Internal, "fake: %d replies for a Call", len(s.replies))
	}
	return s.replies[0], nil
}

// Pipe answers each operation as Call does (its own result, in the order
// they finish), if pipe is set.
func (f *fakeStore) Pipe(st grpc.BidiStreamingServer[api.PipeRequest, api.PipeReply]) error {
	if !f.pipe {
		return status.Error(codes.Unimplemented, "unknown method Pipe for service correctables.v1.Store")
	}
	var mu sync.Mutex // Send is not safe for concurrent use
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		in, err := st.Recv()
		if err != nil {
			return nil
		}
		for _, pc := range in.GetCalls() {
			f.pipeOps.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx := st.Context()
				if t := pc.GetTimeoutUs(); t > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, time.Duration(t)*time.Microsecond)
					defer cancel()
				}
				res := &api.CallResult{}
				if rep, err := f.Call(ctx, pc.GetCall()); err != nil {
					st := status.Convert(err)
					res.Code, res.Message = uint32(st.Code()), st.Message()
				} else {
					res.Reply = rep
				}
				mu.Lock()
				defer mu.Unlock()
				_ = st.Send(&api.PipeReply{Results: []*api.PipeResult{{Id: pc.GetId(), Result: res}}})
			}()
		}
	}
}

// CallBatch answers each call as Call does, in order, if batch is set.
func (f *fakeStore) CallBatch(ctx context.Context, in *api.CallBatchRequest) (*api.CallBatchReply, error) {
	if !f.batch {
		return nil, status.Error(codes.Unimplemented, "unknown method CallBatch for service correctables.v1.Store")
	}
	if f.onBatch != nil {
		f.onBatch(ctx)
	}
	f.mu.Lock()
	f.batches = append(f.batches, len(in.GetCalls()))
	f.mu.Unlock()
	out := &api.CallBatchReply{}
	for _, req := range in.GetCalls() {
		rep, err := f.Call(ctx, req)
		if err != nil {
			st := status.Convert(err)
			out.Results = append(out.Results, &api.CallResult{Code: uint32(st.Code()), Message: st.Message()})
			continue
		}
		out.Results = append(out.Results, &api.CallResult{Reply: rep})
	}
	return out, nil
}

// batchSizes returns the size of each CallBatch the fake answered.
func (f *fakeStore) batchSizes() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.batches...)
}

// unaryStream is the stream Call hands to Invoke: it keeps the replies.
type unaryStream struct {
	grpc.ServerStream // nil: the methods below are the ones Invoke uses
	ctx               context.Context
	replies           []*api.ViewReply
}

func (s *unaryStream) Context() context.Context        { return s.ctx }
func (s *unaryStream) SetHeader(md metadata.MD) error  { return grpc.SetHeader(s.ctx, md) }
func (s *unaryStream) SendHeader(md metadata.MD) error { return grpc.SendHeader(s.ctx, md) }
func (s *unaryStream) SetTrailer(md metadata.MD)       { _ = grpc.SetTrailer(s.ctx, md) }
func (s *unaryStream) Send(r *api.ViewReply) error {
	s.replies = append(s.replies, r)
	return nil
}

// callCount returns how many Calls the fake answered (Unimplemented ones
// too).
func (f *fakeStore) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func (f *fakeStore) requests() []*api.InvokeRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*api.InvokeRequest(nil), f.reqs...)
}

func (f *fakeStore) replySizes() (n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.sent {
		n += proto.Size(r)
	}
	return n
}

func (f *fakeStore) statusCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.statuses
}

func sleep(ctx context.Context, d time.Duration) error {
	if d == 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// serve runs f on a loopback listener until the test ends, and returns its
// address and server (to stop it early).
func serve(t *testing.T, f *fakeStore) (string, *grpc.Server) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	api.RegisterStoreServer(s, f)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(lis) }()
	t.Cleanup(func() { s.Stop(); <-done })
	return lis.Addr().String(), s
}

// deadAddr returns a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

// dial connects to addrs, probing only at Dial unless opts say otherwise,
// and closes the client when the test ends.
func dial(t *testing.T, addrs []string, opts ...client.Option) *client.Client {
	t.Helper()
	opts = append([]client.Option{client.WithProbeInterval(time.Hour), client.WithDialTimeout(5 * time.Second)}, opts...)
	c, err := client.Dial(t.Context(), addrs, opts...)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

// record attaches to c and returns a function that waits for c to close
// and returns every view it delivered and its error.
func record(t *testing.T, c *correctable.Correctable[client.Result]) func() ([]correctable.View[client.Result], error) {
	t.Helper()
	var (
		mu    sync.Mutex
		views []correctable.View[client.Result]
		err   error
	)
	done := make(chan struct{})
	add := func(v correctable.View[client.Result]) {
		mu.Lock()
		views = append(views, v)
		mu.Unlock()
	}
	c.SetCallbacks(correctable.Callbacks[client.Result]{
		OnUpdate: add,
		OnFinal:  func(v correctable.View[client.Result]) { add(v); close(done) },
		OnError: func(e error) {
			mu.Lock()
			err = e
			mu.Unlock()
			close(done)
		},
	})
	return func() ([]correctable.View[client.Result], error) {
		t.Helper()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the Correctable did not close")
		}
		mu.Lock()
		defer mu.Unlock()
		return views, err
	}
}

// final waits for c's final view.
func final(t *testing.T, c *correctable.Correctable[client.Result]) (correctable.View[client.Result], error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	return c.Final(ctx)
}
