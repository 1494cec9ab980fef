package client_test

import (
	"errors"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/correctable"
)

// TestNearestEndpoint: with one endpoint made slower, the Client measures
// it, ranks it second and sends every operation to the other.
func TestNearestEndpoint(t *testing.T) {
	slow := &fakeStore{id: 1, prelim: resA, delay: 30 * time.Millisecond}
	fast := &fakeStore{id: 2, prelim: resA}
	slowAddr, _ := serve(t, slow)
	fastAddr, _ := serve(t, fast)
	// The slow one listed first. Nine probes each, not Dial's default three:
	// the order is the median's, and on a loaded machine (the suite under
	// -race with both cores busy) a probe of the fast one can be held for
	// tens of milliseconds too.
	c := dial(t, []string{slowAddr, fastAddr}, client.WithInitialProbes(9))

	eps := c.Endpoints()
	if eps[0].Address != fastAddr || eps[0].Replica != 2 || !eps[0].Healthy || !eps[1].Healthy {
		t.Fatalf("Endpoints = %+v, want %s first", eps, fastAddr)
	}
	if eps[1].RTT < 30*time.Millisecond || eps[0].RTT >= eps[1].RTT {
		t.Errorf("RTTs = %v (fast), %v (slow)", eps[0].RTT, eps[1].RTT)
	}
	for range 5 {
		if _, err := final(t, c.Get(t.Context(), "k")); err != nil {
			t.Fatal(err)
		}
	}
	if n, m := len(fast.requests()), len(slow.requests()); n != 5 || m != 0 {
		t.Errorf("fast got %d requests, slow %d; want 5, 0", n, m)
	}
}

// TestDialSkipsDownEndpoint: an endpoint down at Dial is ranked last and
// operations go to the live one.
func TestDialSkipsDownEndpoint(t *testing.T) {
	live := &fakeStore{prelim: resA}
	addr, _ := serve(t, live)
	dead := deadAddr(t)
	c := dial(t, []string{dead, addr})
	eps := c.Endpoints()
	if eps[0].Address != addr || eps[1].Address != dead || eps[1].Healthy || eps[1].Err == nil {
		t.Fatalf("Endpoints = %+v", eps)
	}
	if _, err := final(t, c.Put(t.Context(), "k", []byte("v"))); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.Failovers != 0 {
		t.Errorf("Failovers = %d, want 0: the dead endpoint should not be tried first", st.Failovers)
	}
}

// TestFailover: when the nearest endpoint stops, an operation fails over to
// the next one, and the stopped endpoint is marked down.
func TestFailover(t *testing.T) {
	near := &fakeStore{id: 1, prelim: resA}
	far := &fakeStore{id: 2, final: resB, delay: 20 * time.Millisecond}
	nearAddr, nearSrv := serve(t, near)
	farAddr, _ := serve(t, far)
	c := dial(t, []string{farAddr, nearAddr}, client.WithInitialProbes(9)) // as in TestNearestEndpoint
	if c.Endpoints()[0].Address != nearAddr {
		t.Fatalf("Endpoints = %+v, want %s first", c.Endpoints(), nearAddr)
	}
	nearSrv.Stop()

	for i := range 3 {
		v, err := final(t, c.InvokeStrong(t.Context(), client.Get("k")))
		if err != nil {
			t.Fatalf("get %d: %v", i, err)
		}
		if string(v.Value.Value) != "beta" {
			t.Errorf("get %d: %q, want the far replica's", i, v.Value.Value)
		}
	}
	if st := c.Stats(); st.Failovers < 1 || st.Failed != 0 {
		t.Errorf("Stats = %+v, want a failover and no failure", st)
	}
	if eps := c.Endpoints(); eps[0].Address != farAddr || eps[1].Healthy || !errors.Is(eps[1].Err, client.ErrUnavailable) {
		t.Errorf("Endpoints = %+v, want %s down", eps, nearAddr)
	}
}

