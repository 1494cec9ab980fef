package client_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/internal/cluster"
)

// The pipe (client.WithPipe, api Store.Pipe): single-view operations share
// one stream per endpoint.

// TestPipeCarriesSingleViewOps: against a replica that implements Pipe,
// single-view operations go on the pipe, not as calls; against one that
// does not, they go as calls, and the endpoint is marked so.
func TestPipeCarriesSingleViewOps(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	piped := &fakeStore{id: 1, pipe: true, prelim: &api.Result{Found: true, Value: []byte("p")}}
	addr, _ := serve(t, piped)
	c := dial(t, []string{addr})
	// An operation takes a call while the connection is not ready yet
	// (pipeUsable): one at a time until the pipe is open, then the 40.
	openPipe(ctx, t, c)
	base := piped.pipeOps.Load()
	const n = 40
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			v, err := c.InvokeWeak(ctx, client.Get(fmt.Sprint("k", i))).Final(ctx)
			if err == nil && string(v.Value.Value) != "p" {
				err = fmt.Errorf("get %d: %q, want the fake's p", i, v.Value.Value)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := piped.pipeOps.Load() - base; got != n {
		t.Fatalf("the replica received %d operations on pipes, want %d", got, n)
	}
	if open, unimpl := client.PipesOpen(c); open != 1 || unimpl != 0 {
		t.Fatalf("pipes open %d, endpoints without Pipe %d; want 1 and 0", open, unimpl)
	}
	if st := c.Stats(); st.BytesSent == 0 || st.BytesReceived == 0 {
		t.Fatalf("stats %+v: bytes of piped operations not counted", st)
	}

	old := &fakeStore{id: 2, prelim: &api.Result{Found: true, Value: []byte("o")}}
	oaddr, _ := serve(t, old)
	oc := dial(t, []string{oaddr})
	for i := range 3 {
		if _, err := oc.InvokeWeak(ctx, client.Get("k")).Final(ctx); err != nil {
			t.Fatalf("get %d from a replica without Pipe: %v", i, err)
		}
	}
	if old.callCount() != 3 {
		t.Fatalf("the replica without Pipe answered %d calls, want 3", old.callCount())
	}
	if open, unimpl := client.PipesOpen(oc); open != 0 || unimpl != 1 {
		t.Fatalf("pipes open %d, endpoints without Pipe %d; want 0 and 1", open, unimpl)
	}

	off := dial(t, []string{addr}, client.WithPipe(false))
	before := piped.pipeOps.Load()
	if _, err := off.InvokeWeak(ctx, client.Get("k")).Final(ctx); err != nil {
		t.Fatal(err)
	}
	if piped.pipeOps.Load() != before {
		t.Fatal("WithPipe(false): the operation went on a pipe")
	}
}

// TestPipeCallerGivesUp: an operation whose context is cancelled while the
// replica holds it returns the context's error at once, and the pipe goes on
// carrying the others; the late reply is dropped. Both when the operation
// opens the pipe (its caller's goroutine waits for it, pipeCall) and when it
// finds the pipe open (Start queues it, and no goroutine waits).
func TestPipeCallerGivesUp(t *testing.T) {
	for _, open := range []bool{false, true} {
		t.Run(fmt.Sprint("pipe open ", open), func(t *testing.T) { testPipeCallerGivesUp(t, open) })
	}
}

func testPipeCallerGivesUp(t *testing.T, open bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gate := make(chan struct{})
	f := &fakeStore{id: 1, pipe: true, updateGate: gate, prelim: &api.Result{Found: true, Value: []byte("p")}}
	addr, _ := serve(t, f)
	c := dial(t, []string{addr})
	if open {
		openPipe(ctx, t, c)
	}
	// Cancelled, not timed out: the replica, which knows no deadline for
	// it, holds it until the gate opens.
	short, stop := context.WithCancel(ctx)
	defer stop()
	time.AfterFunc(100*time.Millisecond, stop)
	start := time.Now()
	_, err := c.InvokeWeak(short, client.Put("k", []byte("v"))).Final(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("a held put whose caller gave up: %v, want Canceled", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the held put returned after %v", took)
	}
	// The pipe let go of it too (its binding returned).
	for deadline := time.Now().Add(5 * time.Second); client.PipePending(c) != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d operations still pending in the pipe 5 s after their caller gave up", client.PipePending(c))
		}
	}
	if _, err := c.InvokeWeak(ctx, client.Get("k")).Final(ctx); err != nil {
		t.Fatalf("a get on the pipe after a caller gave up: %v", err)
	}
	close(gate) // the held put's reply comes and is dropped
	if _, err := c.InvokeWeak(ctx, client.Put("k2", []byte("v"))).Final(ctx); err != nil {
		t.Fatalf("a put after the late reply: %v", err)
	}
	if open, _ := client.PipesOpen(c); open != 1 {
		t.Fatalf("%d pipes open, want the one", open)
	}
}

