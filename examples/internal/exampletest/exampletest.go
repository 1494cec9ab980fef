// Package exampletest runs the example applications' tests on a real
// in-process cluster (three replicas on loopback, Pebble without fsync).
package exampletest

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/correctable"
	"github.com/correctables/correctables/examples/store"
	"github.com/correctables/correctables/internal/cluster"
)

// Cluster starts a three-replica cluster, stopped when the test ends.
func Cluster(t testing.TB) *cluster.Cluster {
	t.Helper()
	c, err := cluster.Start(cluster.Options{Dir: t.TempDir(), NoSync: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}

// Dial returns a client of endpoints, closed when the test ends.
func Dial(t testing.TB, endpoints []string, opts ...client.Option) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, endpoints, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// Binding returns the store binding of a client of endpoints.
func Binding(t testing.TB, endpoints []string) store.Binding {
	return store.Client(Dial(t, endpoints))
}

// Stale wraps b: the preliminary view of every operation match selects is
// replaced by stale(value), so that speculation on it is wrong and the
// final view corrects it. A test double for the divergence a loaded WAN
// cluster shows now and then; the final views are b's.
func Stale(b store.Binding, match func(store.Op) bool, stale func(store.Result) store.Result) store.Binding {
	return staleBinding{b, match, stale}
}

type staleBinding struct {
	b     store.Binding
	match func(store.Op) bool
	stale func(store.Result) store.Result
}

func (s staleBinding) Levels() []correctable.Level { return s.b.Levels() }

func (s staleBinding) Submit(ctx context.Context, op store.Op, levels []correctable.Level, emit correctable.Emitter[store.Result]) error {
	if !s.match(op) {
		return s.b.Submit(ctx, op, levels, emit)
	}
	var prelim store.Result
	return s.b.Submit(ctx, op, levels, func(v correctable.View[store.Result]) error {
		if v.Level != levels[len(levels)-1] {
			prelim = v.Value
			v.Value = s.stale(v.Value)
		} else if v.Confirmed {
			// Confirmed the real preliminary value, not the stale one.
			v.Value, v.Confirmed = prelim, false
		}
		return emit(v)
	})
}

// Settle waits until every replica's weak read of every key returns the
// key's final value (read through b). A strong update returns once a
// majority has committed it; the third replica applies it a moment later,
// and until then a preliminary view there is stale and a speculation on it
// is re-run: correct, and counted, which a test that expects no re-run on
// a settled cluster must wait out.
func Settle(ctx context.Context, t testing.TB, endpoints []string, b store.Binding, keys []string) {
	t.Helper()
	for _, ep := range endpoints {
		at := Binding(t, []string{ep})
		weak := at.Levels()[0]
		for _, key := range keys {
			want, err := store.Final(ctx, b, store.Get(key))
			if err != nil {
				t.Fatal(err)
			}
			for {
				v, err := store.Read(ctx, at, key, weak).Final(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if string(v.Value.Value) == string(want.Value) {
					break
				}
				select {
				case <-ctx.Done():
					t.Fatalf("replica %s: %s still %q, want %q", ep, key, v.Value.Value, want.Value)
				case <-time.After(10 * time.Millisecond):
				}
			}
		}
	}
}