// TestFailoverSafety: an Unavailable from a replica that received the
// request fails a read over (reads are idempotent) but not an update, which
// the replica may have executed.
func TestFailoverSafety(t *testing.T) {
	near := &fakeStore{id: 1, fail: errUnavailable}
	// Far by 300 ms, so that the probes rank it second even when a loaded
	// machine delays the near one's answers (with 20 ms the test failed
	// once at load 30).
	far := &fakeStore{id: 2, prelim: resB, delay: 300 * time.Millisecond}
	nearAddr, _ := serve(t, near)
	farAddr, _ := serve(t, far)
	c := dial(t, []string{nearAddr, farAddr})

	if _, err := final(t, c.Get(t.Context(), "k", correctable.Eventual)); err != nil {
		t.Fatalf("get: %v", err)
	}
	if n := len(far.requests()); n != 1 {
		t.Fatalf("far got %d requests after the get, want 1", n)
	}

	// c marked the near one down; a fresh client ranks it first again,
	// so that the put goes there first.
	c2 := dial(t, []string{nearAddr, farAddr})
	_, err := final(t, c2.Put(t.Context(), "k", []byte("v"), correctable.Eventual))
	if !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("put: err = %v, want ErrUnavailable", err)
	}
	if n := len(far.requests()); n != 1 {
		t.Errorf("far got the put: a possibly executed update was retried")
	}
}

// TestDialErrors checks what Dial refuses.
func TestDialErrors(t *testing.T) {
	_, err := client.Dial(t.Context(), []string{deadAddr(t), deadAddr(t)}, client.WithDialTimeout(2*time.Second))
	if !errors.Is(err, client.ErrUnavailable) {
		t.Errorf("no endpoint up: err = %v, want ErrUnavailable", err)
	}
	for name, eps := range map[string][]string{
		"none":          nil,
		"twice":         {"127.0.0.1:1", "127.0.0.1:1"},
		"not loopback":  {"192.0.2.1:7000"},
		"not host:port": {"example"},
	} {
		if _, err := client.Dial(t.Context(), eps); !errors.Is(err, client.ErrInvalidArgument) {
			t.Errorf("%s: err = %v, want ErrInvalidArgument", name, err)
		}
	}
	if _, err := client.Dial(t.Context(), []string{"localhost:1"}, client.WithProbeWindow(-1)); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("negative window: err = %v, want ErrInvalidArgument", err)
	}
}

// TestProbeLoop: the Client re-probes on its own; an endpoint that stops
// answering is marked down, and up again once it answers.
func TestProbeLoop(t *testing.T) {
	f := &fakeStore{prelim: resA}
	addr, _ := serve(t, f)
	var logs syncBuffer
	c := dial(t, []string{addr}, client.WithProbeInterval(5*time.Millisecond),
		client.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	healthy := func(want bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for c.Endpoints()[0].Healthy != want {
			if time.Now().After(deadline) {
				t.Fatalf("endpoint healthy=%v, want %v", !want, want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	f.statusFail.Store(true)
	healthy(false)
	f.statusFail.Store(false)
	healthy(true)
	if s := logs.String(); !strings.Contains(s, "endpoint down") || !strings.Contains(s, "endpoint up") {
		t.Errorf("log = %q", s)
	}
}

// TestClose: Close stops the prober (TestMain checks no goroutine is
// left), fails invocations in flight and later ones with ErrClosed, and is
// idempotent.
func TestClose(t *testing.T) {
	f := &fakeStore{prelim: resA, gate: make(chan struct{})} // never opened
	addr, _ := serve(t, f)
	c, err := client.Dial(t.Context(), []string{addr}, client.WithProbeInterval(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	inflight := c.Get(t.Context(), "k")
	for len(f.requests()) == 0 { // wait until it reached the server
		runtime.Gosched()
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := final(t, inflight); !errors.Is(err, client.ErrClosed) {
		t.Errorf("in flight: err = %v, want ErrClosed", err)
	}
	if _, err := final(t, c.Get(t.Context(), "k")); !errors.Is(err, client.ErrClosed) {
		t.Errorf("after Close: err = %v, want ErrClosed", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	// A probe sent just before Close may reach the server's handler after
	// it (the handler runs when the server schedules it): let those land,
	// then count. A prober still running (every millisecond) would add
	// about a hundred in the window.
	time.Sleep(100 * time.Millisecond)
	n := f.statusCount()
	time.Sleep(100 * time.Millisecond)
	if m := f.statusCount(); m != n {
		t.Errorf("%d probes more than 100 ms after Close", m-n)
	}
}

// syncBuffer is a strings.Builder safe for the logger's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
