package kvtest_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/correctables/correctables/bindings/kvtest"
	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/internal/cluster"
)

// TestOurStore runs the suite on our own client against an in-process
// three-replica cluster; its Down binding is a client whose one replica was
// stopped after the client connected.
func TestOurStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	quiet := slog.New(slog.DiscardHandler)
	cl, err := cluster.Start(cluster.Options{Dir: t.TempDir(), NoSync: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Stop()
	if _, err := cl.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := client.Dial(ctx, cl.Endpoints)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	lone, err := cluster.Start(cluster.Options{Dir: t.TempDir(), Replicas: 1, NoSync: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lone.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	down, err := client.Dial(ctx, lone.Endpoints)
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	if err := lone.Stop(); err != nil {
		t.Fatal(err)
	}

	kvtest.Run(t, c, kvtest.Options{
		Down: down,
		// The down client's connection keeps trying to reconnect: that
		// goroutine is the client's, not an invocation's.
		IgnoreGoroutines: []goleak.Option{goleak.IgnoreAnyFunction("google.golang.org/grpc.(*addrConn).connect")},
		// The client's pipes (one stream per replica, opened when an
		// operation of one view first goes there) live until Close.
		LongLived: kvtest.PipeGoroutines,
	})
}

// BenchmarkOurStore measures each view's latency on an in-process
// three-replica cluster (loopback): go test -run '^$' -bench . ./bindings/kvtest
func BenchmarkOurStore(b *testing.B) {
	cl, err := cluster.Start(cluster.Options{Dir: b.TempDir(), NoSync: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Stop()
	ctx := context.Background()
	if _, err := cl.WaitLeader(ctx); err != nil {
		b.Fatal(err)
	}
	c, err := client.Dial(ctx, cl.Endpoints)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	kvtest.BenchmarkViews(b, c)
}
