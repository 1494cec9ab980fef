package server

import (
	"context"
	"testing"

	"github.com/correctables/correctables/internal/replica"
)

// pebbleCluster is a cluster of replicas on Pebble (fsync off) in one
// temporary directory, each serving clients and peers on its own loopback
// address. The replicas still in servers when the test ends are stopped;
// a test that stops one itself removes it with stop.
type pebbleCluster struct {
	dir     string
	peers   map[uint64]string
	servers map[uint64]*Server
}

// startPebbleCluster starts replicas 1..n; tweak, if not nil, adjusts each
// replica's configuration.
func startPebbleCluster(t *testing.T, n int, tweak func(id uint64, c *Config)) *pebbleCluster {
	t.Helper()
	pc := &pebbleCluster{dir: t.TempDir(), peers: freePeers(t, n), servers: map[uint64]*Server{}}
	t.Cleanup(func() {
		for _, s := range pc.servers {
			s.Stop()
		}
	})
	for id := uint64(1); id <= uint64(n); id++ {
		var f func(*Config)
		if tweak != nil {
			f = func(c *Config) { tweak(id, c) }
		}
		pc.servers[id] = startOnPebble(t, pc.dir, pc.peers, id, true, f)
	}
	return pc
}

// stop stops replica id and forgets it.
func (pc *pebbleCluster) stop(id uint64) {
	pc.servers[id].Stop()
	delete(pc.servers, id)
}

// leader returns the leader replica 1 knows of, failing the test if none.
func (pc *pebbleCluster) leader(ctx context.Context, t *testing.T) uint64 {
	t.Helper()
	var lead uint64
	if err := pc.servers[1].exec(ctx, func(r *replica.Replica) { lead = r.Leader() }); err != nil || lead == 0 {
		t.Fatalf("leader: %d, %v", lead, err)
	}
	return lead
}
