package kvtest

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"

	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/correctable"
)

// ClosedAddr returns a loopback address nothing listens on, for a binding
// to a server that does not run (Options.Down).
func ClosedAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// QueueExactlyOnce enqueues items items to the queue "tickets" through
// bs[0], then dequeues with workers concurrent dequeuers until the queue is
// empty, worker w through bs[w%len(bs)] (several bindings: several
// sessions), and checks that every item was taken exactly once.
func QueueExactlyOnce(t *testing.T, items, workers int, bs ...Binding) {
	t.Helper()
	ctx := context.Background()
	for i := range items {
		if _, err := correctable.InvokeStrong(ctx, bs[0], client.Enqueue("tickets", []byte(fmt.Sprint(i)))).Final(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu  sync.Mutex
		got = map[string]int{}
		wg  sync.WaitGroup
	)
	for w := range workers {
		b := bs[w%len(bs)]
		wg.Go(func() {
			for {
				v, err := correctable.Invoke(ctx, b, client.Dequeue("tickets")).Final(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if !v.Value.OK {
					return
				}
				mu.Lock()
				got[string(v.Value.Value)]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for i := range items {
		if n := got[fmt.Sprint(i)]; n != 1 {
			t.Errorf("item %d dequeued %d times", i, n)
		}
	}
	if len(got) != items {
		t.Errorf("%d distinct items dequeued; want %d", len(got), items)
	}
}
