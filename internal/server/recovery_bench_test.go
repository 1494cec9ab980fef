package server

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/correctables/correctables/api"
)

// BenchmarkRecovery measures what a user feels when a replica restarts: a
// three-replica cluster on Pebble (fsync on) takes n weak puts through
// replica 1 with snapshots off (so all n are since the last snapshot), then
// replica 1 stops and starts again from its directory. It reports the time
// until it answers Status (status-s) and until a strong put through it gets
// its final view (final-s). Recovery must not grow faster than the log it
// replays (README "Restart and failover"): compare 1k, 10k and 100k.
//
//	go test ./internal/server -run '^$' -bench Recovery -benchtime 1x -timeout 30m
func BenchmarkRecovery(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("writes=%d", n), func(b *testing.B) {
			for range b.N {
				status, final := measureRecovery(b, n)
				b.ReportMetric(status.Seconds(), "status-s")
				b.ReportMetric(final.Seconds(), "final-s")
			}
		})
	}
}

// BenchmarkFailover measures the first final view after the leader is
// killed: n weak puts through replica 1, then the leader stops and a strong
// put through a surviving replica is retried until it gets its final view
// (failover-s, from the kill). It must not grow with the history.
//
//	go test ./internal/server -run '^$' -bench Failover -benchtime 1x -timeout 30m
func BenchmarkFailover(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("writes=%d", n), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				lc := loadCluster(b, n)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				lead, err := lc.servers[0].Leader(ctx)
				if err != nil || lead == 0 {
					b.Fatalf("no leader: %v", err)
				}
				other := lead%3 + 1
				c := dial(b, lc.peers[other])
				b.StartTimer()
				start := time.Now()
				lc.servers[lead-1].Stop()
				strongPutUntilFinal(ctx, b, c, 2*time.Second)
				b.ReportMetric(time.Since(start).Seconds(), "failover-s")
				b.StopTimer()
				cancel()
				lc.stop()
			}
		})
	}
}

// BenchmarkCatchUp measures a follower's catch-up: replica 3 is down while
// replica 1 takes n weak puts (snapshots as configured by default, so that
// the missed writes come from the log or, once they lie behind its
// compacted part, from a snapshot), then starts again. catchup-s is the
// time from its start until it has applied everything replica 1 had
// committed when it started (Status: committed operations and applied
// index). It must grow at most with what was missed, not with the history
// before it (history: weak puts with every replica up, before the stop).
//
//	go test ./internal/server -run '^$' -bench CatchUp -benchtime 1x -timeout 30m
func BenchmarkCatchUp(b *testing.B) {
	for _, r := range []struct{ history, n int }{{0, 1_000}, {0, 10_000}, {0, 100_000}, {100_000, 1_000}} {
		b.Run(fmt.Sprintf("history=%d/writes=%d", r.history, r.n), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				lc := loadClusterWith(b, r.history, r.n, nil, 3)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				want, err := lc.servers[0].Status(ctx, &api.StatusRequest{})
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				start := time.Now()
				lc.servers[2] = lc.open(3)
				c := dial(b, lc.peers[3])
				var answered time.Duration
				for {
					st, err := c.Status(ctx, &api.StatusRequest{})
					if err == nil && answered == 0 {
						answered = time.Since(start)
					}
					if err == nil && st.GetCommittedOps() >= want.GetCommittedOps() && st.GetAppliedIndex() >= want.GetAppliedIndex() {
						break
					}
					if ctx.Err() != nil {
						b.Fatalf("replica 3 did not catch up: %v (status %v, want %v)", ctx.Err(), st, want)
					}
					time.Sleep(time.Millisecond)
				}
				b.ReportMetric(time.Since(start).Seconds(), "catchup-s")
				b.ReportMetric(answered.Seconds(), "status-s")
				b.StopTimer()
				cancel()
				lc.stop()
			}
		})
	}
}

// loaded is a three-replica cluster on Pebble (fsync on, snapshots off)
// that took n weak puts through replica 1.
type loaded struct {
	servers []*Server
	peers   map[uint64]string
	open    func(id uint64) *Server
}

func (l *loaded) stop() {
	for _, s := range l.servers {
		s.Stop()
	}
}

func loadCluster(b *testing.B, n int) *loaded {
	return loadClusterWith(b, 0, n, func(c *Config) { c.SnapshotEntries = -1 }, 0)
}

// loadClusterWith is loadCluster with the replicas' configuration changed
// by tweak: history weak puts with every replica up, then replica down (if
// not 0) stops, then n more.
func loadClusterWith(b *testing.B, history, n int, tweak func(*Config), down uint64) *loaded {
	b.Helper()
	dir := b.TempDir()
	peers := freePeers(b, 3)
	open := func(id uint64) *Server {
		return startOnPebble(b, dir, peers, id, false, tweak)
	}
	lc := &loaded{servers: []*Server{open(1), open(2), open(3)}, peers: peers, open: open}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	c := dial(b, peers[1])
	weakPuts(ctx, b, c, 0, history)
	if down != 0 {
		if err := lc.servers[down-1].Stop(); err != nil {
			b.Fatal(err)
		}
	}
	weakPuts(ctx, b, c, history, n)
	// Let the no-ops commit what the puts left tentative, as on a live
	// cluster; a restart then replays a committed log.
	if _, err := invoke(ctx, c, &api.InvokeRequest{Op: put("sync", "x"), Final: true, Strong: true}); err != nil {
		b.Fatal(err)
	}
	return lc
}

// weakPuts puts n values through c, 64 outstanding, over 1,000 keys; from
// is the number of puts before (their values differ).
func weakPuts(ctx context.Context, b *testing.B, c api.StoreClient, from, n int) {
	b.Helper()
	next := atomic.Int64{}
	next.Store(int64(from))
	var wg sync.WaitGroup
	var failed atomic.Value
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(from+n) {
					return
				}
				op := put(fmt.Sprintf("k%d", i%1000), fmt.Sprintf("v%d", i))
				for {
					_, err := invoke(ctx, c, &api.InvokeRequest{Op: op, Preliminary: true})
					if err == nil {
						break
					}
					if ctx.Err() != nil {
						failed.Store(err)
						return
					}
					time.Sleep(time.Millisecond) // overloaded: back off
				}
			}
		}()
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		b.Fatal(err)
	}
}

func measureRecovery(b *testing.B, n int) (status, final time.Duration) {
	b.Helper()
	b.StopTimer()
	lc := loadCluster(b, n)
	defer lc.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	lc.servers[0].Stop()

	b.StartTimer()
	start := time.Now()
	lc.servers[0] = lc.open(1)
	c := dial(b, lc.peers[1])
	for {
		if _, err := c.Status(ctx, &api.StatusRequest{}); err == nil {
			break
		} else if ctx.Err() != nil {
			b.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	status = time.Since(start)
	strongPutUntilFinal(ctx, b, c, 5*time.Second)
	final = time.Since(start)
	b.StopTimer()
	return status, final
}
