package cache_test

import (
	"context"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/correctables/correctables/bindings/cache"
	"github.com/correctables/correctables/bindings/kvtest"
	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/correctable"
	"github.com/correctables/correctables/internal/cluster"
)

// ourStore starts an in-process cluster of our store and returns a client.
func ourStore(t testing.TB, replicas int) (*cluster.Cluster, *client.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := cluster.Start(cluster.Options{Dir: t.TempDir(), Replicas: replicas, NoSync: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.WaitLeader(ctx); err != nil {
		cl.Stop()
		t.Fatal(err)
	}
	c, err := client.Dial(ctx, cl.Endpoints)
	if err != nil {
		cl.Stop()
		t.Fatal(err)
	}
	return cl, c
}

// TestConformance runs the suite on a cache in front of our store; the
// cache view is skipped on a miss, so the suite allows skipped levels.
func TestConformance(t *testing.T) {
	cl, c := ourStore(t, 3)
	defer cl.Stop()
	defer c.Close()
	b, err := cache.New(c, 64)
	if err != nil {
		t.Fatal(err)
	}
	lone, downClient := ourStore(t, 1)
	defer downClient.Close()
	lone.Stop()
	down, _ := cache.New(downClient, 0)
	kvtest.Run(t, b, kvtest.Options{
		MaySkip: true,
		// A pipe (one stream per replica, opened by the first single-view
		// operation sent there) lives until the client's Close, as its
		// connection does.
		LongLived: kvtest.PipeGoroutines,
		Down:      down,
		IgnoreGoroutines: []goleak.Option{
			goleak.IgnoreAnyFunction("google.golang.org/grpc.(*addrConn).connect"),
		},
	})
}

// counting counts the invocations that reach the wrapped binding.
type counting struct {
	correctable.Binding[client.Op, client.Result]
	n atomic.Int64
}

func (c *counting) Submit(ctx context.Context, op client.Op, levels []correctable.Level, emit correctable.Emitter[client.Result]) error {
	c.n.Add(1)
	return c.Binding.Submit(ctx, op, levels, emit)
}

func levelsOf(t *testing.T, c *correctable.Correctable[client.Result]) ([]correctable.Level, []string) {
	t.Helper()
	var ls []correctable.Level
	var vs []string
	done := make(chan struct{})
	c.SetCallbacks(correctable.Callbacks[client.Result]{
		OnUpdate: func(v correctable.View[client.Result]) {
			ls = append(ls, v.Level)
			vs = append(vs, string(v.Value.Value))
		},
		OnFinal: func(v correctable.View[client.Result]) {
			ls = append(ls, v.Level)
			vs = append(vs, string(v.Value.Value))
			close(done)
		},
		OnError: func(err error) { t.Error(err); close(done) },
	})
	<-done
	return ls, vs
}

func TestWriteThroughAndBound(t *testing.T) {
	cl, c := ourStore(t, 3)
	defer cl.Stop()
	defer c.Close()
	inner := &counting{Binding: c}
	b, err := cache.New(inner, 2)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	final := func(op client.Op, levels ...correctable.Level) client.Result {
		t.Helper()
		v, err := correctable.Invoke(ctx, b, op, levels...).Final(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return v.Value
	}
	// A miss: no cache view, the store's views.
	ls, _ := levelsOf(t, correctable.Invoke(ctx, b, client.Get("a")))
	if !slices.Equal(ls, []correctable.Level{correctable.Eventual, correctable.Strong}) {
		t.Fatalf("get on a miss: levels %v", ls)
	}
	// A put writes through: the cache then answers with the new value.
	final(client.Put("a", []byte("1")))
	ls, vs := levelsOf(t, correctable.Invoke(ctx, b, client.Get("a")))
	if !slices.Equal(ls, []correctable.Level{cache.Level, correctable.Eventual, correctable.Strong}) || vs[0] != "1" {
		t.Fatalf("get after put: levels %v values %v; want the cache first, with 1", ls, vs)
	}
	// Direct cache access does not reach the store.
	before := inner.n.Load()
	if r := final(client.Get("a"), cache.Level); string(r.Value) != "1" || inner.n.Load() != before {
		t.Fatalf("invokeWeak: %q with %d calls to the store; want 1 from the cache alone", r.Value, inner.n.Load()-before)
	}
	// Another write path (incr) drops the key: the next get misses.
	final(client.Put("n", []byte("1")))
	final(client.Incr("n", 1))
	if ls, _ := levelsOf(t, correctable.Invoke(ctx, b, client.Get("n"))); ls[0] == cache.Level {
		t.Fatalf("get after incr: a cache view, from before the increment")
	}
	// Bounded: at most 2 keys.
	final(client.Put("b", []byte("2")))
	final(client.Put("c", []byte("3")))
	if b.Len() != 2 {
		t.Fatalf("cache holds %d keys; its bound is 2", b.Len())
	}
	if _, err := cache.New(c, -1); err == nil {
		t.Fatal("negative size: no error")
	}
}

// BenchmarkViews measures each view's latency with the cache in front of
// our store (loopback): go test -run '^$' -bench Views ./bindings/cache
func BenchmarkViews(b *testing.B) {
	cl, c := ourStore(b, 3)
	defer cl.Stop()
	defer c.Close()
	cb, err := cache.New(c, 0)
	if err != nil {
		b.Fatal(err)
	}
	kvtest.BenchmarkViews(b, cb)
}
