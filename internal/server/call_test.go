package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/raft/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/correctable"
)

// Call runs a single-view operation like Invoke and returns the view as
// a unary reply; these tests run the same requests through both, against
// real replicas over gRPC, and compare.

func getOp(k string) *api.Op { return &api.Op{Kind: api.Kind_KIND_GET, Key: k} }

// singleViewSteps are requests for one view, each built for a key prefix:
// run in order on two prefixes, they give equal results.
var singleViewSteps = []struct {
	name string
	req  func(p string) *api.InvokeRequest
}{
	{"weak get of a missing key", func(p string) *api.InvokeRequest { return &api.InvokeRequest{Op: getOp(p + "k"), Preliminary: true} }},
	{"weak put", func(p string) *api.InvokeRequest { return &api.InvokeRequest{Op: put(p+"k", "v1"), Preliminary: true} }},
	{"weak get", func(p string) *api.InvokeRequest { return &api.InvokeRequest{Op: getOp(p + "k"), Preliminary: true} }},
	{"strong put", func(p string) *api.InvokeRequest {
		return &api.InvokeRequest{Op: put(p+"k", "v2"), Final: true, Strong: true}
	}},
	{"strong get", func(p string) *api.InvokeRequest {
		return &api.InvokeRequest{Op: getOp(p + "k"), Final: true, Strong: true}
	}},
	{"weak put committed", func(p string) *api.InvokeRequest { return &api.InvokeRequest{Op: put(p+"k", "v3"), Final: true} }},
	{"strong incr of a value", func(p string) *api.InvokeRequest {
		return &api.InvokeRequest{Op: &api.Op{Kind: api.Kind_KIND_INCR, Key: p + "k", Delta: 1}, Final: true, Strong: true}
	}},
	{"strong scan", func(p string) *api.InvokeRequest {
		return &api.InvokeRequest{Op: &api.Op{Kind: api.Kind_KIND_SCAN, Key: p, Limit: 10}, Final: true, Strong: true}
	}},
}

func TestCallGivesInvokesView(t *testing.T) {
	servers := startCluster(t, 3, func(uint64) Storage { return &memStorage{MemoryStorage: raft.NewMemoryStorage()} })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := dial(t, servers[1].ClientAddr())
	strongPutUntilFinal(ctx, t, c, 2*time.Second)
	for _, step := range singleViewSteps {
		views, err := invoke(ctx, c, step.req("invoke/"))
		if err != nil || len(views) != 1 {
			t.Fatalf("%s via Invoke: %v %v", step.name, views, err)
		}
		viaInvoke := views[0]
		viaCall, err := c.Call(ctx, step.req("call/"))
		if err != nil {
			t.Fatalf("%s via Call: %v", step.name, err)
		}
		if viaCall.GetFinal() != viaInvoke.GetFinal() || viaCall.GetConfirmed() || viaInvoke.GetConfirmed() {
			t.Errorf("%s: Call's view final %v confirmed %v, Invoke's final %v confirmed %v",
				step.name, viaCall.GetFinal(), viaCall.GetConfirmed(), viaInvoke.GetFinal(), viaInvoke.GetConfirmed())
		}
		if want := stripPrefix(viaInvoke.GetResult(), "invoke/"); !proto.Equal(stripPrefix(viaCall.GetResult(), "call/"), want) {
			t.Errorf("%s: Call's result %v, Invoke's %v", step.name, viaCall.GetResult(), viaInvoke.GetResult())
		}
		// Both are stamped by replica 2, the Call's no earlier than the
		// Invoke's, which ran first.
		si, sc := viaInvoke.GetStamp(), viaCall.GetStamp()
		if si == nil || sc == nil || sc.GetReplica() != 2 || si.GetReplica() != 2 {
			t.Fatalf("%s: stamps %v (Call) and %v (Invoke), want both from replica 2", step.name, sc, si)
		}
		if sc.GetAppliedIndex() < si.GetAppliedIndex() || sc.GetCommittedCount() < si.GetCommittedCount() {
			t.Errorf("%s: Call's stamp %v is behind Invoke's %v", step.name, sc, si)
		}
		if (viaCall.GetId() == nil) != (viaInvoke.GetId() == nil) || viaCall.GetId().GetOrigin() != viaInvoke.GetId().GetOrigin() {
			t.Errorf("%s: operation ids %v (Call) and %v (Invoke)", step.name, viaCall.GetId(), viaInvoke.GetId())
		}
	}
}

