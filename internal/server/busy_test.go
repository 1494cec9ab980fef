package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/internal/replica"
)

// A write the replica cannot take yet (it holds MaxTentative uncommitted
// operations of its own: replica.ErrBusy) waits for room (Config.BusyWait)
// instead of failing at once, and runs when a commit makes room; one that
// waited BusyWait in vain is refused with ResourceExhausted and changes
// nothing. Replicas 1 and 3 take 4 uncommitted operations, and no replica
// proposes a no-op (which would commit every operation its proposer holds),
// so weak writes commit only in the context of a strong operation (Creek
// §3.3: its entry carries the uncommitted operations its proposer has
// received).
func TestBusyReplicaMakesWritesWait(t *testing.T) {
	pc := startPebbleCluster(t, 3, func(id uint64, c *Config) {
		c.NoopTicks = 1 << 30
		switch id {
		case 1:
			c.maxTentative, c.BusyWait = 4, time.Hour
		case 3:
			c.maxTentative, c.BusyWait = 4, 300*time.Millisecond
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c1, c2, c3 := dial(t, pc.peers[1]), dial(t, pc.peers[2]), dial(t, pc.peers[3])
	strongPutUntilFinal(ctx, t, c2, time.Second)
	weakPut := func(c api.StoreClient, k string) error {
		_, err := invoke(ctx, c, &api.InvokeRequest{Op: put(k, "v"), Preliminary: true})
		return err
	}
	found := func(c api.StoreClient, k string) bool {
		t.Helper()
		views, err := invoke(ctx, c, &api.InvokeRequest{Op: &api.Op{Kind: api.Kind_KIND_GET, Key: k}, Preliminary: true})
		if err != nil || len(views) != 1 {
			t.Fatalf("weak read of %s: %v %v", k, views, err)
		}
		return views[0].GetResult().GetFound()
	}

	// Replica 3: the fifth write waits 300ms, nothing commits, it is
	// refused and not applied.
	for i := range 4 {
		if err := weakPut(c3, fmt.Sprint("r3-", i)); err != nil {
			t.Fatalf("weak write %d at replica 3: %v", i, err)
		}
	}
	if err := weakPut(c3, "r3-4"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("fifth weak write at replica 3 (4 uncommitted, no room within BusyWait): %v, want ResourceExhausted", err)
	}
	if found(c3, "r3-4") {
		t.Error("the refused write is visible at replica 3")
	}

	// Replica 1: the fifth write waits until replica 2's strong put
	// commits the first four.
	for i := range 4 {
		if err := weakPut(c1, fmt.Sprint("r1-", i)); err != nil {
			t.Fatalf("weak write %d at replica 1: %v", i, err)
		}
	}
	for !found(c2, "r1-3") { // gossip brings them to replica 2
		if ctx.Err() != nil {
			t.Fatal("replica 2 never received replica 1's weak writes")
		}
		time.Sleep(10 * time.Millisecond)
	}
	fifth := make(chan error, 1)
	go func() { fifth <- weakPut(c1, "r1-4") }()
	for {
		var parked int
		if err := pc.servers[1].exec(ctx, func(*replica.Replica) { parked = len(pc.servers[1].parked) }); err != nil {
			t.Fatal(err)
		}
		if parked == 1 {
			break
		}
		select {
		case err := <-fifth:
			t.Fatalf("fifth weak write at replica 1 answered (%v) before anything committed its first four", err)
		case <-ctx.Done():
			t.Fatal("the fifth weak write at replica 1 never waited")
		case <-time.After(10 * time.Millisecond):
		}
	}
	if _, err := invoke(ctx, c2, &api.InvokeRequest{Op: put("commit", "it"), Final: true, Strong: true}); err != nil {
		t.Fatalf("strong put at replica 2: %v", err)
	}
	if err := <-fifth; err != nil {
		t.Fatalf("fifth weak write at replica 1, after a commit made room: %v", err)
	}
	if !found(c1, "r1-4") {
		t.Error("the write that waited is not visible at replica 1")
	}
}
