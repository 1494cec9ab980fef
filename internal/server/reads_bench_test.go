package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/raft/v3"

	"github.com/correctables/correctables/api"
)

// BenchmarkGet measures strong and weak gets through one replica of a
// three-replica cluster in this process (in-memory storage, metrics on, as
// `serve` runs), as unary Calls over four loopback connections with 256
// outstanding: the servers' cost per read and the gRPC client's, allocations
// included. `correctables bench load --workload c` is the comparison with
// etcd; this is the quick profile and allocation target of the read path.
//
//	go test ./internal/server -run '^$' -bench Get -benchmem -cpuprofile cpu.out
func BenchmarkGet(b *testing.B) {
	for _, strong := range []bool{true, false} {
		b.Run(fmt.Sprintf("strong=%v", strong), func(b *testing.B) { benchGet(b, strong, 256) })
	}
}

func benchGet(b *testing.B, strong bool, conc int) {
	peers := map[uint64]string{}
	for i := uint64(1); i <= 3; i++ {
		peers[i] = freeAddr(b)
	}
	var cfgs []Config
	for id := uint64(1); id <= 3; id++ {
		cfgs = append(cfgs, Config{
			ID: id, Peers: peers, ClientAddr: peers[id], PeerAddr: peers[id],
			Storage: &memStorage{MemoryStorage: raft.NewMemoryStorage()},
			Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)), Seed: id,
			Metrics: NewMetrics(prometheus.NewRegistry(), strconv.FormatUint(id, 10)),
		})
	}
	servers := startServers(b, cfgs...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var conns []api.StoreClient
	for range 4 {
		conns = append(conns, dial(b, servers[0].ClientAddr()))
	}
	// A leader, and the keys, through strong puts.
	for i := 0; i < 100; i++ {
		for {
			_, err := conns[0].Call(ctx, &api.InvokeRequest{Op: put(fmt.Sprint("k", i), string(make([]byte, 100))), Final: true, Strong: true})
			if err == nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	var next, errs atomic.Int64
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	for w := range conc {
		c := conns[w%len(conns)]
		wg.Go(func() {
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				req := &api.InvokeRequest{Op: &api.Op{Kind: api.Kind_KIND_GET, Key: fmt.Sprint("k", i%100)}, Preliminary: !strong, Final: strong, Strong: strong}
				if rep, err := c.Call(ctx, req); err != nil || !rep.GetResult().GetFound() {
					errs.Add(1)
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if n := errs.Load(); n > 0 {
		b.Fatalf("%d of %d gets failed or found nothing", n, b.N)
	}
}
