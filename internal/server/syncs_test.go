package server

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/internal/replica"
)

// syncCounter is a replica's real storage, with a count of the writes it
// syncs: those that persist log entries or own operations.
type syncCounter struct {
	Storage
	syncs atomic.Int64
}

func (s *syncCounter) Save(hs *raftpb.HardState, ents []*raftpb.Entry, snap *raftpb.Snapshot, own []*replica.Req) error {
	if len(ents) > 0 || len(own) > 0 {
		s.syncs.Add(1)
	}
	return s.Storage.Save(hs, ents, snap, own)
}

// A strong put submitted at the leader, one at a time, costs the leader one
// synced write: the operation and its entry are persisted together while
// the entry is on its way to the followers. (Before, the leader wrote the
// operation, and proposed it only once that write was done: two synced
// writes, one after the other, on the path of every strong put.)
func TestStrongPutAtLeaderSyncsOnce(t *testing.T) {
	counters := map[uint64]*syncCounter{}
	pc := startPebbleCluster(t, 3, func(id uint64, c *Config) {
		sc := &syncCounter{Storage: c.Storage}
		counters[id] = sc
		c.Storage = sc
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lead, err := pc.servers[1].Leader(ctx)
	for ; err == nil && lead == 0; lead, err = pc.servers[1].Leader(ctx) {
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, pc.peers[lead])
	strongPutUntilFinal(ctx, t, c, time.Second)
	if l, err := pc.servers[1].Leader(ctx); err != nil || l != lead {
		t.Skipf("leader moved from %d to %d (%v) while the cluster settled", lead, l, err)
	}
	const n = 20
	before := counters[lead].syncs.Load()
	for i := range n {
		if _, err := invoke(ctx, c, &api.InvokeRequest{Op: put(fmt.Sprint("k", i), "v"), Final: true, Strong: true}); err != nil {
			t.Fatal(err)
		}
	}
	if l, err := pc.servers[1].Leader(ctx); err != nil || l != lead {
		t.Skipf("leader moved from %d to %d (%v) during the puts", lead, l, err)
	}
	got := counters[lead].syncs.Load() - before
	t.Logf("the leader synced %d writes for %d strong puts", got, n)
	if got > n+n/4 {
		t.Fatalf("the leader synced %d writes for %d strong puts submitted to it one at a time; want about one each", got, n)
	}
}
