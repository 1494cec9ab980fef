package client_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/correctable"
)

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// queueBehindHeldCall starts one weak get that the fake holds at its gate,
// waits until the fake has it, then starts n more weak gets on keys k0..kn-1
// (which queue behind the held one) with contexts from ctxs, and returns
// their Correctables.
func queueBehindHeldCall(t *testing.T, f *fakeStore, c *client.Client, n int, ctxs func(i int) context.Context) (*correctable.Correctable[client.Result], []*correctable.Correctable[client.Result]) {
	t.Helper()
	held := c.InvokeWeak(t.Context(), client.Get("held"))
	waitFor(t, "the held call to reach the fake", func() bool { return len(f.requests()) == 1 })
	queued := make([]*correctable.Correctable[client.Result], n)
	for i := range n {
		queued[i] = c.InvokeWeak(ctxs(i), client.Get(fmt.Sprint("k", i)))
	}
	waitFor(t, "the gets to queue", func() bool { return client.QueuedCalls(c) == n })
	return held, queued
}

// TestBatchGoesWhenTheCallInFlightReturns: with one call of a kind in
// flight allowed, the operations that arrive meanwhile wait, and go as
// one CallBatch when it returns; each gets its own view; an operation whose
// caller gives up while it waits is never sent.
func TestBatchGoesWhenTheCallInFlightReturns(t *testing.T) {
	f := &fakeStore{prelim: resA, gate: make(chan struct{}), batch: true}
	addr, _ := serve(t, f)
	c := dial(t, []string{addr}, client.WithCallBatching(1))
	gone, giveUp := context.WithCancel(t.Context())
	held, queued := queueBehindHeldCall(t, f, c, 5, func(i int) context.Context {
		if i == 2 {
			return gone
		}
		return t.Context()
	})
	giveUp()
	if _, err := final(t, queued[2]); !errors.Is(err, context.Canceled) {
		t.Fatalf("the abandoned queued get: %v, want context.Canceled", err)
	}
	close(f.gate)
	for i, cr := range append([]*correctable.Correctable[client.Result]{held}, queued...) {
		if i == 3 {
			continue // queued[2]
		}
		v, err := final(t, cr)
		if err != nil || string(v.Value.Value) != "alpha" || v.Level != correctable.Eventual {
			t.Fatalf("get %d: %+v %v", i, v, err)
		}
	}
	if got := f.batchSizes(); !slices.Equal(got, []int{4}) {
		t.Errorf("batches %v, want one of the 4 queued gets that were not abandoned", got)
	}
	var keys []string
	for _, r := range f.requests() {
		keys = append(keys, r.GetOp().GetKey())
	}
	slices.Sort(keys) // the invocations reach the client in any order
	if want := []string{"held", "k0", "k1", "k3", "k4"}; !slices.Equal(keys, want) {
		t.Errorf("the fake ran %v, want %v (the abandoned k2 never sent)", keys, want)
	}
	if st := c.Stats(); st.Ops != 6 || st.Views != 5 || st.BytesSent == 0 || st.BytesReceived == 0 {
		t.Errorf("stats %+v", st)
	}
	// Nothing in flight: the next operation goes alone, as a Call.
	if _, err := final(t, c.InvokeWeak(t.Context(), client.Get("alone"))); err != nil {
		t.Fatal(err)
	}
	if got := f.batchSizes(); len(got) != 1 {
		t.Errorf("batches %v after a lone get, want still one", got)
	}
}