// openPipe sends gets through c, one at a time, until c has a pipe open (an
// operation takes a call while the connection is not ready, pipeUsable).
func openPipe(ctx context.Context, t *testing.T, c *client.Client) {
	t.Helper()
	for open, _ := client.PipesOpen(c); open == 0; open, _ = client.PipesOpen(c) {
		if _, err := c.InvokeWeak(ctx, client.Get("warm")).Final(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPipeBreakFailsWhatItHolds: when the replica goes away, the
// operations it held on the pipe fail (they may have run) instead of
// waiting forever, and the client's next operation opens a new pipe to a
// replica that is back.
func TestPipeBreakFailsWhatItHolds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gate := make(chan struct{})
	defer close(gate)
	f := &fakeStore{id: 1, pipe: true, updateGate: gate, prelim: &api.Result{Found: true, Value: []byte("p")}}
	addr, srv := serve(t, f)
	c := dial(t, []string{addr})
	done := make(chan error, 1)
	go func() {
		_, err := c.InvokeWeak(ctx, client.Put("k", []byte("v"))).Final(ctx)
		done <- err
	}()
	for f.pipeOps.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	srv.Stop()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a put held by a replica that stopped succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a put held by a replica that stopped had not returned after 10 s")
	}
}

// TestPipeE2E: operations of every single-view kind, many at once, through
// the pipes of a real cluster, as through calls: the same results.
func TestPipeE2E(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := startedCluster(ctx, t)
	for _, pipe := range []bool{true, false} {
		c, err := client.Dial(ctx, cl.Endpoints, client.WithPipe(pipe))
		if err != nil {
			t.Fatal(err)
		}
		const workers, rounds = 32, 10
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			wg.Go(func() {
				key := fmt.Sprintf("pipe%v/w%d", pipe, w)
				for r := range rounds {
					val := []byte(fmt.Sprint(r))
					if w%2 == 0 {
						if _, err := c.InvokeStrong(ctx, client.Put(key, val)).Final(ctx); err != nil {
							errs <- fmt.Errorf("strong put %s: %w", key, err)
							return
						}
						v, err := c.InvokeStrong(ctx, client.Get(key)).Final(ctx)
						if err != nil || string(v.Value.Value) != string(val) {
							errs <- fmt.Errorf("strong get %s after writing %s: %q, %v", key, val, v.Value.Value, err)
							return
						}
						continue
					}
					if _, err := c.InvokeWeak(ctx, client.Put(key, val)).Final(ctx); err != nil {
						errs <- fmt.Errorf("weak put %s: %w", key, err)
						return
					}
				}
				errs <- nil
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("pipe %v: %v", pipe, err)
			}
		}
		if open, unimpl := client.PipesOpen(c); pipe && (open == 0 || unimpl != 0) || !pipe && open != 0 {
			t.Fatalf("pipe %v: %d pipes open, %d endpoints without Pipe", pipe, open, unimpl)
		}
		// Every weak put reaches a final view: the last of each key is
		// committed with the others.
		for w := 1; w < workers; w += 2 {
			key := fmt.Sprintf("pipe%v/w%d", pipe, w)
			v, err := c.InvokeStrong(ctx, client.Get(key)).Final(ctx)
			if err != nil || string(v.Value.Value) != fmt.Sprint(rounds-1) {
				t.Fatalf("pipe %v: strong get %s: %q, %v; want %d", pipe, key, v.Value.Value, err, rounds-1)
			}
		}
		c.Close()
	}
}

// startedCluster starts a three-replica cluster (no fsync), waits for its
// leader, and stops it when the test ends.
func startedCluster(ctx context.Context, t *testing.T) *cluster.Cluster {
	t.Helper()
	return startedClusterWith(ctx, t, cluster.Options{})
}

// startedClusterWith is startedCluster with opts (its directory, NoSync
// and logger are set here).
func startedClusterWith(ctx context.Context, t *testing.T, opts cluster.Options) *cluster.Cluster {
	t.Helper()
	opts.Dir, opts.NoSync, opts.Logger = t.TempDir(), true, slog.New(slog.DiscardHandler)
	cl, err := cluster.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Stop() })
	if _, err := cl.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	return cl
}

