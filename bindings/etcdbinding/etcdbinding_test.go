package etcdbinding_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/correctables/correctables/bindings/etcdbinding"
	"github.com/correctables/correctables/bindings/kvtest"
	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/correctable"
	"github.com/correctables/correctables/internal/extstore"
)

// One three-member cluster for the package's tests.
var (
	cluster  *extstore.Etcd
	startErr error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "etcdbinding")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	cluster, startErr = extstore.StartEtcd(ctx, dir, 3)
	cancel()
	code := m.Run()
	if cluster != nil {
		cluster.Stop()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

func newBinding(t testing.TB, prefix string) *etcdbinding.Binding {
	t.Helper()
	extstore.Require(t, "a three-member etcd cluster (embed)", startErr)
	b, err := etcdbinding.New(etcdbinding.Config{Endpoints: cluster.Endpoints, Nearest: cluster.Endpoints[2], Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestConformance(t *testing.T) {
	b := newBinding(t, "conformance/")
	down, err := etcdbinding.New(etcdbinding.Config{Endpoints: []string{closedAddr(t)}, RequestTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	kvtest.Run(t, b, kvtest.Options{Down: down, ServersInProcess: true})
}

func TestConfig(t *testing.T) {
	if _, err := etcdbinding.New(etcdbinding.Config{}); err == nil {
		t.Fatal("no endpoints: no error")
	}
	if _, err := etcdbinding.New(etcdbinding.Config{Endpoints: []string{"127.0.0.1:1"}, RequestTimeout: -1}); err == nil {
		t.Fatal("negative timeout: no error")
	}
}

// TestQueueExactlyOnce: concurrent dequeuers take every item exactly once.
func TestQueueExactlyOnce(t *testing.T) {
	b := newBinding(t, "queue/")
	ctx := context.Background()
	const items, workers = 40, 4
	for i := range items {
		if _, err := correctable.InvokeStrong(ctx, b, client.Enqueue("tickets", []byte(fmt.Sprint(i)))).Final(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu   sync.Mutex
		got  = map[string]int{}
		wg   sync.WaitGroup
		errs = make(chan error, workers)
	)
	for range workers {
		wg.Go(func() {
			for {
				v, err := correctable.Invoke(ctx, b, client.Dequeue("tickets")).Final(ctx)
				if err != nil {
					errs <- err
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
	close(errs)
	for err := range errs {
		t.Fatal(err)
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

// BenchmarkViews measures each view's latency on the three-member cluster
// (loopback): go test -run '^$' -bench Views ./bindings/etcdbinding
func BenchmarkViews(b *testing.B) {
	kvtest.BenchmarkViews(b, newBinding(b, "bench/"))
}
