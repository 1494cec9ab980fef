package etcdbinding_test

import (
	"context"
	"testing"
	"time"

	"github.com/correctables/correctables/bindings/etcdbinding"
	"github.com/correctables/correctables/bindings/kvtest"
	"github.com/correctables/correctables/internal/extstore"
)

// One three-member cluster for the package's tests.
var (
	cluster  *extstore.Etcd
	startErr error
)

func TestMain(m *testing.M) {
	extstore.Main(m, "etcdbinding", 60*time.Second, func(ctx context.Context, dir string) (*extstore.Etcd, error) {
		return extstore.StartEtcd(ctx, dir, 3)
	}, &cluster, &startErr)
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

func TestConformance(t *testing.T) {
	b := newBinding(t, "conformance/")
	down, err := etcdbinding.New(etcdbinding.Config{Endpoints: []string{kvtest.ClosedAddr(t)}, RequestTimeout: 2 * time.Second})
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
	kvtest.QueueExactlyOnce(t, 40, 4, newBinding(t, "queue/"))
}

// BenchmarkViews measures each view's latency on the three-member cluster
// (loopback): go test -run '^$' -bench Views ./bindings/etcdbinding
func BenchmarkViews(b *testing.B) {
	kvtest.BenchmarkViews(b, newBinding(b, "bench/"))
}
