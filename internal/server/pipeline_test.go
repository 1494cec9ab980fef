package server

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/internal/storage"
)

// slowDisk delays every fsync of Pebble's write-ahead log by delay, and
// holds them all while hung is set, until it is cleared.
type slowDisk struct {
	delay time.Duration
	mu    sync.Mutex
	hung  chan struct{} // non-nil: syncs wait for it to close
	syncs atomic.Int64
}

func (d *slowDisk) String() string { return "slowDisk" }

func (d *slowDisk) MaybeError(op errorfs.Op) error {
	switch op.Kind {
	case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
	default:
		return nil
	}
	if !strings.HasSuffix(op.Path, ".log") {
		return nil
	}
	d.syncs.Add(1)
	d.mu.Lock()
	h := d.hung
	d.mu.Unlock()
	if h != nil {
		<-h
	}
	time.Sleep(d.delay)
	return nil
}

func (d *slowDisk) hang() {
	d.mu.Lock()
	d.hung = make(chan struct{})
	d.mu.Unlock()
}

func (d *slowDisk) release() {
	d.mu.Lock()
	close(d.hung)
	d.hung = nil
	d.mu.Unlock()
}

// The loop's fsync runs off the loop (driver.Pump), and the loop goes on
// taking writes meanwhile, so under a steady write load a write is nearly
// always in flight. Operator requests (here Leader, which runs on the loop
// as membership changes and backups do) must still get their turn: they
// wait for the write in flight, not for a moment with none, which a
// loaded replica never has. And a disk that stops answering must still
// make the replica look down: the loop, though free, does not answer
// Status for a write stuck past statusWait, so Status falls back to the
// published reply and fails once that is stale, as when the loop itself
// waited on the disk.
func TestLoopWithFsyncInFlight(t *testing.T) {
	disk := &slowDisk{delay: 10 * time.Millisecond}
	dir := t.TempDir()
	st, err := storage.Open(storage.Options{Dir: filepath.Join(dir, "1"), Logger: reviewQuiet(),
		FS: errorfs.Wrap(vfs.Default, disk)})
	if err != nil {
		t.Fatal(err)
	}
	peers := freePeers(t, 1)
	s, err := New(Config{ID: 1, Peers: peers, ClientAddr: peers[1], PeerAddr: peers[1], Storage: st, Logger: reviewQuiet()})
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := dial(t, s.ClientAddr())
	if _, err := invoke(ctx, c, &api.InvokeRequest{Op: put("k", "v"), Final: true, Strong: true}); err != nil {
		t.Fatal(err)
	}

	// 64 writers keep a write in flight.
	load, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var puts atomic.Int64
	for w := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; load.Err() == nil; i++ {
				if _, err := invoke(load, c, &api.InvokeRequest{Op: put(fmt.Sprintf("w%d", w), fmt.Sprint(i)), Preliminary: true}); err == nil {
					puts.Add(1)
				}
			}
		}()
	}
	time.Sleep(200 * time.Millisecond)
	for i := range 10 {
		lctx, lcancel := context.WithTimeout(ctx, 10*time.Second)
		start := time.Now()
		leader, err := s.Leader(lctx)
		lcancel()
		if err != nil || leader != 1 {
			stopLoad()
			wg.Wait()
			t.Fatalf("Leader call %d under a write load: %d, %v after %v; want 1 (an operator request waits for the write in flight, not for a moment with none)",
				i, leader, err, time.Since(start).Round(time.Millisecond))
		}
	}
	stopLoad()
	wg.Wait()
	if puts.Load() == 0 {
		t.Fatal("no write went through: the load did not run")
	}
	t.Logf("%d weak puts and 10 Leader calls over a disk whose fsync takes %v (%d syncs)", puts.Load(), disk.delay, disk.syncs.Load())

	// The disk stops answering with a write in flight.
	disk.hang()
	hungPut := make(chan error, 1)
	go func() {
		_, err := invoke(ctx, c, &api.InvokeRequest{Op: put("h", "1"), Preliminary: true})
		hungPut <- err
	}()
	time.Sleep(2 * statusWait)
	// A stale published reply (as after statusStale of a stuck disk).
	if p := s.published.Load(); p != nil {
		s.published.Store(&publishedStatus{reply: p.reply, at: p.at.Add(-2 * statusStale)})
	}
	sctx, scancel := context.WithTimeout(ctx, time.Second)
	_, err = c.Status(sctx, &api.StatusRequest{})
	scancel()
	if status.Code(err) != codes.DeadlineExceeded {
		disk.release()
		t.Fatalf("Status with a write stuck on the disk: %v; want DeadlineExceeded (a replica whose disk hangs looks down)", err)
	}
	select {
	case err := <-hungPut:
		disk.release()
		t.Fatalf("a put was acknowledged while its fsync hung: %v", err)
	default:
	}
	disk.release()
	if err := <-hungPut; err != nil {
		t.Fatalf("the put after the disk came back: %v", err)
	}
	if _, err := c.Status(ctx, &api.StatusRequest{}); err != nil {
		t.Fatalf("Status once the disk answers again: %v", err)
	}
}

// BenchmarkSlowDisk: weak puts, 16 or 64 outstanding over three replicas
// on Pebble with fsync, on a disk whose every fsync of the write-ahead log
// takes 2 ms (a network volume's), with the fsync off the loop
// (driver.Pump, the default) and on it (driver.HandleReady, the loop
// before). Reports operations per second.
//
//	go test ./internal/server -run '^$' -bench SlowDisk -benchtime 6000x -count 2
func BenchmarkSlowDisk(b *testing.B) {
	for _, bc := range []struct {
		conc   int
		onLoop bool
	}{{16, true}, {16, false}, {64, true}, {64, false}} {
		onLoop := bc.onLoop
		b.Run(fmt.Sprintf("conc=%d/fsync-on-loop=%v", bc.conc, onLoop), func(b *testing.B) {
			peers := freePeers(b, 3)
			dir := b.TempDir()
			var servers []*Server
			for id := uint64(1); id <= 3; id++ {
				st, err := storage.Open(storage.Options{Dir: filepath.Join(dir, fmt.Sprint(id)), Logger: reviewQuiet(),
					FS: errorfs.Wrap(vfs.Default, &slowDisk{delay: 2 * time.Millisecond})})
				if err != nil {
					b.Fatal(err)
				}
				servers = append(servers, startServers(b, Config{ID: id, Peers: peers, ClientAddr: peers[id], PeerAddr: peers[id],
					Storage: st, Logger: reviewQuiet(), Seed: id, fsyncOnLoop: onLoop})...)
			}
			ctx := context.Background()
			var clients []api.StoreClient
			for _, s := range servers {
				clients = append(clients, dial(b, s.ClientAddr()))
			}
			if _, err := invoke(ctx, clients[0], &api.InvokeRequest{Op: put("k", "v"), Final: true, Strong: true}); err != nil {
				b.Fatal(err)
			}
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for w := range bc.conc {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c := clients[w%3]
					for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
						if _, err := invoke(ctx, c, &api.InvokeRequest{Op: put(fmt.Sprintf("k%d", i%1000), "v"), Preliminary: true}); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
		})
	}
}
