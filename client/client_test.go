package client_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/correctable"
)

var errUnavailable = status.Error(codes.Unavailable, "replica stopping")

var (
	resA = &api.Result{Found: true, Value: []byte("alpha")}
	resB = &api.Result{Found: true, Value: []byte("beta")}
)

// TestViewSequences checks, for each way of invoking, the request sent and
// the views delivered: levels, values, Final, Confirmed and Stamp.
func TestViewSequences(t *testing.T) {
	type want struct {
		level     correctable.Level
		value     string
		confirmed bool
	}
	tests := []struct {
		name   string
		final  *api.Result // nil: confirmation
		invoke func(context.Context, *client.Client) *correctable.Correctable[client.Result]
		req    *api.InvokeRequest // without Op
		views  []want
	}{{
		name:  "invoke, final differs",
		final: resB,
		invoke: func(ctx context.Context, c *client.Client) *correctable.Correctable[client.Result] {
			return c.Invoke(ctx, client.Get("k"))
		},
		req:   &api.InvokeRequest{Preliminary: true, Final: true, Strong: true},
		views: []want{{correctable.Eventual, "alpha", false}, {correctable.Strong, "beta", false}},
	}, {
		name: "invoke, final confirms",
		invoke: func(ctx context.Context, c *client.Client) *correctable.Correctable[client.Result] {
			return c.Get(ctx, "k")
		},
		req:   &api.InvokeRequest{Preliminary: true, Final: true, Strong: true},
		views: []want{{correctable.Eventual, "alpha", false}, {correctable.Strong, "alpha", true}},
	}, {
		name:  "explicit levels",
		final: resB,
		invoke: func(ctx context.Context, c *client.Client) *correctable.Correctable[client.Result] {
			return c.Get(ctx, "k", correctable.Eventual, correctable.Strong)
		},
		req:   &api.InvokeRequest{Preliminary: true, Final: true, Strong: true},
		views: []want{{correctable.Eventual, "alpha", false}, {correctable.Strong, "beta", false}},
	}, {
		name: "weak",
		invoke: func(ctx context.Context, c *client.Client) *correctable.Correctable[client.Result] {
			return c.InvokeWeak(ctx, client.Get("k"))
		},
		req:   &api.InvokeRequest{Preliminary: true},
		views: []want{{correctable.Eventual, "alpha", false}},
	}, {
		name: "weak by level",
		invoke: func(ctx context.Context, c *client.Client) *correctable.Correctable[client.Result] {
			return c.Get(ctx, "k", correctable.Eventual)
		},
		req:   &api.InvokeRequest{Preliminary: true},
		views: []want{{correctable.Eventual, "alpha", false}},
	}, {
		name:  "strong",
		final: resB,
		invoke: func(ctx context.Context, c *client.Client) *correctable.Correctable[client.Result] {
			return c.InvokeStrong(ctx, client.Get("k"))
		},
		req:   &api.InvokeRequest{Final: true, Strong: true},
		views: []want{{correctable.Strong, "beta", false}},
	}, {
		name:  "weak committed",
		final: resB,
		invoke: func(ctx context.Context, c *client.Client) *correctable.Correctable[client.Result] {
			return c.InvokeWeakCommitted(ctx, client.Put("k", []byte("v")))
		},
		req:   &api.InvokeRequest{Preliminary: true, Final: true},
		views: []want{{correctable.Eventual, "alpha", false}, {correctable.Strong, "beta", false}},
	}, {
		name: "weak committed, confirmed",
		invoke: func(ctx context.Context, c *client.Client) *correctable.Correctable[client.Result] {
			return c.InvokeWeakCommitted(ctx, client.Incr("n", 1))
		},
		req:   &api.InvokeRequest{Preliminary: true, Final: true},
		views: []want{{correctable.Eventual, "alpha", false}, {correctable.Strong, "alpha", true}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeStore{id: 7, prelim: resA, final: tt.final, gate: make(chan struct{})}
			addr, _ := serve(t, f)
			c := dial(t, []string{addr})
			wait := record(t, tt.invoke(t.Context(), c))
			close(f.gate)
			views, err := wait()
			if err != nil {
				t.Fatalf("failed: %v", err)
			}
			if len(views) != len(tt.views) {
				t.Fatalf("got %d views, want %d: %+v", len(views), len(tt.views), views)
			}
			for i, v := range views {
				w := tt.views[i]
				if v.Level != w.level || string(v.Value.Value) != w.value || v.Confirmed != w.confirmed || v.Final != (i == len(views)-1) {
					t.Errorf("view %d = {%v %q confirmed=%v final=%v}, want {%v %q confirmed=%v final=%v}",
						i, v.Level, v.Value.Value, v.Confirmed, v.Final, w.level, w.value, w.confirmed, i == len(views)-1)
				}
				s, ok := client.StampOf(v)
				if !ok || s.Replica != 7 || s.AppliedIndex != 11 || s.CommittedCount != 5 || s.StableTime != 99 ||
					s.VV[2] != 4 || s.Op != (client.OpID{Origin: 7, Seq: 1}) {
					t.Errorf("view %d stamp = %+v, %v", i, s, ok)
				}
			}
			reqs := f.requests()
			if len(reqs) != 1 {
				t.Fatalf("%d requests, want 1", len(reqs))
			}
			got := proto.CloneOf(reqs[0])
			got.Op = nil
			if !proto.Equal(got, tt.req) {
				t.Errorf("request = %v, want %v", got, tt.req)
			}
			st := c.Stats()
			if want := uint64(len(tt.views)); st.Views != want {
				t.Errorf("Stats.Views = %d, want %d", st.Views, want)
			}
			if confirmed := tt.views[len(tt.views)-1].confirmed; confirmed != (st.Confirmations == 1) {
				t.Errorf("Stats.Confirmations = %d", st.Confirmations)
			}
		})
	}
}

