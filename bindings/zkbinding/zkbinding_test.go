package zkbinding

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/correctables/correctables/bindings/kvtest"
	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/correctable"
	"github.com/correctables/correctables/internal/extstore"
)

// One three-server ensemble for the package's tests.
var (
	ensemble *extstore.ZooKeeper
	startErr error
)

func TestMain(m *testing.M) {
	extstore.Main(m, "zkbinding", 90*time.Second, func(ctx context.Context, dir string) (*extstore.ZooKeeper, error) {
		return extstore.StartZooKeeper(ctx, dir, 3)
	}, &ensemble, &startErr)
}

func newBinding(t testing.TB, root string) *Binding {
	t.Helper()
	extstore.Require(t, "a three-server ZooKeeper ensemble (Debian's zookeeper package)", startErr)
	// A long session: a loaded machine must not expire it mid-test.
	b, err := New(Config{Servers: ensemble.Servers, Root: root, SessionTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func TestConformance(t *testing.T) {
	b := newBinding(t, "/conformance")
	down, err := New(Config{Servers: []string{kvtest.ClosedAddr(t)}, RequestTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	kvtest.Run(t, b, kvtest.Options{Down: down, Unsupported: []client.Kind{client.KindScan, client.KindNoop}})
}

func TestConfig(t *testing.T) {
	for _, cfg := range []Config{{}, {Servers: []string{"127.0.0.1:1"}, Root: "rel"}, {Servers: []string{"127.0.0.1:1"}, RequestTimeout: -1}} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v): no error", cfg)
		}
	}
}

func TestEscape(t *testing.T) {
	for _, k := range []string{"", ".", "..", "a/b", "zookeeper", "ü", "%2E"} {
		e := escape(k)
		if err := zkValidName(e); err != nil {
			t.Errorf("escape(%q) = %q: %v", k, e, err)
		}
	}
	if escape(".") == escape("%2E") {
		t.Errorf("escape collides: %q", escape("."))
	}
}

// zkValidName checks what ZooKeeper refuses in a path component.
func zkValidName(s string) error {
	if s == "" || s == "." || s == ".." {
		return fmt.Errorf("name %q", s)
	}
	for _, r := range s {
		if r == '/' || r == 0 || r > 0x7e || r < 0x20 {
			return fmt.Errorf("character %q", r)
		}
	}
	return nil
}

// fill enqueues n items to queue in multis of up to 250 sequential
// creates (the binding's enqueue, batched).
func fill(t testing.TB, b *Binding, queue string, n int) {
	t.Helper()
	if err := b.setup(); err != nil {
		t.Fatal(err)
	}
	q := b.queue(queue)
	if err := b.ensure(q, []byte("0")); err != nil {
		t.Fatal(err)
	}
	retries := 0
	for done := 0; done < n; {
		batch := min(250, n-done)
		ops := make([]any, batch)
		for i := range ops {
			ops[i] = &zk.CreateRequest{Path: q + "/i-", Data: []byte(fmt.Sprintf("ticket-%06d", done+i)), Acl: acl, Flags: zk.FlagSequence}
		}
		if _, err := b.conn.Multi(ops...); err != nil {
			// On a loaded machine the ensemble may drop the connection
			// (the client reconnects): the batch may or may not have been
			// created. The tests that fill queues need at least n items,
			// not exactly n, so try the batch again.
			if errors.Is(err, zk.ErrConnectionClosed) && retries < 5 {
				retries++
				continue
			}
			t.Fatal(err)
		}
		done += batch
	}
}

// TestDequeueBytesConstant measures the bytes one dequeue (preliminary and
// final view) moves between client and ensemble as the queue grows from 10
// to 10,000 items, beside the children list the standard recipe reads
// (Correctables §6.2.2, Figure 10). The dequeue's cost must not grow.
func TestDequeueBytesConstant(t *testing.T) {
	b := newBinding(t, "/dequeue-bytes")
	ctx := context.Background()
	const dequeues = 5 // fewer than the smallest queue holds
	var first float64
	for _, n := range []int{10, 100, 1000, 10000} {
		queue := fmt.Sprintf("q%d", n)
		fill(t, b, queue, n)
		// The least bytes of several dequeues: the session's pings and a
		// retried request (a loaded machine) add bytes to some of them,
		// never take bytes away from the dequeue itself.
		per := math.Inf(1)
		for range dequeues {
			s0, r0 := b.Bytes()
			v, err := correctable.Invoke(ctx, b, client.Dequeue(queue)).Final(ctx)
			if err != nil || !v.Value.OK {
				t.Fatalf("dequeue from %d: %+v, %v", n, v.Value, err)
			}
			s1, r1 := b.Bytes()
			per = min(per, float64(s1-s0+r1-r0))
		}
		_, _ = b.conn.Sync(b.queue(queue))
		s0, r0 := b.Bytes()
		if _, _, err := b.conn.Children(b.queue(queue)); err != nil {
			t.Fatal(err)
		}
		s1, r1 := b.Bytes()
		t.Logf("queue of %5d items: %4.0f bytes per dequeue (both views); the children list alone: %d bytes", n, per, s1-s0+r1-r0)
		if first == 0 {
			first = per
		} else if per > 1.5*first {
			t.Errorf("a dequeue from %d items moves %.0f bytes, from 10 items %.0f: it grows with the queue", n, per, first)
		}
	}
}

// TestQueueExactlyOnce: concurrent dequeuers take every item exactly once,
// through gaps in the sequence numbers as well, from two sessions.
func TestQueueExactlyOnce(t *testing.T) {
	kvtest.QueueExactlyOnce(t, 60, 4, newBinding(t, "/exactly-once"), newBinding(t, "/exactly-once"))
}

// BenchmarkViews measures each view's latency on the three servers
// (loopback): go test -run '^$' -bench Views ./bindings/zkbinding
func BenchmarkViews(b *testing.B) {
	kvtest.BenchmarkViews(b, newBinding(b, "/bench"))
}
