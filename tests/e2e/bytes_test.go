package e2e

import (
	"bytes"
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/correctables/correctables/client"
)

// traceLog keeps the OpTraces a Client reports.
type traceLog struct {
	mu     sync.Mutex
	traces []client.OpTrace
}

func (l *traceLog) add(tr client.OpTrace) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.traces = append(l.traces, tr)
}

// find returns the last trace that matches.
func (l *traceLog) find(match func(client.OpTrace) bool) (client.OpTrace, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, tr := range slices.Backward(l.traces) {
		if match(tr) {
			return tr, true
		}
	}
	return client.OpTrace{}, false
}

// wait is find, waiting up to 10 s: the client reports an operation's trace
// when its binding call returns, which may be just after the final view was
// delivered.
func (l *traceLog) wait(match func(client.OpTrace) bool) (client.OpTrace, bool) {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if tr, ok := l.find(match); ok || time.Now().After(deadline) {
			return tr, ok
		}
	}
}

// confirmSlack bounds what a confirmed operation receives beyond one copy of
// its result: the stamps and framing of two views. Far below a second copy.
const confirmSlack = 1 << 10

func TestConfirmationSavesBytes(t *testing.T) {
	c := newCluster(t, freePorts(t, 3), nil)
	c.startAll()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	traces := &traceLog{}
	cl, err := client.Dial(ctx, c.addrs(), client.WithOpTrace(traces.add))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	old := bytes.Repeat([]byte("o"), bigSize)
	if _, err := cl.InvokeStrong(ctx, client.Put("big", old)).Final(ctx); err != nil {
		t.Fatalf("first put: %v", err)
	}
	// Nothing else writes "big": the put's tentative result (the old value)
	// is its committed one, so the final view is a confirmation.
	s0 := cl.Stats()
	out, err := invoke(ctx, nil, 0, cl, putOp("big", bytes.Repeat([]byte("n"), bigSize)), strongBoth)
	if err != nil {
		t.Fatal(err)
	}
	s1 := cl.Stats()
	fin, ok := out.final()
	if !ok {
		t.Fatalf("second put: %v", out.err)
	}
	if len(out.views) != 2 || !fin.Confirmed || !bytes.Equal(fin.Value.Value, old) {
		t.Fatalf("second put: %d views, final confirmed=%v with %d bytes; want a preliminary view and a confirmation of the old %d-byte value",
			len(out.views), fin.Confirmed, len(fin.Value.Value), bigSize)
	}
	received := s1.BytesReceived - s0.BytesReceived
	t.Logf("confirmed put: received %d bytes for a %d-byte result (saved %d); views %d, confirmations %d",
		received, bigSize, s1.BytesSaved-s0.BytesSaved, s1.Views-s0.Views, s1.Confirmations-s0.Confirmations)
	if received < bigSize || received > bigSize+confirmSlack {
		t.Errorf("confirmed put received %d bytes; want one %d-byte result plus at most %d", received, bigSize, confirmSlack)
	}
	if s1.Confirmations-s0.Confirmations != 1 || s1.BytesSaved-s0.BytesSaved < bigSize {
		t.Errorf("stats: %d confirmations and %d bytes saved; want 1 and at least %d", s1.Confirmations-s0.Confirmations, s1.BytesSaved-s0.BytesSaved, bigSize)
	}
	tr, found := traces.wait(func(tr client.OpTrace) bool { return tr.Confirmed })
	if !found || tr.BytesReceived != int(received) {
		t.Errorf("op trace of the confirmed put: %+v (found %v); want %d bytes received", tr, found, received)
	}
}
