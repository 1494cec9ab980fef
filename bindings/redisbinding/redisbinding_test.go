package redisbinding_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/correctables/correctables/bindings/kvtest"
	"github.com/correctables/correctables/bindings/redisbinding"
	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/correctable"
	"github.com/correctables/correctables/internal/extstore"
)

// One primary and two replicas for the package's tests.
var (
	servers  *extstore.Redis
	startErr error
)

func TestMain(m *testing.M) {
	extstore.Main(m, "redisbinding", 60*time.Second, func(ctx context.Context, dir string) (*extstore.Redis, error) {
		return extstore.StartRedis(ctx, dir, 2)
	}, &servers, &startErr)
}

func newBinding(t testing.TB, cfg redisbinding.Config) *redisbinding.Binding {
	t.Helper()
	extstore.Require(t, "a Redis primary and two replicas (Debian's redis-server)", startErr)
	if cfg.Primary == "" {
		cfg.Primary, cfg.Replicas = servers.Primary, servers.Replicas
	}
	b, err := redisbinding.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func TestConformance(t *testing.T) {
	b := newBinding(t, redisbinding.Config{Prefix: "conformance:"})
	down, err := redisbinding.New(redisbinding.Config{Primary: kvtest.ClosedAddr(t), Replicas: []string{kvtest.ClosedAddr(t)}, RequestTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	kvtest.Run(t, b, kvtest.Options{Down: down, Unsupported: []client.Kind{client.KindScan, client.KindNoop}})
}

func TestConfig(t *testing.T) {
	for _, cfg := range []redisbinding.Config{{}, {Primary: "127.0.0.1:1", WaitReplicas: 1}, {Primary: "127.0.0.1:1", WaitTimeout: -1}} {
		if _, err := redisbinding.New(cfg); !errors.Is(err, client.ErrInvalidArgument) {
			t.Errorf("New(%+v): %v", cfg, err)
		}
	}
}

// TestViewsFromReplicaAndPrimary detaches the replica that preliminary
// reads go to: a write then shows in the final view (the primary) and not
// in the preliminary one (the replica), and a write's final view needs the
// replicas WaitReplicas asks for.
func TestViewsFromReplicaAndPrimary(t *testing.T) {
	b := newBinding(t, redisbinding.Config{Prefix: "views:", WaitReplicas: 1})
	ctx := context.Background()
	if _, err := correctable.Invoke(ctx, b, client.Put("k", []byte("old"))).Final(ctx); err != nil {
		t.Fatal(err)
	}
	replica := redis.NewClient(&redis.Options{Addr: servers.Replicas[0]})
	defer replica.Close()
	if err := replica.ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	host, port, _ := strings.Cut(servers.Primary, ":")
	defer func() {
		if err := replica.ReplicaOf(ctx, host, port).Err(); err != nil {
			t.Fatal(err)
		}
		waitOnline(t, 2)
	}()
	if _, err := correctable.Invoke(ctx, b, client.Put("k", []byte("new"))).Final(ctx); err != nil {
		t.Fatalf("put with one of two replicas attached and WaitReplicas 1: %v", err)
	}
	c := correctable.Invoke(ctx, b, client.Get("k"))
	var views []string
	done := make(chan struct{})
	c.SetCallbacks(correctable.Callbacks[client.Result]{ // every view, in order
		OnUpdate: func(v correctable.View[client.Result]) {
			views = append(views, v.Level.String()+"="+string(v.Value.Value))
		},
		OnFinal: func(v correctable.View[client.Result]) {
			views = append(views, v.Level.String()+"="+string(v.Value.Value))
			close(done)
		},
		OnError: func(err error) { t.Error(err); close(done) },
	})
	<-done
	final, _ := c.Latest()
	if strings.Join(views, " ") != "eventual=old redis-primary=new" || string(final.Value.Value) != "new" {
		t.Fatalf("views %v; want the detached replica's old value, then the primary's new one", views)
	}
	strict := newBinding(t, redisbinding.Config{Prefix: "views:", WaitReplicas: 2, WaitTimeout: 200 * time.Millisecond})
	_, err := correctable.Invoke(ctx, strict, client.Put("k", []byte("newer"))).Final(ctx)
	if !errors.Is(err, client.ErrUnavailable) || !strings.Contains(err.Error(), "1 of the 2 replicas") {
		t.Fatalf("put waiting for 2 replicas with one detached: %v; want ErrUnavailable naming 1 of 2", err)
	}
}

func waitOnline(t *testing.T, n int) {
	t.Helper()
	p := redis.NewClient(&redis.Options{Addr: servers.Primary})
	defer p.Close()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		info, _ := p.Info(context.Background(), "replication").Result()
		if strings.Count(info, "state=online") == n {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("replicas not back online")
}

// TestQueueExactlyOnce: concurrent dequeuers take every item exactly once.
func TestQueueExactlyOnce(t *testing.T) {
	kvtest.QueueExactlyOnce(t, 40, 4, newBinding(t, redisbinding.Config{Prefix: "queue:"}))
}

// BenchmarkViews measures each view's latency on the primary and two
// replicas (loopback): go test -run '^$' -bench Views ./bindings/redisbinding
func BenchmarkViews(b *testing.B) {
	kvtest.BenchmarkViews(b, newBinding(b, redisbinding.Config{Prefix: "bench:"}))
}
