package main

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/internal/cluster"
)

// TestSnapshotSaveFromLaggingReplica: a save from a replica that lags
// (every message to it delayed 800 ms) still holds a write whose final view
// the client had before the save began: Backup takes a strong read first.
// Without it, the snapshot was of the lagging replica's applied state and
// missed the write.
func TestSnapshotSaveFromLaggingReplica(t *testing.T) {
	dir := t.TempDir()
	c, err := cluster.Start(cluster.Options{Dir: filepath.Join(dir, "data"), Replicas: 3, NoSync: true,
		ReplicationDelay: map[uint64]time.Duration{3: 800 * time.Millisecond},
		Logger:           slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.MoveLeader(ctx, 1); err != nil {
		t.Fatal(err)
	}
	cl, err := client.Dial(ctx, []string{c.Endpoints[0]})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.InvokeStrong(ctx, client.Put("written", []byte("before the save"))).Final(ctx); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "lag.snap")
	if _, err := cli(t, nil, "snapshot", "save", file, "--endpoints", c.Endpoints[2]); err != nil {
		t.Fatal(err)
	}
	_, info, err := readSnapshotFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if info.Keys != 1 {
		t.Fatalf("snapshot from the lagging replica has %d keys, want 1 (the write acknowledged before the save)", info.Keys)
	}
}
