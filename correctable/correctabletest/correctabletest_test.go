package correctabletest_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/correctables/correctables/correctable"
	"github.com/correctables/correctables/correctable/correctabletest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const guard = 30 * time.Second

// stepwise is a cluster whose primary replies only when the test says so,
// so that a test observes the preliminary view before the final one exists
// (a Views iterator that starts after both arrived sees only the final one).
type stepwise struct {
	*correctabletest.Cluster
	release chan struct{}
}

func newStepwise(t *testing.T) *stepwise {
	s := &stepwise{release: make(chan struct{})}
	c, err := correctabletest.NewCluster(correctabletest.Config{Wait: func(ctx context.Context, r correctabletest.Replica) error {
		if r != correctabletest.PrimaryReplica {
			return nil
		}
		select {
		case <-s.release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	s.Cluster = c
	return s
}

// views returns the preliminary view (once it arrived) and the final view
// of c, whose primary reply s holds back until the preliminary was seen.
func views[T any](t *testing.T, s *stepwise, c *correctable.Correctable[T]) []correctable.View[T] {
	t.Helper()
	select {
	case <-waitLevel(c, correctable.Eventual):
	case <-time.After(guard):
		t.Fatal("no preliminary view")
	}
	first, _ := c.Latest()
	s.release <- struct{}{}
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	final, err := c.Final(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if first.Final {
		return []correctable.View[T]{first}
	}
	return []correctable.View[T]{first, final}
}

func TestConfigValidation(t *testing.T) {
	if _, err := correctabletest.NewCluster(correctabletest.Config{BackupLatency: -time.Second}); !errors.Is(err, correctabletest.ErrInvalidConfig) {
		t.Fatalf("negative latency: %v", err)
	}
	c, _ := correctabletest.NewCluster(correctabletest.Config{})
	for _, tc := range []struct {
		r correctabletest.Replica
		n int
	}{{correctabletest.PrimaryReplica, 1}, {correctabletest.BackupReplica, -1}, {correctabletest.BackupReplica, correctabletest.MaxLag + 1}} {
		if err := c.SetLag(tc.r, tc.n); !errors.Is(err, correctabletest.ErrInvalidConfig) {
			t.Errorf("SetLag(%s, %d) = %v", tc.r, tc.n, err)
		}
	}
}

func TestSequentialViewsAndConfirmation(t *testing.T) {
	cluster := newStepwise(t)
	cluster.Put("k", "v1")
	b := correctabletest.Sequential[string](cluster.Cluster)
	ctx := context.Background()

	got := views(t, cluster, correctable.Invoke(ctx, b, correctabletest.Get("k")))
	if len(got) != 2 || got[0].Value != "v1" || got[0].Level != correctable.Eventual ||
		got[1].Value != "v1" || !got[1].Final || !got[1].Confirmed {
		t.Fatalf("in sync: %+v; want v1 then a confirmation", got)
	}

	_ = cluster.SetLag(correctabletest.BackupReplica, 1)
	cluster.Put("k", "v2")
	got = views(t, cluster, correctable.Invoke(ctx, b, correctabletest.Get("k")))
	if len(got) != 2 || got[0].Value != "v1" || got[1].Value != "v2" || got[1].Confirmed {
		t.Fatalf("stale backup: %+v; want v1 then v2", got)
	}
	if got[0].Stamp.(uint64) >= got[1].Stamp.(uint64) {
		t.Errorf("stamps %v, %v: the backup should be behind", got[0].Stamp, got[1].Stamp)
	}
}

func TestWritesApplyAtPrimaryOnly(t *testing.T) {
	cluster := newStepwise(t)
	incr := func(kv correctabletest.KV) int {
		s, _ := kv.Get("n")
		n := len(s)
		kv.Put("n", s+"x")
		return n + 1
	}
	b := correctabletest.Sequential[int](cluster.Cluster)
	got := views(t, cluster, correctable.Invoke(context.Background(), b, incr))
	if len(got) != 2 || got[0].Value != 1 || got[1].Value != 1 {
		t.Fatalf("views %+v", got)
	}
	close(cluster.release) // the primary answers at once from here on
	v, _ := correctable.InvokeStrong(context.Background(), correctabletest.Sequential[string](cluster.Cluster), correctabletest.Get("n")).Final(context.Background())
	if v.Value != "x" {
		t.Fatalf("after one increment the primary holds %q, want x (applied once)", v.Value)
	}
}

// gate orders replies by construction: a replica replies when the test
// sends its name.
type gate struct {
	open map[correctabletest.Replica]chan struct{}
}

func newGate() *gate {
	return &gate{open: map[correctabletest.Replica]chan struct{}{
		correctabletest.CacheReplica: make(chan struct{}), correctabletest.BackupReplica: make(chan struct{}), correctabletest.PrimaryReplica: make(chan struct{}),
	}}
}

func (g *gate) wait(ctx context.Context, r correctabletest.Replica) error {
	select {
	case <-g.open[r]:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func TestParallelOrder(t *testing.T) {
	for _, tc := range []struct {
		name  string
		order []correctabletest.Replica
		want  []correctable.Level
	}{
		{"backup first", []correctabletest.Replica{correctabletest.BackupReplica, correctabletest.PrimaryReplica}, []correctable.Level{correctable.Eventual, correctable.Strong}},
		{"primary first", []correctabletest.Replica{correctabletest.PrimaryReplica}, []correctable.Level{correctable.Strong}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGate()
			cluster, _ := correctabletest.NewCluster(correctabletest.Config{Wait: g.wait})
			cluster.Put("k", "v")
			c := correctable.Invoke(context.Background(), correctabletest.Parallel[string](cluster), correctabletest.Get("k"))
			var got []correctable.Level
			for _, r := range tc.order {
				before, _ := c.Latest()
				close(g.open[r])
				select {
				case <-c.Done():
				case <-waitLevel(c, r.Level()):
				case <-time.After(guard):
					t.Fatal("no view")
				}
				if v, _ := c.Latest(); v != before {
					got = append(got, v.Level)
				}
			}
			final, _ := c.Latest()
			if !final.Final || !slices.Equal(got, tc.want) {
				t.Fatalf("levels %v, final %+v; want %v", got, final, tc.want)
			}
		})
	}
}

// waitLevel returns a channel closed once c has a view at level l.
func waitLevel[T any](c *correctable.Correctable[T], l correctable.Level) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		for v := range c.Views() {
			if v.Level.AtLeast(l) {
				return
			}
		}
	}()
	return ch
}

func TestParallelSkipsLateWeakReply(t *testing.T) {
	g := newGate()
	cluster, _ := correctabletest.NewCluster(correctabletest.Config{WithCache: true, Wait: g.wait})
	cluster.Put("k", "v")
	c := correctable.Invoke(context.Background(), correctabletest.Parallel[string](cluster), correctabletest.Get("k"))
	var seen []correctable.Level
	done := make(chan struct{})
	c.SetCallbacks(correctable.Callbacks[string]{
		OnUpdate: func(v correctable.View[string]) { seen = append(seen, v.Level) },
		OnFinal:  func(v correctable.View[string]) { seen = append(seen, v.Level); close(done) },
	})
	close(g.open[correctabletest.BackupReplica]) // backup before cache: the cache reply is useless
	<-waitLevel(c, correctable.Eventual)
	close(g.open[correctabletest.CacheReplica])
	close(g.open[correctabletest.PrimaryReplica])
	select {
	case <-done:
	case <-time.After(guard):
		t.Fatal("no final view")
	}
	if !slices.Equal(seen, []correctable.Level{correctable.Eventual, correctable.Strong}) {
		t.Fatalf("levels %v; want eventual, strong (late cache reply skipped)", seen)
	}
}

func TestLatencyAndCancel(t *testing.T) {
	cluster, _ := correctabletest.NewCluster(correctabletest.Config{PrimaryLatency: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	c := correctable.Invoke(ctx, correctabletest.Parallel[string](cluster), correctabletest.Get("k"))
	<-waitLevel(c, correctable.Eventual)
	cancel()
	if _, err := c.Final(context.Background()); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}
