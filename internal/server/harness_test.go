package server

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/internal/storage"
)

// startServers creates and starts a server from each of cfgs; they are
// stopped, in order, when the test ends.
func startServers(t testing.TB, cfgs ...Config) []*Server {
	t.Helper()
	var servers []*Server
	t.Cleanup(func() {
		for _, s := range servers {
			s.Stop()
		}
	})
	for _, cfg := range cfgs {
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		servers = append(servers, s)
	}
	return servers
}

// plainConn returns a plaintext gRPC connection to addr, closed when the
// test ends.
func plainConn(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// freePeers reserves a loopback address for each of n replicas.
func freePeers(t testing.TB, n int) map[uint64]string {
	t.Helper()
	peers := map[uint64]string{}
	for i := uint64(1); i <= uint64(n); i++ {
		peers[i] = freeAddr(t)
	}
	return peers
}

// startOnPebble starts replica id of peers on Pebble in dir/<id> (clients
// and peers on one address, logs discarded); noSync skips the fsync (tests
// that check behaviour, not durability), tweak adjusts the configuration.
// The caller stops it.
func startOnPebble(t testing.TB, dir string, peers map[uint64]string, id uint64, noSync bool, tweak func(*Config)) *Server {
	t.Helper()
	st, err := storage.Open(storage.Options{Dir: filepath.Join(dir, fmt.Sprint(id)), NoSync: noSync, Logger: reviewQuiet(), AsyncSnapshotReads: true})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{ID: id, Peers: peers, ClientAddr: peers[id], PeerAddr: peers[id], Storage: st, Logger: reviewQuiet(), Seed: id}
	if tweak != nil {
		tweak(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	return s
}

// startSingle starts a one-replica server on memory storage and dials it
// with the client library; both stop when the test ends.
func startSingle(t *testing.T, ctx context.Context) *client.Client {
	t.Helper()
	addr := freeAddr(t)
	s, err := New(Config{ID: 1, Peers: map[uint64]string{1: addr}, ClientAddr: addr, Storage: reviewMem(), Logger: reviewQuiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop() })
	c, err := client.Dial(ctx, []string{addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// strongPutUntilFinal retries a strong put through c, each try bounded by
// try, until it gets its final view (a replica that has no leader yet
// refuses or times out); it fails the test when ctx ends first.
func strongPutUntilFinal(ctx context.Context, t testing.TB, c api.StoreClient, try time.Duration) {
	t.Helper()
	for {
		cctx, cancel := context.WithTimeout(ctx, try)
		_, err := invoke(cctx, c, &api.InvokeRequest{Op: put("after", "x"), Final: true, Strong: true})
		cancel()
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatal(err)
		}
	}
}