// TestBatchErrorsAreEachCalls: a call the replica refuses in a batch fails
// alone, with the error a Call would have given; the others succeed.
func TestBatchErrorsAreEachCalls(t *testing.T) {
	f := &fakeStore{prelim: resA, gate: make(chan struct{}), batch: true, failKey: "k1"}
	addr, _ := serve(t, f)
	c := dial(t, []string{addr}, client.WithCallBatching(1))
	held, queued := queueBehindHeldCall(t, f, c, 3, func(int) context.Context { return t.Context() })
	close(f.gate)
	if _, err := final(t, held); err != nil {
		t.Fatal(err)
	}
	for i, cr := range queued {
		v, err := final(t, cr)
		if i == 1 {
			if !errors.Is(err, client.ErrInvalidArgument) {
				t.Errorf("the refused get: %+v %v, want ErrInvalidArgument", v, err)
			}
			continue
		}
		if err != nil || string(v.Value.Value) != "alpha" {
			t.Errorf("get %d: %+v %v", i, v, err)
		}
	}
	if got := f.batchSizes(); !slices.Equal(got, []int{3}) {
		t.Errorf("batches %v, want one of 3", got)
	}
	// The same refusal without batching: the same error.
	_, alone := final(t, c.InvokeWeak(t.Context(), client.Get("k1")))
	_, batched := final(t, queued[1])
	if alone == nil || batched == nil || alone.Error() != batched.Error() {
		t.Errorf("refusal as a Call %q, in a batch %q; want the same", alone, batched)
	}
}