// TestOpEncoding checks that each constructor reaches the wire with its
// kind and fields.
func TestOpEncoding(t *testing.T) {
	v, x := []byte("v"), []byte("x")
	tests := []struct {
		op   client.Op
		want *api.Op
	}{
		{client.Get("k"), &api.Op{Kind: api.Kind_KIND_GET, Key: "k"}},
		{client.Put("k", v), &api.Op{Kind: api.Kind_KIND_PUT, Key: "k", Value: v}},
		{client.Delete("k"), &api.Op{Kind: api.Kind_KIND_DELETE, Key: "k"}},
		{client.CAS("k", x, v), &api.Op{Kind: api.Kind_KIND_CAS, Key: "k", Expected: x, Value: v}},
		{client.CASAbsent("k", v), &api.Op{Kind: api.Kind_KIND_CAS, Key: "k", Value: v, ExpectAbsent: true}},
		{client.Incr("k", -3), &api.Op{Kind: api.Kind_KIND_INCR, Key: "k", Delta: -3}},
		{client.Append("k", v), &api.Op{Kind: api.Kind_KIND_APPEND, Key: "k", Value: v}},
		{client.Scan("p/", 10), &api.Op{Kind: api.Kind_KIND_SCAN, Key: "p/", Limit: 10}},
		{client.Enqueue("q", v), &api.Op{Kind: api.Kind_KIND_ENQUEUE, Key: "q", Value: v}},
		{client.Dequeue("q"), &api.Op{Kind: api.Kind_KIND_DEQUEUE, Key: "q"}},
		{client.Noop(), &api.Op{Kind: api.Kind_KIND_NOOP}},
		{
			client.Txn(
				[]client.Guard{client.IfEqual("a", x), client.IfNotEqual("b", x), client.IfExists("c"),
					client.IfAbsent("d"), client.IfLess("e", x), client.IfGreater("f", x)},
				[]client.Write{client.PutWrite("a", v), client.DeleteWrite("b")},
				[]client.Write{client.PutWrite("z", x)}),
			&api.Op{Kind: api.Kind_KIND_TXN, Txn: &api.Txn{
				Guards: []*api.Guard{
					{Key: "a", Cmp: api.Cmp_CMP_EQUAL, Value: x}, {Key: "b", Cmp: api.Cmp_CMP_NOT_EQUAL, Value: x},
					{Key: "c", Cmp: api.Cmp_CMP_EXISTS}, {Key: "d", Cmp: api.Cmp_CMP_ABSENT},
					{Key: "e", Cmp: api.Cmp_CMP_LESS, Value: x}, {Key: "f", Cmp: api.Cmp_CMP_GREATER, Value: x},
				},
				ThenWrites: []*api.Write{{Key: "a", Value: v}, {Delete: true, Key: "b"}},
				ElseWrites: []*api.Write{{Key: "z", Value: x}},
			}},
		},
	}
	f := &fakeStore{prelim: resA}
	addr, _ := serve(t, f)
	c := dial(t, []string{addr})
	for _, tt := range tests {
		if _, err := final(t, c.InvokeWeak(t.Context(), tt.op)); err != nil {
			t.Fatalf("%v: %v", tt.op, err)
		}
	}
	reqs := f.requests()
	for i, tt := range tests {
		if !proto.Equal(reqs[i].GetOp(), tt.want) {
			t.Errorf("%v encoded as %v, want %v", tt.op, reqs[i].GetOp(), tt.want)
		}
	}
}

