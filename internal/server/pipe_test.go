package server

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/correctable"
)

// Pipe runs operations as Call does, many over one stream: these tests run
// them against real replicas over gRPC.

type pipeStream = grpc.BidiStreamingClient[api.PipeRequest, api.PipeReply]

// pipeRecv reads results until it has want of them (or the stream fails),
// keyed by id, in the order they came.
func pipeRecv(t *testing.T, st pipeStream, want int) (map[uint64]*api.CallResult, []uint64) {
	t.Helper()
	got := map[uint64]*api.CallResult{}
	var order []uint64
	for len(order) < want {
		rep, err := st.Recv()
		if err != nil {
			t.Fatalf("Recv after %d of %d results: %v", len(order), want, err)
		}
		if len(rep.GetResults()) == 0 {
			t.Fatal("a PipeReply without results")
		}
		for _, r := range rep.GetResults() {
			if _, dup := got[r.GetId()]; dup {
				t.Fatalf("id %d answered twice", r.GetId())
			}
			got[r.GetId()] = r.GetResult()
			order = append(order, r.GetId())
		}
	}
	return got, order
}

// TestPipeGivesCallsView: each operation of singleViewSteps, sent alone on
// a pipe, gets the view Call gives it (the same result, stamped by the same
// replica, final as Call's).
func TestPipeGivesCallsView(t *testing.T) {
	servers := startCluster(t, 3, func(uint64) Storage { return &memStorage{MemoryStorage: raft.NewMemoryStorage()} })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := dial(t, servers[1].ClientAddr())
	strongPutUntilFinal(ctx, t, c, 2*time.Second)
	st, err := c.Pipe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, step := range singleViewSteps {
		viaCall, err := c.Call(ctx, step.req("call/"))
		if err != nil {
			t.Fatalf("%s via Call: %v", step.name, err)
		}
		id := uint64(100 + i)
		if err := st.Send(&api.PipeRequest{Calls: []*api.PipeCall{{Id: id, Call: step.req("pipe/"), TimeoutUs: 30e6}}}); err != nil {
			t.Fatal(err)
		}
		got, _ := pipeRecv(t, st, 1)
		r, ok := got[id]
		if !ok || r.GetCode() != 0 || r.GetReply() == nil {
			t.Fatalf("%s via Pipe: results %v, want id %d answered with a view", step.name, got, id)
		}
		viaPipe := r.GetReply()
		if viaPipe.GetFinal() != viaCall.GetFinal() || viaPipe.GetConfirmed() {
			t.Errorf("%s: Pipe's view final %v confirmed %v, Call's final %v", step.name, viaPipe.GetFinal(), viaPipe.GetConfirmed(), viaCall.GetFinal())
		}
		if want := stripPrefix(viaCall.GetResult(), "call/"); !proto.Equal(stripPrefix(viaPipe.GetResult(), "pipe/"), want) {
			t.Errorf("%s: Pipe's result %v, Call's %v", step.name, viaPipe.GetResult(), viaCall.GetResult())
		}
		if viaPipe.GetStamp().GetReplica() != viaCall.GetStamp().GetReplica() {
			t.Errorf("%s: stamped by replica %d, Call's by %d", step.name, viaPipe.GetStamp().GetReplica(), viaCall.GetStamp().GetReplica())
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != io.EOF {
		t.Fatalf("Recv after CloseSend with nothing in flight = %v, want io.EOF", err)
	}
}

// TestPipeManyAtOnce: operations sent together are answered once each,
// under their ids, out of order where their views come out of order: a
// read that waits for an operation the replica never receives (min_vv)
// does not hold back the writes sent after it in the same message, and
// gives up at its own timeout. A bad operation gets its error and leaves
// the others running; closing the send side ends the stream once every
// operation is answered.
func TestPipeManyAtOnce(t *testing.T) {
	servers := startCluster(t, 3, func(uint64) Storage { return &memStorage{MemoryStorage: raft.NewMemoryStorage()} })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := dial(t, servers[0].ClientAddr())
	strongPutUntilFinal(ctx, t, c, 2*time.Second)
	st, err := c.Pipe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const waitID, badID = 1, 2
	calls := []*api.PipeCall{
		{Id: waitID, TimeoutUs: 2e6, Call: &api.InvokeRequest{Op: getOp("many/k0"), Preliminary: true, MinVv: map[uint64]uint64{2: 1 << 40}}},
		{Id: badID, Call: &api.InvokeRequest{Op: getOp("many/k0"), Preliminary: true, Final: true, Strong: true}},
	}
	const writes = 200
	for i := range writes {
		req := &api.InvokeRequest{Op: put(fmt.Sprintf("many/k%d", i), fmt.Sprint(i)), Preliminary: true}
		if i%4 == 0 {
			req = &api.InvokeRequest{Op: put(fmt.Sprintf("many/k%d", i), fmt.Sprint(i)), Final: true, Strong: true}
		}
		calls = append(calls, &api.PipeCall{Id: uint64(10 + i), Call: req, TimeoutUs: 30e6})
	}
	start := time.Now()
	// Two messages: the waiting read and half the writes, then the rest.
	if err := st.Send(&api.PipeRequest{Calls: calls[:writes/2]}); err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&api.PipeRequest{Calls: calls[writes/2:]}); err != nil {
		t.Fatal(err)
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	got, order := pipeRecv(t, st, len(calls))
	if _, err := st.Recv(); err != io.EOF {
		t.Fatalf("Recv after every result = %v, want io.EOF", err)
	}
	for i := range writes {
		r := got[uint64(10+i)]
		if r.GetCode() != 0 || r.GetReply().GetResult().GetErr() != 0 {
			t.Fatalf("write %d: %v", i, r)
		}
	}
	if r := got[badID]; codes.Code(r.GetCode()) != codes.InvalidArgument || r.GetReply() != nil {
		t.Fatalf("an operation asking for both views: %v, want InvalidArgument", r)
	}
	r := got[waitID]
	if code := codes.Code(r.GetCode()); code != codes.DeadlineExceeded && code != codes.ResourceExhausted {
		t.Fatalf("a read waiting for an operation never sent: %v, want DeadlineExceeded or a refusal", r)
	}
	if took := time.Since(start); took < 2*time.Second {
		t.Fatalf("the waiting read was answered after %v, before its 2 s timeout", took)
	}
	if order[len(order)-1] != waitID {
		t.Fatalf("the waiting read was answered at position %d of %d: it held back no one, so it should come last", indexOf(order, waitID), len(order))
	}
}

func indexOf(s []uint64, x uint64) int {
	for i, y := range s {
		if y == x {
			return i
		}
	}
	return -1
}

// TestPipeRefusesMalformedRequests: a request without operations, or with
// an operation without a call, ends the stream with InvalidArgument, and
// the replica goes on serving.
func TestPipeRefusesMalformedRequests(t *testing.T) {
	servers := startCluster(t, 3, func(uint64) Storage { return &memStorage{MemoryStorage: raft.NewMemoryStorage()} })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := dial(t, servers[0].ClientAddr())
	for name, req := range map[string]*api.PipeRequest{
		"no operations":  {},
		"no call":        {Calls: []*api.PipeCall{{Id: 1}}},
		"too many calls": {Calls: make([]*api.PipeCall, MaxCallBatch+1)},
	} {
		st, err := c.Pipe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i := range req.Calls {
			if name == "too many calls" {
				req.Calls[i] = &api.PipeCall{Id: uint64(i), Call: &api.InvokeRequest{Op: getOp("k"), Preliminary: true}}
			}
		}
		if err := st.Send(req); err != nil && err != io.EOF {
			t.Fatal(err)
		}
		if _, err := st.Recv(); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("%s: Recv = %v, want InvalidArgument", name, err)
		}
	}
	if _, err := c.Call(ctx, &api.InvokeRequest{Op: getOp("k"), Preliminary: true}); err != nil {
		t.Fatalf("a Call after the refused pipes: %v", err)
	}
}

// TestClientUsesPipeForOneView: by default the client library sends every
// single-view operation on one pipe per replica (no Call, no Invoke), and
// an operation that asks for both views as Invoke.
func TestClientUsesPipeForOneView(t *testing.T) {
	servers := startCluster(t, 3, func(uint64) Storage { return &memStorage{MemoryStorage: raft.NewMemoryStorage()} })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	strongPutUntilFinal(ctx, t, dial(t, servers[0].ClientAddr()), 2*time.Second)
	var rc rpcCounter
	c, err := client.Dial(ctx, []string{servers[0].ClientAddr()}, rc.option())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	untilPiped(ctx, t, c, &rc)
	for i := range 5 {
		k := fmt.Sprint("k", i)
		for _, cr := range []*correctable.Correctable[client.Result]{
			c.InvokeWeak(ctx, client.Put(k, []byte("v"))),
			c.InvokeWeak(ctx, client.Get(k)),
			c.InvokeStrong(ctx, client.Put(k, []byte("w"))),
			c.InvokeStrong(ctx, client.Get(k)),
		} {
			if _, err := cr.Final(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if rc.pipes.Load() != 1 || rc.calls.Load() != 0 || rc.batches.Load() != 0 || rc.invokes.Load() != 0 {
		t.Fatalf("20 single-view operations: %d pipes, %d calls, %d batches, %d invokes; want one pipe only",
			rc.pipes.Load(), rc.calls.Load(), rc.batches.Load(), rc.invokes.Load())
	}
	if _, err := c.Invoke(ctx, client.Get("k0")).Final(ctx); err != nil {
		t.Fatal(err)
	}
	if rc.invokes.Load() != 1 || rc.pipes.Load() != 1 {
		t.Fatalf("an operation asking for both views: %d invokes, %d pipes; want 1 and 1", rc.invokes.Load(), rc.pipes.Load())
	}
}

// untilPiped sends weak gets through c until one of them has opened a pipe
// (an operation takes a call while the connection is still connecting,
// client's pipeUsable), then zeroes rc's counts of calls and batches, so
// that a test counts the requests of its own operations only.
func untilPiped(ctx context.Context, t *testing.T, c *client.Client, rc *rpcCounter) {
	t.Helper()
	for rc.pipes.Load() == 0 {
		if _, err := c.InvokeWeak(ctx, client.Get("untilPiped")).Final(ctx); err != nil {
			t.Fatal(err)
		}
		if ctx.Err() != nil {
			t.Fatal("no pipe opened before the test's deadline")
		}
	}
	rc.calls.Store(0)
	rc.batches.Store(0)
}

// TestPipeHoldsNoGoroutinePerOperation: operations waiting at the replica
// on a pipe (reads whose min_vv the replica never covers) hold no goroutine
// each, and when the stream ends they give back their inflight slots at
// once, not when the replica would have refused them (MinVVWait).
func TestPipeHoldsNoGoroutinePerOperation(t *testing.T) {
	servers := startClusterWith(t, 3, func(uint64) Storage { return &memStorage{MemoryStorage: raft.NewMemoryStorage()} },
		func(c *Config) { c.MinVVWait = 10 * time.Minute })
	s := servers[0]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := dial(t, s.ClientAddr())
	strongPutUntilFinal(ctx, t, c, 2*time.Second)
	base := runtime.NumGoroutine()
	sctx, end := context.WithCancel(ctx)
	st, err := c.Pipe(sctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 2000
	var calls []*api.PipeCall
	for i := range n {
		calls = append(calls, &api.PipeCall{Id: uint64(i), TimeoutUs: 600e6,
			Call: &api.InvokeRequest{Op: getOp("held"), Preliminary: true, MinVv: map[uint64]uint64{2: 1 << 40}}})
	}
	for len(calls) > 0 {
		k := min(len(calls), 500)
		if err := st.Send(&api.PipeRequest{Calls: calls[:k]}); err != nil {
			t.Fatal(err)
		}
		calls = calls[k:]
	}
	for len(s.inflight) < n {
		if ctx.Err() != nil {
			t.Fatalf("%d of %d operations in flight at the replica", len(s.inflight), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The stream's goroutines (the handler, its sender, gRPC's), not one
	// per operation.
	if g := runtime.NumGoroutine() - base; g > 100 {
		t.Fatalf("%d goroutines more with %d operations held on a pipe, want a few for the stream", g, n)
	}
	end()
	for len(s.inflight) > 0 {
		if ctx.Err() != nil {
			t.Fatalf("%d inflight slots still taken after the stream ended", len(s.inflight))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