// stripPrefix returns r with p cut from the keys of its items.
func stripPrefix(r *api.Result, p string) *api.Result {
	r = proto.Clone(r).(*api.Result)
	for _, kv := range r.GetItems() {
		kv.Key = strings.TrimPrefix(kv.Key, p)
	}
	return r
}

func TestCallRefusesWhatInvokeRefuses(t *testing.T) {
	reg := prometheus.NewRegistry()
	addr := freeAddr(t)
	s := startServers(t, Config{ID: 1, Peers: map[uint64]string{1: addr}, ClientAddr: addr, Storage: reviewMem(),
		Logger: reviewQuiet(), Metrics: NewMetrics(reg, "1")})[0]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := dial(t, addr)
	strongPutUntilFinal(ctx, t, c, 2*time.Second)
	for _, tc := range []struct {
		name string
		req  *api.InvokeRequest
		code codes.Code
	}{
		{"no op", &api.InvokeRequest{Preliminary: true}, codes.InvalidArgument},
		{"unknown kind", &api.InvokeRequest{Op: &api.Op{Kind: 99, Key: "k"}, Final: true, Strong: true}, codes.InvalidArgument},
		{"weak read final", &api.InvokeRequest{Op: getOp("k"), Final: true}, codes.InvalidArgument},
		{"oversized value", &api.InvokeRequest{Op: put("k", string(make([]byte, 2<<20))), Preliminary: true}, codes.InvalidArgument},
		{"oversized key", &api.InvokeRequest{Op: put(string(make([]byte, 5000)), "v"), Final: true, Strong: true}, codes.InvalidArgument},
	} {
		_, ierr := invoke(ctx, c, tc.req)
		_, cerr := c.Call(ctx, tc.req)
		if status.Code(ierr) != tc.code || status.Code(cerr) != tc.code || status.Convert(ierr).Message() != status.Convert(cerr).Message() {
			t.Errorf("%s: Invoke %v, Call %v; want both %v with the same message", tc.name, ierr, cerr, tc.code)
		}
	}
	// Call refuses a request for both views or none; Invoke takes both.
	for _, req := range []*api.InvokeRequest{
		{Op: put("k", "v"), Preliminary: true, Final: true, Strong: true},
		{Op: put("k", "v"), Preliminary: true, Final: true},
		{Op: put("k", "v")},
	} {
		_, err := c.Call(ctx, req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "Invoke streams both") {
			t.Errorf("Call of %v: %v, want InvalidArgument pointing to Invoke", req, err)
		}
	}
	// None of the refused requests ran: the key does not exist.
	rep, err := c.Call(ctx, &api.InvokeRequest{Op: getOp("k"), Final: true, Strong: true})
	if err != nil || rep.GetResult().GetFound() {
		t.Fatalf("strong get after the refusals: %v %v", rep, err)
	}

	// A request that names another cluster is refused before it runs, by
	// both, and both replies carry this replica's cluster id.
	mine := s.ClusterID()
	if mine == 0 {
		t.Fatal("the replica has no cluster id")
	}
	octx := metadata.AppendToOutgoingContext(ctx, api.ClusterIDMetadata, api.FormatClusterID(mine^1))
	stream, err := c.Invoke(octx, &api.InvokeRequest{Op: put("other", "x"), Preliminary: true})
	if err != nil {
		t.Fatal(err)
	}
	_, ierr := stream.Recv()
	ihdr, _ := stream.Header()
	var chdr metadata.MD
	_, cerr := c.Call(octx, &api.InvokeRequest{Op: put("other", "x"), Preliminary: true}, grpc.Header(&chdr))
	if status.Code(ierr) != codes.FailedPrecondition || status.Code(cerr) != codes.FailedPrecondition ||
		status.Convert(ierr).Message() != status.Convert(cerr).Message() {
		t.Errorf("another cluster's id: Invoke %v, Call %v; want both FailedPrecondition with the same message", ierr, cerr)
	}
	for name, h := range map[string]metadata.MD{"Invoke": ihdr, "Call": chdr} {
		if got := h.Get(api.ClusterIDMetadata); len(got) != 1 || got[0] != api.FormatClusterID(mine) {
			t.Errorf("%s header: cluster id %v, want %s", name, got, api.FormatClusterID(mine))
		}
	}
	rep, err = c.Call(ctx, &api.InvokeRequest{Op: getOp("other"), Final: true, Strong: true})
	if err != nil || rep.GetResult().GetFound() {
		t.Fatalf("strong get after another cluster's put: %v %v", rep, err)
	}

	// The metrics count the operations Call ran like Invoke's.
	before := protocolOps(t, reg)
	if _, err := c.Call(ctx, &api.InvokeRequest{Op: put("m", "1"), Preliminary: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Call(ctx, &api.InvokeRequest{Op: getOp("m"), Preliminary: true}); err != nil {
		t.Fatal(err)
	}
	if got := protocolOps(t, reg); got["weak"] != before["weak"]+2 {
		t.Errorf("weak operations counted %v after two weak Calls, %v before", got, before)
	}
}

// protocolOps reads correctables_operations_total by protocol.
func protocolOps(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "correctables_operations_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "protocol" {
					out[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// rpcCounter counts the Store RPCs a client makes, by method, in gRPC
// interceptors on its connections; with refuseCall it answers every Call
// itself with Unimplemented, as a replica older than Call would, so that
// the client takes Invoke.
type rpcCounter struct {
	refuseCall                     bool
	calls, invokes, batches, pipes atomic.Int64
}

func (r *rpcCounter) option() client.Option {
	return client.WithDialOptions(
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if method == api.Store_CallBatch_FullMethodName {
				r.batches.Add(1)
			}
			if method == api.Store_Call_FullMethodName {
				r.calls.Add(1)
				if r.refuseCall {
					return status.Error(codes.Unimplemented, "unknown method Call for service correctables.v1.Store")
				}
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			switch method {
			case api.Store_Invoke_FullMethodName:
				r.invokes.Add(1)
			case api.Store_Pipe_FullMethodName:
				r.pipes.Add(1)
			}
			return streamer(ctx, desc, cc, method, opts...)
		}),
	)
}

// TestClientUsesCallForOneView: the client library sends an operation
// that asks for one view as a Call and one that asks for both as Invoke,
// and a client kept on Invoke (its endpoint answers Call with
// Unimplemented) gets the same views.
func TestClientUsesCallForOneView(t *testing.T) {
	servers := startCluster(t, 3, func(uint64) Storage { return &memStorage{MemoryStorage: raft.NewMemoryStorage()} })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	strongPutUntilFinal(ctx, t, dial(t, servers[0].ClientAddr()), 2*time.Second)
	addr := []string{servers[0].ClientAddr()}
	var unary, streamed rpcCounter
	streamed.refuseCall = true
	cu, err := client.Dial(ctx, addr, unary.option(), client.WithPipe(false))
	if err != nil {
		t.Fatal(err)
	}
	defer cu.Close()
	cs, err := client.Dial(ctx, addr, streamed.option(), client.WithPipe(false))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	type opRun func(c *client.Client, p string) *correctable.Correctable[client.Result]
	single := []struct {
		name string
		run  opRun
	}{
		{"weak put", func(c *client.Client, p string) *correctable.Correctable[client.Result] {
			return c.InvokeWeak(ctx, client.Put(p+"k", []byte("v1")))
		}},
		{"weak get", func(c *client.Client, p string) *correctable.Correctable[client.Result] {
			return c.InvokeWeak(ctx, client.Get(p+"k"))
		}},
		{"strong put", func(c *client.Client, p string) *correctable.Correctable[client.Result] {
			return c.InvokeStrong(ctx, client.Put(p+"k", []byte("v2")))
		}},
		{"strong get", func(c *client.Client, p string) *correctable.Correctable[client.Result] {
			return c.InvokeStrong(ctx, client.Get(p+"k"))
		}},
	}
	for i, op := range single {
		vu, uerr := op.run(cu, "unary/").Final(ctx)
		vs, serr := op.run(cs, "stream/").Final(ctx)
		if uerr != nil || serr != nil {
			t.Fatalf("%s: %v (Call), %v (Invoke)", op.name, uerr, serr)
		}
		if vu.Level != vs.Level || vu.Confirmed || vs.Confirmed || vu.Value.Found != vs.Value.Found ||
			string(vu.Value.Value) != string(vs.Value.Value) || (vu.Value.Err == nil) != (vs.Value.Err == nil) {
			t.Errorf("%s: view %+v via Call, %+v via Invoke", op.name, vu, vs)
		}
		su, uok := vu.Stamp.(client.Stamp)
		ss, sok := vs.Stamp.(client.Stamp)
		if !uok || !sok || su.Replica != 1 || ss.Replica != 1 || (su.Op.Origin == 0) != (ss.Op.Origin == 0) {
			t.Errorf("%s: stamps %+v via Call, %+v via Invoke", op.name, vu.Stamp, vs.Stamp)
		}
		// Each single-view operation was one Call, and no Invoke; the
		// refused client tried Call once and then kept to Invoke.
		if n := unary.calls.Load(); n != int64(i+1) || unary.invokes.Load() != 0 {
			t.Fatalf("%s: the client made %d Calls and %d Invokes for %d single-view operations, want only Calls",
				op.name, n, unary.invokes.Load(), i+1)
		}
		if n := streamed.invokes.Load(); n != int64(i+1) || streamed.calls.Load() != 1 {
			t.Fatalf("%s: the client whose endpoint refuses Call made %d Calls and %d Invokes, want 1 and %d",
				op.name, streamed.calls.Load(), n, i+1)
		}
	}
	// Both views: Invoke, from both clients.
	for _, c := range []*client.Client{cu, cs} {
		views := c.Invoke(ctx, client.Put("both", []byte("x")))
		if _, err := views.Final(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if unary.invokes.Load() != 1 || unary.calls.Load() != int64(len(single)) {
		t.Errorf("after an operation for both views: %d Calls, %d Invokes; want %d and 1", unary.calls.Load(), unary.invokes.Load(), len(single))
	}
	// The counters of the two paths agree.
	su, ss := cu.Stats(), cs.Stats()
	if su.Ops != ss.Ops || su.Views != ss.Views || su.Failed != 0 || ss.Failed != 0 || su.BytesSent == 0 || su.BytesReceived == 0 ||
		su.WireBytesSent == 0 || su.WireBytesReceived == 0 {
		t.Errorf("stats via Call %+v, via Invoke %+v", su, ss)
	}
	// An oversized value is refused by the replica the same way.
	big := make([]byte, 2<<20)
	_, uerr := cu.InvokeWeak(ctx, client.Put("big", big)).Final(ctx)
	_, serr := cs.InvokeWeak(ctx, client.Put("big", big)).Final(ctx)
	if !errors.Is(uerr, client.ErrInvalidArgument) || !errors.Is(serr, client.ErrInvalidArgument) || uerr.Error() != serr.Error() {
		t.Errorf("oversized value: %v via Call, %v via Invoke; want the same ErrInvalidArgument", uerr, serr)
	}
	// A trace records the Call's bytes and view like the stream's.
	traces := make(chan client.OpTrace, 1)
	ct, err := client.Dial(ctx, addr, client.WithOpTrace(func(tr client.OpTrace) { traces <- tr }))
	if err != nil {
		t.Fatal(err)
	}
	defer ct.Close()
	if _, err := ct.InvokeStrong(ctx, client.Get("unary/k")).Final(ctx); err != nil {
		t.Fatal(err)
	}
	if tr := <-traces; tr.Views != 1 || tr.Attempts != 1 || tr.BytesSent == 0 || tr.BytesReceived == 0 || tr.Err != nil {
		t.Errorf("trace of a strong get: %+v", tr)
	}
}

// TestCallAtDrainingReplica: a draining replica refuses a Call like an
// Invoke, before running it, and the client fails a single-view update
// over to the next endpoint as it does for Invoke.
func TestCallAtDrainingReplica(t *testing.T) {
	pc := startPebbleCluster(t, 3, nil)
	peers, servers := pc.peers, pc.servers
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	strongPutUntilFinal(ctx, t, dial(t, peers[1]), time.Second)
	if warning, err := (clusterService{s: servers[1]}).drain(ctx, 3, time.Minute); err != nil || warning != "" {
		t.Fatalf("drain of replica 3: %q %v", warning, err)
	}
	c3 := dial(t, peers[3])
	req := &api.InvokeRequest{Op: put("k", "v"), Preliminary: true}
	_, ierr := invoke(ctx, c3, req)
	_, cerr := c3.Call(ctx, req)
	if status.Code(cerr) != codes.Unavailable || !strings.Contains(status.Convert(cerr).Message(), api.DrainingMarker) ||
		status.Convert(cerr).Message() != status.Convert(ierr).Message() {
		t.Fatalf("a write at draining replica 3: %v via Call, %v via Invoke; want the same Unavailable saying %q", cerr, ierr, api.DrainingMarker)
	}
	// Through the client: a client of replica 3 alone gets the refusal; one
	// of replicas 3 and 1 runs every update, at 1, failing over from 3
	// (refused before it ran) whenever it tries 3 first.
	var rc rpcCounter
	c3only, err := client.Dial(ctx, []string{peers[3]}, rc.option(), client.WithPipe(false))
	if err != nil {
		t.Fatal(err)
	}
	defer c3only.Close()
	_, err = c3only.InvokeWeak(ctx, client.Put("drained", []byte("x"))).Final(ctx)
	if !errors.Is(err, client.ErrUnavailable) || !strings.Contains(err.Error(), api.DrainingMarker) {
		t.Fatalf("weak put through a client of draining replica 3 alone: %v, want ErrUnavailable saying %q", err, api.DrainingMarker)
	}
	c, err := client.Dial(ctx, []string{peers[3], peers[1]}, rc.option(), client.WithPipe(false))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 4 {
		if _, err := c.InvokeWeak(ctx, client.Put(fmt.Sprint("k", i), []byte("x"))).Final(ctx); err != nil {
			t.Fatalf("weak put %d through a client of replicas 3 and 1: %v", i, err)
		}
	}
	if rc.invokes.Load() != 0 || rc.calls.Load() < 5 {
		t.Errorf("%d Calls and %d Invokes for 5 weak puts, want only Calls", rc.calls.Load(), rc.invokes.Load())
	}
	rep, err := dial(t, peers[1]).Call(ctx, &api.InvokeRequest{Op: getOp("k3"), Preliminary: true})
	if err != nil || !rep.GetResult().GetFound() {
		t.Fatalf("weak get at replica 1 of a put through the client: %v %v", rep, err)
	}
}

// TestCallBatchGivesCallsViews: a CallBatch of the single-view requests
// gives each the view a Call gives it, in order; a request in the batch
// that Call refuses is refused alone, with Call's code and message, and
// runs nothing, while the others run.
func TestCallBatchGivesCallsViews(t *testing.T) {
	servers := startCluster(t, 3, func(uint64) Storage { return &memStorage{MemoryStorage: raft.NewMemoryStorage()} })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := dial(t, servers[1].ClientAddr())
	strongPutUntilFinal(ctx, t, c, 2*time.Second)
	refused := []*api.InvokeRequest{
		{Op: put("batch/bad", "v"), Preliminary: true, Final: true},
		{Op: put("batch/bad", string(make([]byte, 2<<20))), Preliminary: true},
		{Op: getOp("batch/bad"), Final: true},
	}
	// Each step is its own batch after the first, so that a step sees the
	// one before it, as the Calls do; the first batch holds the refused
	// requests too, around a weak get and a weak put.
	for i, step := range singleViewSteps {
		want, err := c.Call(ctx, step.req("call/"))
		if err != nil {
			t.Fatalf("%s via Call: %v", step.name, err)
		}
		in := &api.CallBatchRequest{Calls: []*api.InvokeRequest{step.req("batch/")}}
		if i == 0 {
			in.Calls = append([]*api.InvokeRequest{refused[0]}, append(in.Calls, refused[1], refused[2])...)
		}
		rep, err := c.CallBatch(ctx, in)
		if err != nil || len(rep.GetResults()) != len(in.Calls) {
			t.Fatalf("%s via CallBatch: %v %v", step.name, rep, err)
		}
		for j, r := range rep.GetResults() {
			if j == 0 && i == 0 || j > 1 {
				_, cerr := c.Call(ctx, in.Calls[j])
				st := status.Convert(cerr)
				if r.GetReply() != nil || codes.Code(r.GetCode()) != st.Code() || r.GetMessage() != st.Message() || st.Code() != codes.InvalidArgument {
					t.Errorf("refused request %d in a batch: %v, Call's %v", j, r, cerr)
				}
				continue
			}
			got := r.GetReply()
			if got == nil || r.GetCode() != 0 {
				t.Fatalf("%s in a batch: %v", step.name, r)
			}
			if got.GetFinal() != want.GetFinal() || got.GetConfirmed() ||
				!proto.Equal(stripPrefix(got.GetResult(), "batch/"), stripPrefix(want.GetResult(), "call/")) {
				t.Errorf("%s: batched view %v, Call's %v", step.name, got, want)
			}
		}
	}
	// The refused put ran nothing.
	rep, err := c.Call(ctx, &api.InvokeRequest{Op: getOp("batch/bad"), Final: true, Strong: true})
	if err != nil || rep.GetResult().GetFound() {
		t.Fatalf("strong get of the refused put's key: %v %v", rep, err)
	}
	// An empty batch and one over the limit are refused whole.
	for _, n := range []int{0, MaxCallBatch + 1} {
		in := &api.CallBatchRequest{}
		for range n {
			in.Calls = append(in.Calls, &api.InvokeRequest{Op: getOp("k"), Preliminary: true})
		}
		if _, err := c.CallBatch(ctx, in); status.Code(err) != codes.InvalidArgument {
			t.Errorf("a batch of %d: %v, want InvalidArgument", n, err)
		}
	}
	// A batch that names another cluster is refused before it runs.
	octx := metadata.AppendToOutgoingContext(ctx, api.ClusterIDMetadata, api.FormatClusterID(servers[1].ClusterID()^1))
	_, err = c.CallBatch(octx, &api.CallBatchRequest{Calls: []*api.InvokeRequest{{Op: put("batch/other", "x"), Preliminary: true}}})
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("a batch for another cluster: %v, want FailedPrecondition", err)
	}
}

// TestClientBatchesUnderLoad: a client with many operations outstanding
// at one replica sends most of them in CallBatches, and every put is
// acknowledged and then read back, through the real server.
func TestClientBatchesUnderLoad(t *testing.T) {
	servers := startCluster(t, 3, func(uint64) Storage { return &memStorage{MemoryStorage: raft.NewMemoryStorage()} })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	strongPutUntilFinal(ctx, t, dial(t, servers[0].ClientAddr()), 2*time.Second)
	var rc rpcCounter
	c, err := client.Dial(ctx, []string{servers[0].ClientAddr()}, rc.option(), client.WithPipe(false), client.WithCallBatching(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const n = 300
	run := func(op func(i int) *correctable.Correctable[client.Result], check func(i int, v client.Result) error) {
		t.Helper()
		crs := make([]*correctable.Correctable[client.Result], n)
		for i := range n {
			crs[i] = op(i)
		}
		for i, cr := range crs {
			v, err := cr.Final(ctx)
			if err != nil {
				t.Fatalf("operation %d: %v", i, err)
			}
			if err := check(i, v.Value); err != nil {
				t.Fatalf("operation %d: %v", i, err)
			}
		}
	}
	// Weak puts, then strong gets, which see them (a strong read follows
	// the weak writes its replica acknowledged before it); strong puts,
	// then weak gets at the same replica, which has executed them.
	for _, strong := range []bool{false, true} {
		put, get := c.InvokeWeak, c.InvokeStrong
		if strong {
			put, get = c.InvokeStrong, c.InvokeWeak
		}
		run(func(i int) *correctable.Correctable[client.Result] {
			return put(ctx, client.Put(fmt.Sprint("load/", strong, i), []byte(fmt.Sprint("v", i))))
		}, func(int, client.Result) error { return nil })
		run(func(i int) *correctable.Correctable[client.Result] {
			return get(ctx, client.Get(fmt.Sprint("load/", strong, i)))
		}, func(i int, r client.Result) error {
			if !r.Found || string(r.Value) != fmt.Sprint("v", i) {
				return fmt.Errorf("get (strong put %v) of an acknowledged put: %+v", strong, r)
			}
			return nil
		})
	}
	calls, batches := rc.calls.Load(), rc.batches.Load()
	if batches == 0 || calls+batches >= 4*n {
		t.Errorf("%d Calls and %d CallBatches for %d operations, want batches and fewer requests than operations", calls, batches, 4*n)
	}
	if st := c.Stats(); st.Ops != 4*n || st.Views != 4*n || st.Failed != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestCallBatchBoundsItsReply: reads whose results would take a batch's
// reply past api.MaxBatchReplyBytes are refused with api.BatchFullMarker
// (and RefusedMarker), and the client sends them again alone: with a
// client that accepts replies of 4 MiB, as gRPC's default, concurrent
// weak gets of a 900 KiB value all succeed, batched or not.
func TestCallBatchBoundsItsReply(t *testing.T) {
	servers := startCluster(t, 3, func(uint64) Storage { return &memStorage{MemoryStorage: raft.NewMemoryStorage()} })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := dial(t, servers[0].ClientAddr())
	strongPutUntilFinal(ctx, t, c, 2*time.Second)
	big := string(make([]byte, 900<<10))
	if _, err := c.Call(ctx, &api.InvokeRequest{Op: put("big", big), Preliminary: true}); err != nil {
		t.Fatal(err)
	}
	in := &api.CallBatchRequest{}
	for range 6 {
		in.Calls = append(in.Calls, &api.InvokeRequest{Op: getOp("big"), Preliminary: true})
	}
	in.Calls = append(in.Calls, &api.InvokeRequest{Op: put("small", "v"), Preliminary: true})
	rep, err := c.CallBatch(ctx, in, grpc.MaxCallRecvMsgSize(64<<20))
	if err != nil {
		t.Fatal(err)
	}
	full := 0
	for i, r := range rep.GetResults() {
		switch {
		case r.GetReply() != nil:
			if i < 6 && len(r.GetReply().GetResult().GetValue()) != len(big) {
				t.Errorf("result %d: %d bytes", i, len(r.GetReply().GetResult().GetValue()))
			}
		case codes.Code(r.GetCode()) == codes.ResourceExhausted && strings.Contains(r.GetMessage(), api.BatchFullMarker) &&
			strings.Contains(r.GetMessage(), api.RefusedMarker):
			full++
		default:
			t.Errorf("result %d: %v", i, r)
		}
	}
	if full != 2 || rep.GetResults()[6].GetReply() == nil || proto.Size(rep) > api.MaxBatchReplyBytes+1024 {
		t.Errorf("%d reads refused as over the reply's bound (want 2 of 6 reads of 900 KiB), the put's result %v, reply %d bytes",
			full, rep.GetResults()[6], proto.Size(rep))
	}

	// Through the client, batched or on the pipe (whose replies gather
	// results up to about 256 KiB: a 900 KiB one goes alone), a client
	// that receives at most 4 MiB per message gets every read.
	for _, pipe := range []bool{false, true} {
		var rc rpcCounter
		cl, err := client.Dial(ctx, []string{servers[0].ClientAddr()}, rc.option(), client.WithCallBatching(1), client.WithPipe(pipe),
			client.WithDialOptions(grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(4<<20))))
		if err != nil {
			t.Fatal(err)
		}
		if pipe {
			// Operations take a call until the connection is ready (see
			// client's pipeUsable): open the pipe first, so that the 20
			// below all find it.
			untilPiped(ctx, t, cl, &rc)
		}
		var crs []*correctable.Correctable[client.Result]
		for range 20 {
			crs = append(crs, cl.InvokeWeak(ctx, client.Get("big")))
		}
		for i, cr := range crs {
			v, err := cr.Final(ctx)
			if err != nil || len(v.Value.Value) != len(big) {
				t.Fatalf("pipe %v: weak get %d of the 900 KiB value: %d bytes, %v", pipe, i, len(v.Value.Value), err)
			}
		}
		if st := cl.Stats(); st.Failed != 0 || st.Failovers != 0 {
			t.Errorf("pipe %v: stats %+v", pipe, st)
		}
		if pipe && (rc.pipes.Load() != 1 || rc.calls.Load() != 0 || rc.batches.Load() != 0) {
			t.Errorf("on the pipe: %d pipes, %d calls, %d batches; want 1, 0, 0", rc.pipes.Load(), rc.calls.Load(), rc.batches.Load())
		}
		cl.Close()
	}
}