// TestStartedOperationOnABrokenPipe: operations queued on an open pipe
// without a goroutine of their own (Client.Start) end as Submit's would when
// the replica goes away while it holds them: a no-op, which may run twice,
// goes on to the other replica and succeeds; a put, which may have run,
// fails and is not sent elsewhere.
func TestStartedOperationOnABrokenPipe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gate := make(chan struct{})
	defer close(gate)
	near := &fakeStore{id: 1, pipe: true, updateGate: gate, prelim: &api.Result{Found: true, Value: []byte("n")}}
	far := &fakeStore{id: 2, pipe: true, delay: 50 * time.Millisecond, prelim: &api.Result{Found: true, Value: []byte("f")}}
	nearAddr, nearSrv := serve(t, near)
	farAddr, _ := serve(t, far)
	c := dial(t, []string{nearAddr, farAddr}, client.WithProbeInterval(time.Hour))
	openPipe(ctx, t, c)
	if near.pipeOps.Load() == 0 {
		t.Fatal("the warm-up went to the far replica: the near one is not first")
	}
	before := c.Stats()
	noop := c.InvokeWeak(ctx, client.Noop())
	put := c.InvokeWeak(ctx, client.Put("k", []byte("v")))
	for near.pipeOps.Load() < 3 { // the warm-up's and the two held ones
		if ctx.Err() != nil {
			t.Fatal("the held operations never reached the near replica")
		}
		time.Sleep(time.Millisecond)
	}
	far.mu.Lock()
	farBefore := len(far.reqs)
	far.mu.Unlock()
	nearSrv.Stop()
	if _, err := noop.Final(ctx); err != nil {
		t.Fatalf("a no-op held by a replica that stopped: %v, want it run at the other", err)
	}
	if _, err := put.Final(ctx); err == nil {
		t.Fatal("a put held by a replica that stopped succeeded")
	}
	far.mu.Lock()
	var farKinds []api.Kind
	for _, r := range far.reqs[farBefore:] {
		farKinds = append(farKinds, r.GetOp().GetKind())
	}
	far.mu.Unlock()
	if len(farKinds) != 1 || farKinds[0] != api.Kind_KIND_NOOP {
		t.Fatalf("the far replica ran %v after the near one stopped, want the no-op only", farKinds)
	}
	if st := c.Stats(); st.Ops-before.Ops != 2 || st.Failovers-before.Failovers != 1 || st.Failed-before.Failed != 1 {
		t.Fatalf("stats %+v after %+v: want 2 operations, 1 failover, 1 failed", st, before)
	}
}