// TestResultDecoding checks every result field and the mapping of result
// codes to sentinel errors, which may differ between the two views.
func TestResultDecoding(t *testing.T) {
	full := &api.Result{Found: true, Value: []byte("v"), Int: -4, Len: 9, Ok: true,
		Items: []*api.KV{{Key: "a", Value: []byte("1")}, {Key: "b"}}}
	f := &fakeStore{prelim: &api.Result{Err: 6}, final: full}
	addr, _ := serve(t, f)
	c := dial(t, []string{addr})
	inv := c.Incr(t.Context(), "n", 1)
	v, err := final(t, inv)
	if err != nil {
		t.Fatal(err)
	}
	want := client.Result{Found: true, Value: []byte("v"), Int: -4, Len: 9, OK: true,
		Items: []client.KV{{Key: "a", Value: []byte("1")}, {Key: "b"}}}
	if !v.Value.Equal(want) || v.Value.Err != nil {
		t.Errorf("final result = %+v, want %+v", v.Value, want)
	}

	for code, sentinel := range map[uint32]error{
		1: client.ErrUnknownOp, 2: client.ErrBadArgs, 3: client.ErrKeyTooLarge, 4: client.ErrValueTooLarge,
		5: client.ErrTooManyOps, 6: client.ErrNotInteger, 7: client.ErrOverflow, 200: client.ErrUnknownCode,
	} {
		f := &fakeStore{prelim: &api.Result{Err: code}}
		addr, _ := serve(t, f)
		c := dial(t, []string{addr})
		v, err := final(t, c.Incr(t.Context(), "n", 1, correctable.Eventual))
		if err != nil {
			t.Fatalf("code %d: the Correctable failed: %v", code, err)
		}
		if !errors.Is(v.Value.Err, sentinel) {
			t.Errorf("code %d: Result.Err = %v, want %v", code, v.Value.Err, sentinel)
		}
		if v.Value.Equal(client.Result{}) || !v.Value.Equal(client.Result{Err: v.Value.Err}) {
			t.Errorf("code %d: Equal ignores Err", code)
		}
	}
}

