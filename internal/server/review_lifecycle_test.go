package server

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/internal/replica"
)

func reviewQuiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func reviewMem() Storage { return &memStorage{MemoryStorage: raft.NewMemoryStorage()} }

// within fails the test if f does not return within d.
//
// d is what the call takes on an idle machine; under the race detector on
// busy cores it may take many times that, so the bound is at least a
// minute: what is checked is that the call returns rather than hangs.
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	d = max(d, time.Minute)
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s did not return within %v", what, d)
	}
}

// Stop before Start, and Stop twice, return at once.
func TestReviewStopBeforeStartAndTwice(t *testing.T) {
	addr := freeAddr(t)
	s, err := New(Config{ID: 1, Peers: map[uint64]string{1: addr}, ClientAddr: addr, Storage: reviewMem(), Logger: reviewQuiet()})
	if err != nil {
		t.Fatal(err)
	}
	within(t, 3*time.Second, "Stop before Start", func() {
		if err := s.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	within(t, 3*time.Second, "second Stop", func() { s.Stop() })

	addr = freeAddr(t)
	s, err = New(Config{ID: 1, Peers: map[uint64]string{1: addr}, ClientAddr: addr, Storage: reviewMem(), Logger: reviewQuiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	within(t, 5*time.Second, "Stop", func() { s.Stop() })
	within(t, 3*time.Second, "second Stop", func() { s.Stop() })
	// Concurrent Stops after the first one are fine too.
	within(t, 3*time.Second, "concurrent Stops", func() {
		done := make(chan struct{})
		for range 4 {
			go func() { s.Stop(); done <- struct{}{} }()
		}
		for range 4 {
			<-done
		}
	})
}

// A replica whose peers never come up: a strong put waits; Stop ends it with
// Unavailable, and Stop itself returns promptly (peer goroutines that keep
// redialling a dead address included).
func TestReviewStopWithRequestsInFlightAndDeadPeers(t *testing.T) {
	peers := map[uint64]string{1: freeAddr(t), 2: deadAddr(t), 3: deadAddr(t)}
	s, err := New(Config{ID: 1, Peers: peers, ClientAddr: peers[1], Storage: reviewMem(), Logger: reviewQuiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	c := dial(t, peers[1])
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Preliminary view arrives; the final one cannot (no quorum).
	st, err := c.Invoke(ctx, &api.InvokeRequest{Op: put("k", "v"), Preliminary: true, Final: true, Strong: true})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := st.Recv(); err != nil || v.GetFinal() {
		t.Fatalf("first view: %v %v", v, err)
	}
	// A strong read too (it waits for a read index).
	rd, err := c.Invoke(ctx, &api.InvokeRequest{Op: &api.Op{Kind: api.Kind_KIND_GET, Key: "k"}, Final: true, Strong: true})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // let the peers fail to connect a few times
	within(t, 5*time.Second, "Stop with requests in flight", func() { s.Stop() })
	for _, recv := range []func() error{
		func() error { _, err := st.Recv(); return err },
		func() error { _, err := rd.Recv(); return err },
	} {
		if err := recv(); status.Code(err) != codes.Unavailable {
			t.Errorf("stream after Stop: %v, want Unavailable", err)
		}
	}
	within(t, 3*time.Second, "second Stop", func() { s.Stop() })
}

// A client that cancels its stream while the final view cannot come does not
// keep an inflight slot: MaxInflight requests abandoned one after the other
// leave room for more.
func TestReviewCancelledStreamsFreeInflight(t *testing.T) {
	peers := map[uint64]string{1: freeAddr(t), 2: deadAddr(t), 3: deadAddr(t)}
	s := startServers(t, Config{ID: 1, Peers: peers, ClientAddr: peers[1], Storage: reviewMem(), Logger: reviewQuiet(), MaxInflight: 4})[0]
	c := dial(t, peers[1])
	// The server learns of a cancellation when the client's RST_STREAM
	// arrives and the handler's context ends, some time after cancel
	// returns: each request waits for a free slot (held by handlers that
	// have not noticed yet), not for a moment. A leaked slot makes the wait
	// fail: 12 requests need 8 slots freed.
	for i := range 12 {
		waitInflight(t, s, cap(s.inflight)-1)
		ctx, cancel := context.WithCancel(context.Background())
		st, err := c.Invoke(ctx, &api.InvokeRequest{Op: &api.Op{Kind: api.Kind_KIND_GET, Key: "k"}, Preliminary: true, Final: true, Strong: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		cancel()
	}
	// Every abandoned request frees its slot. (A weak read that succeeds
	// shows only that one slot is free, and the four requests below need
	// all of them: waiting for that alone failed about 1 run in 30.)
	waitInflight(t, s, 0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	if _, err := invoke(ctx, c, &api.InvokeRequest{Op: &api.Op{Kind: api.Kind_KIND_GET, Key: "k"}, Preliminary: true}); err != nil {
		t.Fatalf("weak read after abandoned strong reads: %v", err)
	}
	cancel()
	// MaxInflight requests really in flight exhaust the semaphore, with
	// ResourceExhausted, not a hang.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	for i := range 4 {
		st, err := c.Invoke(ctx, &api.InvokeRequest{Op: &api.Op{Kind: api.Kind_KIND_GET, Key: "k"}, Preliminary: true, Final: true, Strong: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatalf("held request %d: %v", i, err)
		}
	}
	tctx, tcancel := context.WithTimeout(context.Background(), time.Minute)
	defer tcancel()
	if _, err := invoke(tctx, c, &api.InvokeRequest{Op: &api.Op{Kind: api.Kind_KIND_GET, Key: "k"}, Preliminary: true}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("request over MaxInflight: %v, want ResourceExhausted", err)
	}
}

// waitInflight waits until at most n client requests hold an inflight
// slot. Slots are freed when handlers return, which for a cancelled stream
// happens when the server notices the cancellation: asynchronously, so
// this waits for the condition, with a deadline only against a leak.
func waitInflight(t *testing.T, s *Server, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(s.inflight) > n {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests still hold inflight slots after 30s, want at most %d: cancelled streams leak them", len(s.inflight), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Hostile operations: every one is InvalidArgument and none changes the
// state.
func TestReviewHostileOps(t *testing.T) {
	servers := startCluster(t, 1, func(uint64) Storage { return reviewMem() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := dial(t, servers[0].ClientAddr())
	big := make([]byte, 1<<20+1)
	writes := func(n int) []*api.Write {
		ws := make([]*api.Write, n)
		for i := range ws {
			ws[i] = &api.Write{Key: "w", Value: []byte("v")}
		}
		return ws
	}
	for _, tc := range []struct {
		name string
		op   *api.Op
	}{
		{"negative scan limit", &api.Op{Kind: api.Kind_KIND_SCAN, Limit: -1}},
		{"min int32 scan limit", &api.Op{Kind: api.Kind_KIND_SCAN, Limit: -1 << 31}},
		{"huge scan limit", &api.Op{Kind: api.Kind_KIND_SCAN, Limit: 1<<31 - 1}},
		{"scan limit just over", &api.Op{Kind: api.Kind_KIND_SCAN, Limit: 1001}},
		{"txn without txn", &api.Op{Kind: api.Kind_KIND_TXN}},
		{"txn too many writes", &api.Op{Kind: api.Kind_KIND_TXN, Txn: &api.Txn{ThenWrites: writes(129)}}},
		{"txn too many across branches", &api.Op{Kind: api.Kind_KIND_TXN, Txn: &api.Txn{ThenWrites: writes(64), ElseWrites: writes(64),
			Guards: []*api.Guard{{Key: "g", Cmp: api.Cmp_CMP_EXISTS}}}}},
		{"txn nil guard", &api.Op{Kind: api.Kind_KIND_TXN, Txn: &api.Txn{Guards: []*api.Guard{nil}, ThenWrites: writes(1)}}},
		{"txn unspecified cmp", &api.Op{Kind: api.Kind_KIND_TXN, Txn: &api.Txn{Guards: []*api.Guard{{Key: "g"}}, ThenWrites: writes(1)}}},
		{"txn unknown cmp", &api.Op{Kind: api.Kind_KIND_TXN, Txn: &api.Txn{Guards: []*api.Guard{{Key: "g", Cmp: 42}}, ThenWrites: writes(1)}}},
		{"txn write value too large", &api.Op{Kind: api.Kind_KIND_TXN, Txn: &api.Txn{ThenWrites: []*api.Write{{Key: "w", Value: big}}}}},
		{"txn write key too large", &api.Op{Kind: api.Kind_KIND_TXN, Txn: &api.Txn{ThenWrites: []*api.Write{{Key: strings.Repeat("k", 5000), Value: []byte("v")}}}}},
		{"txn on a put", &api.Op{Kind: api.Kind_KIND_PUT, Key: "w", Value: []byte("v"), Txn: &api.Txn{ThenWrites: writes(1)}}},
		{"cas expect absent and expected", &api.Op{Kind: api.Kind_KIND_CAS, Key: "w", Value: []byte("v"), Expected: []byte("x"), ExpectAbsent: true}},
		{"cas expected too large", &api.Op{Kind: api.Kind_KIND_CAS, Key: "w", Value: []byte("v"), Expected: big}},
		{"enqueue item too large", &api.Op{Kind: api.Kind_KIND_ENQUEUE, Key: "w", Value: big}},
		{"limit on a put", &api.Op{Kind: api.Kind_KIND_PUT, Key: "w", Value: []byte("v"), Limit: 5}},
		{"negative kind", &api.Op{Kind: -1, Key: "w"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, req := range []*api.InvokeRequest{
				{Op: tc.op, Preliminary: true},
				{Op: tc.op, Preliminary: true, Final: true, Strong: true},
			} {
				_, err := invoke(ctx, c, req)
				if status.Code(err) != codes.InvalidArgument {
					t.Fatalf("%v: want InvalidArgument, got %v", req, err)
				}
			}
		})
	}
	views, err := invoke(ctx, c, &api.InvokeRequest{Op: &api.Op{Kind: api.Kind_KIND_SCAN}, Final: true, Strong: true})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(views[0].GetResult().GetItems()); n != 0 {
		t.Fatalf("hostile requests changed the state: %d keys", n)
	}
	// An 8 MiB value is over the value limit: refused as an invalid
	// argument (not as overload, which would invite a retry).
	_, err = invoke(ctx, c, &api.InvokeRequest{Op: put("k", string(make([]byte, 8<<20+1))), Preliminary: true})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("oversized message: %v, want InvalidArgument", err)
	}
}

// The peer service refuses envelopes from non-peers, from itself, with
// undecodable or misaddressed messages; nothing reaches the replica, and the
// replica keeps serving.
func TestReviewPeerEnvelopeValidation(t *testing.T) {
	peers := map[uint64]string{1: freeAddr(t), 2: deadAddr(t)}
	startServers(t, Config{ID: 1, Peers: peers, ClientAddr: peers[1], Storage: reviewMem(), Logger: reviewQuiet()})
	pc := api.NewPeerClient(plainConn(t, peers[1]))
	enc := func(m replica.Message) []byte {
		b, err := replica.EncodeMessage(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	sync := func(from, to uint64) []byte {
		return enc(replica.Message{Type: replica.MsgSync, From: from, To: to, VV: replica.VV{from: 0}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name string
		env  *api.PeerEnvelope
	}{
		{"no sender", &api.PeerEnvelope{Messages: [][]byte{sync(0, 1)}}},
		{"non-peer", &api.PeerEnvelope{From: 99, Messages: [][]byte{sync(99, 1)}}},
		{"itself", &api.PeerEnvelope{From: 1, Messages: [][]byte{sync(1, 1)}}},
		{"garbage", &api.PeerEnvelope{From: 2, Messages: [][]byte{{0xff, 0xff, 0xff}}}},
		{"empty message", &api.PeerEnvelope{From: 2, Messages: [][]byte{{}}}},
		{"spoofed inner sender", &api.PeerEnvelope{From: 2, Messages: [][]byte{sync(99, 1)}}},
		{"addressed to another", &api.PeerEnvelope{From: 2, Messages: [][]byte{sync(2, 3)}}},
		// Messages in parts (PeerEnvelope.part).
		{"part over its whole", &api.PeerEnvelope{From: 2, Part: make([]byte, 10), Whole: 5}},
		{"part with messages", &api.PeerEnvelope{From: 2, Part: []byte{1}, Whole: 5, Messages: [][]byte{sync(2, 1)}}},
		{"part without its whole", &api.PeerEnvelope{From: 2, Part: []byte{1}}},
		{"empty part", &api.PeerEnvelope{From: 2, Whole: 5}},
		{"whole over the bound", &api.PeerEnvelope{From: 2, Part: []byte{1}, Whole: maxWholeMessage + 1}},
		{"garbage in parts", &api.PeerEnvelope{From: 2, Part: []byte{0xff, 0xff, 0xff}, Whole: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := pc.Stream(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Send(tc.env); err != nil {
				t.Fatal(err)
			}
			_, err = st.CloseAndRecv()
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("want InvalidArgument, got %v", err)
			}
		})
	}
	// A part cut short by another message.
	st, err := pc.Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	whole := sync(2, 1)
	for _, e := range []*api.PeerEnvelope{
		{From: 2, Part: whole[:2], Whole: uint64(len(whole))},
		{From: 2, Messages: [][]byte{sync(2, 1)}},
	} {
		if err := st.Send(e); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.CloseAndRecv(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a message cut short: want InvalidArgument, got %v", err)
	}
	// Well-formed envelopes from a peer are accepted: one of messages, and
	// one message in two parts.
	st, err = pc.Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []*api.PeerEnvelope{
		{From: 2, Messages: [][]byte{sync(2, 1)}},
		{From: 2, Part: whole[:2], Whole: uint64(len(whole))},
		{From: 2, Part: whole[2:], Whole: uint64(len(whole))},
	} {
		if err := st.Send(e); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.CloseAndRecv(); err != nil {
		t.Fatalf("good envelopes: %v", err)
	}
	// The replica still serves.
	if _, err := invoke(ctx, dial(t, peers[1]), &api.InvokeRequest{Op: put("k", "v"), Preliminary: true}); err != nil {
		t.Fatal(err)
	}
}