// TestBatchFallsBackToCalls: an endpoint that answers CallBatch with
// Unimplemented (a replica older than CallBatch) gets the queued
// operations as Calls, and no batch again.
func TestBatchFallsBackToCalls(t *testing.T) {
	f := &fakeStore{prelim: resA, gate: make(chan struct{})}
	addr, _ := serve(t, f)
	c := dial(t, []string{addr}, client.WithCallBatching(1))
	held, queued := queueBehindHeldCall(t, f, c, 4, func(int) context.Context { return t.Context() })
	close(f.gate)
	for i, cr := range append(queued, held) {
		if v, err := final(t, cr); err != nil || string(v.Value.Value) != "alpha" {
			t.Fatalf("get %d: %+v %v", i, v, err)
		}
	}
	if n := f.callCount(); n != 5 {
		t.Errorf("%d Calls, want 5 (the held one and the 4 queued after the batch was refused)", n)
	}
	if st := c.Stats(); st.Failed != 0 || st.Failovers != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestCallBatchingOff: WithCallBatching(0) sends every operation as its
// own call, however many are in flight; a negative value is refused.
func TestCallBatchingOff(t *testing.T) {
	f := &fakeStore{prelim: resA, gate: make(chan struct{}), batch: true}
	addr, _ := serve(t, f)
	c := dial(t, []string{addr}, client.WithCallBatching(0))
	var crs []*correctable.Correctable[client.Result]
	for i := range 8 {
		crs = append(crs, c.InvokeWeak(t.Context(), client.Get(fmt.Sprint("k", i))))
	}
	waitFor(t, "8 calls at the fake", func() bool { return len(f.requests()) == 8 })
	close(f.gate)
	for _, cr := range crs {
		if _, err := final(t, cr); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.batchSizes(); len(got) != 0 || f.callCount() != 8 {
		t.Errorf("batches %v and %d Calls with batching off, want none and 8", got, f.callCount())
	}
	if _, err := client.Dial(t.Context(), []string{addr}, client.WithCallBatching(-1)); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("WithCallBatching(-1): %v, want ErrInvalidArgument", err)
	}
}

// TestDefaultBatchingSendsOneAtATimeUnderLoad: with the default batching,
// operations go as their own calls, up to DefaultBatchInflight at once;
// once more than twice that are outstanding, a call that returns frees its
// slot instead of carrying the queue, and the queue goes as one batch when
// the last call in flight returns.
func TestDefaultBatchingSendsOneAtATimeUnderLoad(t *testing.T) {
	f := &fakeStore{prelim: resA, gate: make(chan struct{}), batch: true}
	addr, _ := serve(t, f)
	c := dial(t, []string{addr}) // default batching
	var alone, queued []*correctable.Correctable[client.Result]
	for i := range client.DefaultBatchInflight {
		alone = append(alone, c.InvokeWeak(t.Context(), client.Get(fmt.Sprint("a", i))))
	}
	waitFor(t, "the calls alone to reach the fake", func() bool { return len(f.requests()) == client.DefaultBatchInflight })
	const n = 6 // outstanding: 4 + 6 > 8
	for i := range n {
		queued = append(queued, c.InvokeWeak(t.Context(), client.Get(fmt.Sprint("q", i))))
	}
	waitFor(t, "the gets to queue", func() bool { return client.QueuedCalls(c) == n })
	f.gate <- struct{}{} // one call alone returns
	waitFor(t, "a call alone to return", func() bool {
		for _, cr := range alone {
			if _, ok := cr.Latest(); ok {
				return true
			}
		}
		return false
	})
	if q, b := client.QueuedCalls(c), f.batchSizes(); q != n || len(b) != 0 {
		t.Fatalf("after one of %d calls returned with %d outstanding: %d queued and batches %v, want %d queued and none sent (the others in flight take them)",
			client.DefaultBatchInflight, client.DefaultBatchInflight+n, q, b, n)
	}
	close(f.gate)
	for i, cr := range append(alone, queued...) {
		if v, err := final(t, cr); err != nil || string(v.Value.Value) != "alpha" {
			t.Fatalf("get %d: %+v %v", i, v, err)
		}
	}
	if got := f.batchSizes(); !slices.Equal(got, []int{n}) {
		t.Errorf("batches %v, want one of the %d queued gets", got, n)
	}
}

// TestReadsDoNotQueueBehindUpdates: reads and updates queue apart, so a
// weak get goes at once while the weak puts in flight are held (as a busy
// replica parks updates) and more wait behind them.
func TestReadsDoNotQueueBehindUpdates(t *testing.T) {
	f := &fakeStore{prelim: resA, updateGate: make(chan struct{}), batch: true}
	addr, _ := serve(t, f)
	c := dial(t, []string{addr}, client.WithCallBatching(1))
	var puts []*correctable.Correctable[client.Result]
	for i := range 3 {
		puts = append(puts, c.InvokeWeak(t.Context(), client.Put(fmt.Sprint("p", i), []byte("x"))))
	}
	waitFor(t, "the puts to be held or queued", func() bool { return len(f.requests()) == 1 && client.QueuedCalls(c) == 2 })
	v, err := final(t, c.InvokeWeak(t.Context(), client.Get("k")))
	if err != nil || string(v.Value.Value) != "alpha" {
		t.Fatalf("weak get while puts are held: %+v %v", v, err)
	}
	close(f.updateGate)
	for i, cr := range puts {
		if _, err := final(t, cr); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	if got := f.batchSizes(); !slices.Equal(got, []int{2}) {
		t.Errorf("batches %v, want one of the 2 queued puts", got)
	}
}

// TestBatchCarriesTheLatestDeadline: a batch whose callers all have a
// deadline carries the latest of them to the replica; one with a caller
// without a deadline carries none.
func TestBatchCarriesTheLatestDeadline(t *testing.T) {
	for _, withNone := range []bool{false, true} {
		f := &fakeStore{prelim: resA, gate: make(chan struct{}), batch: true}
		deadlines := make(chan time.Time, 4)
		f.onBatch = func(ctx context.Context) {
			d, _ := ctx.Deadline()
			deadlines <- d
		}
		addr, _ := serve(t, f)
		c := dial(t, []string{addr}, client.WithCallBatching(1))
		base := time.Now()
		ctxs := []context.Context{}
		for i := range 3 {
			ctx, cancel := context.WithDeadline(t.Context(), base.Add(time.Duration(20+i*10)*time.Second))
			defer cancel()
			ctxs = append(ctxs, ctx)
		}
		if withNone {
			ctxs[1] = t.Context()
		}
		held, queued := queueBehindHeldCall(t, f, c, 3, func(i int) context.Context { return ctxs[i] })
		close(f.gate)
		for _, cr := range append(queued, held) {
			if _, err := final(t, cr); err != nil {
				t.Fatal(err)
			}
		}
		d := <-deadlines
		switch {
		case withNone && !d.IsZero():
			t.Errorf("a batch with a caller without a deadline carried %v", d)
		case !withNone && (d.Before(base.Add(39*time.Second)) || d.After(base.Add(41*time.Second))):
			t.Errorf("the batch's deadline is %v from the start, want the latest caller's, 40s", d.Sub(base))
		}
	}
}