// TestStatusErrors checks the one table from gRPC status to sentinels: the
// Correctable fails with an error that matches the sentinel and keeps the
// server's message.
func TestStatusErrors(t *testing.T) {
	tests := []struct {
		code codes.Code
		want error
	}{
		{codes.InvalidArgument, client.ErrInvalidArgument},
		{codes.ResourceExhausted, client.ErrOverloaded},
		{codes.Unavailable, client.ErrUnavailable},
		{codes.Unimplemented, client.ErrUnimplemented},
		{codes.Internal, client.ErrServer},
		{codes.FailedPrecondition, client.ErrServer},
	}
	for _, tt := range tests {
		t.Run(tt.code.String(), func(t *testing.T) {
			f := &fakeStore{fail: status.Error(tt.code, "the server says no")}
			addr, _ := serve(t, f)
			c := dial(t, []string{addr})
			_, err := final(t, c.Put(t.Context(), "k", []byte("v")))
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), "the server says no") || !strings.Contains(err.Error(), addr) {
				t.Errorf("err = %q: lost the server's message or the endpoint", err)
			}
			if st := c.Stats(); st.Ops != 1 || st.Failed != 1 {
				t.Errorf("Stats = %+v, want 1 op, 1 failed", st)
			}
		})
	}
}

// TestProtocolViolations checks that a server breaking the view protocol
// fails the Correctable with ErrProtocol instead of delivering a wrong view.
func TestProtocolViolations(t *testing.T) {
	type stream = grpc.ServerStreamingServer[api.ViewReply]
	tests := []struct {
		name   string
		levels []correctable.Level
		script func(*api.InvokeRequest, stream) error
	}{{
		name:   "confirmation without preliminary",
		levels: []correctable.Level{correctable.Strong},
		script: func(_ *api.InvokeRequest, s stream) error {
			return s.Send(&api.ViewReply{Final: true, Confirmed: true})
		},
	}, {
		name: "view without result",
		script: func(_ *api.InvokeRequest, s stream) error {
			return s.Send(&api.ViewReply{})
		},
	}, {
		name: "no final view",
		script: func(_ *api.InvokeRequest, s stream) error {
			return s.Send(&api.ViewReply{Result: resA})
		},
	}, {
		name:   "preliminary not requested",
		levels: []correctable.Level{correctable.Strong},
		script: func(_ *api.InvokeRequest, s stream) error {
			return s.Send(&api.ViewReply{Result: resA})
		},
	}, {
		name: "two preliminaries",
		script: func(_ *api.InvokeRequest, s stream) error {
			if err := s.Send(&api.ViewReply{Result: resA}); err != nil {
				return err
			}
			return s.Send(&api.ViewReply{Result: resB})
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr, _ := serve(t, &fakeStore{script: tt.script})
			c := dial(t, []string{addr})
			_, err := final(t, c.Get(t.Context(), "k", tt.levels...))
			if !errors.Is(err, client.ErrProtocol) {
				t.Fatalf("err = %v, want ErrProtocol", err)
			}
		})
	}
}

// TestWeakReplyNotMarkedFinal: a server may end a weak-only stream after a
// preliminary reply not marked final; it is still the one view.
func TestWeakReplyNotMarkedFinal(t *testing.T) {
	addr, _ := serve(t, &fakeStore{script: func(_ *api.InvokeRequest, s grpc.ServerStreamingServer[api.ViewReply]) error {
		return s.Send(&api.ViewReply{Result: resA})
	}})
	c := dial(t, []string{addr})
	v, err := final(t, c.InvokeWeak(t.Context(), client.Get("k")))
	if err != nil || string(v.Value.Value) != "alpha" || v.Level != correctable.Eventual {
		t.Fatalf("got %+v, %v", v, err)
	}
}

// TestInvalidBeforeSending: what the wire cannot carry or the store would
// refuse fails at once, with ErrInvalidArgument, and nothing is sent.
func TestInvalidBeforeSending(t *testing.T) {
	f := &fakeStore{prelim: resA}
	addr, _ := serve(t, f)
	c := dial(t, []string{addr})
	for name, inv := range map[string]*correctable.Correctable[client.Result]{
		"zero op":              c.Invoke(t.Context(), client.Op{}),
		"negative scan limit":  c.Scan(t.Context(), "p", -1),
		"weak committed read":  c.InvokeWeakCommitted(t.Context(), client.Get("k")),
		"weak committed query": c.InvokeWeakCommitted(t.Context(), client.Txn([]client.Guard{client.IfExists("a")}, nil, nil)),
	} {
		if _, err := final(t, inv); !errors.Is(err, client.ErrInvalidArgument) {
			t.Errorf("%s: err = %v, want ErrInvalidArgument", name, err)
		}
	}
	if _, err := final(t, c.Get(t.Context(), "k", correctable.Causal)); !errors.Is(err, correctable.ErrInvalidLevels) {
		t.Errorf("level not offered: err = %v, want ErrInvalidLevels", err)
	}
	if n := len(f.requests()); n != 0 {
		t.Errorf("%d requests sent", n)
	}
}

