package server

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/correctables/correctables/api"
)

// BenchmarkWeakGetDuringWrites measures a weak get's latency, one at a
// time, at a replica that takes weak puts from eight writers meanwhile:
// three replicas in this process on Pebble with fsync on, the reads and
// writes through the gRPC API at replica 1. It reports the reads' p50 and
// p95 (µs) and the writes' rate; a read that arrives while the replica
// writes waits for that write (readnow.go), which is what it measures.
//
//	go test ./internal/server -run '^$' -bench WeakGetDuringWrites -benchtime 3000x -count 3
func BenchmarkWeakGetDuringWrites(b *testing.B) {
	dir := b.TempDir()
	peers := freePeers(b, 3)
	var servers []*Server
	for id := uint64(1); id <= 3; id++ {
		servers = append(servers, startOnPebble(b, dir, peers, id, false, nil))
	}
	defer func() {
		for _, s := range servers {
			s.Stop()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c := dial(b, peers[1])
	for {
		if _, err := c.Call(ctx, &api.InvokeRequest{Op: put("k", "v"), Final: true, Strong: true}); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var writes [8]int
	for w := range writes {
		wc := dial(b, peers[1])
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := wc.Call(ctx, &api.InvokeRequest{Op: put(fmt.Sprint("w", w, "-", i%100), "x"), Preliminary: true}); err == nil {
					writes[w]++
				}
			}
		})
	}
	time.Sleep(200 * time.Millisecond)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		t0 := time.Now()
		if _, err := c.Call(ctx, &api.InvokeRequest{Op: &api.Op{Kind: api.Kind_KIND_GET, Key: "k"}, Preliminary: true}); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	took := time.Since(start)
	b.StopTimer()
	close(stop)
	wg.Wait()
	slices.Sort(lat)
	n := 0
	for _, w := range writes {
		n += w
	}
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*95/100].Microseconds()), "p95-µs")
	b.ReportMetric(float64(n)/(took.Seconds()+0.2), "writes/s")
}
