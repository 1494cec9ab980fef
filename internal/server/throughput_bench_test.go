package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/internal/storage"
)

// BenchmarkPut measures puts through one replica of a three-replica cluster
// in this process, on Pebble with fsync, over loopback gRPC (four connections), with 16, 64
// and 256 outstanding operations: strong (final view only) and weak
// (preliminary only). It is the quick profile target of the server loop;
// `correctables bench load --peer etcd` is the comparison users read.
//
//	go test ./internal/server -run '^$' -bench Put -benchtime 3s -cpuprofile cpu.out
func BenchmarkPut(b *testing.B) {
	for _, strong := range []bool{true, false} {
		for _, conc := range []int{1, 16, 64, 256} {
			name := fmt.Sprintf("strong=%v/outstanding=%d", strong, conc)
			b.Run(name, func(b *testing.B) { benchPut(b, strong, conc) })
		}
	}
}

func benchPut(b *testing.B, strong bool, conc int) {
	dir := b.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	servers := startCluster(b, 3, func(id uint64) Storage {
		st, err := storage.Open(storage.Options{Dir: filepath.Join(dir, fmt.Sprint(id)), Logger: log, AsyncSnapshotReads: true})
		if err != nil {
			b.Fatal(err)
		}
		return st
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var conns []api.StoreClient
	for range 4 {
		conns = append(conns, dial(b, servers[0].ClientAddr()))
	}
	c := conns[0]
	// Wait for a leader: one strong put.
	for {
		if _, err := invoke(ctx, c, &api.InvokeRequest{Op: put("warm", "x"), Final: true, Strong: true}); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	val := string(make([]byte, 100))
	var next atomic.Int64
	var wg sync.WaitGroup
	var errs atomic.Int64
	b.ResetTimer()
	start := time.Now()
	for w := range conc {
		wg.Add(1)
		c := conns[w%len(conns)]
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				req := &api.InvokeRequest{Op: put(fmt.Sprintf("k%d-%d", w, i%100), val), Preliminary: !strong, Final: strong, Strong: strong}
				if _, err := invoke(ctx, c, req); err != nil {
					errs.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
	b.ReportMetric(float64(errs.Load()), "errors")
}
