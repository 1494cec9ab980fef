package server

import "testing"

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