// TestBytes checks the byte counts against what the fake sent and
// received, and the saving a confirmation brings.
func TestBytes(t *testing.T) {
	big := &api.Result{Found: true, Value: bytes.Repeat([]byte("x"), 1000)}
	f := &fakeStore{prelim: big} // final nil: confirmed
	addr, _ := serve(t, f)
	var (
		mu     sync.Mutex
		traces []client.OpTrace
	)
	c := dial(t, []string{addr}, client.WithOpTrace(func(tr client.OpTrace) {
		mu.Lock()
		defer mu.Unlock()
		traces = append(traces, tr)
	}))
	const n = 5
	for range n {
		if _, err := final(t, c.Get(t.Context(), "key")); err != nil {
			t.Fatal(err)
		}
	}
	st := c.Stats()
	var sent int
	for _, r := range f.requests() {
		sent += proto.Size(r)
	}
	if st.Ops != n || st.Views != 2*n || st.Confirmations != n || st.Failed != 0 {
		t.Errorf("Stats = %+v", st)
	}
	if st.BytesSent != uint64(sent) || st.BytesReceived != uint64(f.replySizes()) {
		t.Errorf("bytes sent/received = %d/%d, want %d/%d", st.BytesSent, st.BytesReceived, sent, f.replySizes())
	}
	if want := uint64(n * proto.Size(big)); st.BytesSaved != want {
		t.Errorf("BytesSaved = %d, want %d", st.BytesSaved, want)
	}
	// gRPC frames each message with 5 bytes; no compression here.
	if st.WireBytesSent != st.BytesSent+5*n || st.WireBytesReceived != st.BytesReceived+5*2*n {
		t.Errorf("wire bytes sent/received = %d/%d, want %d/%d",
			st.WireBytesSent, st.WireBytesReceived, st.BytesSent+5*n, st.BytesReceived+10*n)
	}
	// The hook runs after the final view was delivered: wait for the last.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		mu.Lock()
		if len(traces) == n || time.Now().After(deadline) {
			break
		}
		mu.Unlock()
	}
	defer mu.Unlock()
	if len(traces) != n {
		t.Fatalf("%d traces, want %d", len(traces), n)
	}
	for i, tr := range traces {
		if tr.Op.Kind() != client.KindGet || tr.Endpoint != addr || tr.Attempts != 1 || tr.Views != 2 || !tr.Confirmed ||
			tr.BytesSent != proto.Size(f.requests()[i]) || tr.BytesSaved != proto.Size(big) ||
			uint64(tr.BytesReceived) != st.BytesReceived/n || tr.Err != nil || tr.Elapsed <= 0 {
			t.Errorf("trace %d = %+v", i, tr)
		}
	}
	// The confirmation carries no payload: both views cost little more
	// than one.
	if per := st.BytesReceived / n; per > uint64(proto.Size(big))+100 {
		t.Errorf("%d bytes received per op for a %d-byte result", per, proto.Size(big))
	}
}

// TestContextEnds: the caller's context ending fails the Correctable with
// its error and ends the call at the server.
func TestContextEnds(t *testing.T) {
	f := &fakeStore{prelim: resA, gate: make(chan struct{})} // never opened
	addr, _ := serve(t, f)
	c := dial(t, []string{addr})
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err := final(t, c.Get(ctx, "k"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
}
