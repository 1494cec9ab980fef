package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/correctables/correctables/client"
)

const backupKeys = 100_000

// Snapshot save from a running replica holding 100,000 keys,
// restore into three new data directories, start the new cluster on them:
// every key reads back with its value, the state hash is the same, and the
// new cluster takes writes.
func TestSnapshotRoundTrip100kKeys(t *testing.T) {
	dir := t.TempDir()
	_, eps := startCluster(t, filepath.Join(dir, "old"), 1)
	c := dialCluster(t, eps)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	start := time.Now()
	// 100,000 keys in transactions of 125 writes, 16 at a time.
	const perTxn = 125
	var wg sync.WaitGroup
	errs := make(chan error, backupKeys/perTxn)
	sem := make(chan struct{}, 16)
	for lo := 0; lo < backupKeys; lo += perTxn {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			var ws []client.Write
			for i := lo; i < lo+perTxn; i++ {
				ws = append(ws, client.Write{Key: backupKey(i), Value: []byte(fmt.Sprintf("v%d", i))})
			}
			v, err := c.InvokeStrong(ctx, client.Txn(nil, ws, nil)).Final(ctx)
			if err == nil && v.Value.Err != nil {
				err = v.Value.Err
			}
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("b"), 300<<10)
	for _, op := range []client.Op{client.Put("big", big), client.Enqueue("q", []byte("item"))} {
		if _, err := c.InvokeStrong(ctx, op).Final(ctx); err != nil {
			t.Fatal(err)
		}
	}

	t.Logf("%d keys written in %v", backupKeys, time.Since(start))
	file := filepath.Join(dir, "backup.snap")
	out, err := cli(t, nil, "snapshot", "save", file, "--endpoints", eps)
	if err != nil {
		t.Fatalf("snapshot save: %v", err)
	}
	t.Log(strings.TrimSpace(out))
	status, err := cli(t, nil, "snapshot", "status", file)
	if err != nil {
		t.Fatalf("snapshot status: %v", err)
	}
	wantKeys := fmt.Sprintf("%d keys", backupKeys+2)
	if !strings.Contains(status, wantKeys) {
		t.Fatalf("snapshot status: %q, want %q", status, wantKeys)
	}

	// Restore refuses a corrupted file and a used directory, changing nothing.
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.snap")
	b[len(b)/2] ^= 1
	if err := os.WriteFile(bad, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := cli(t, nil, "snapshot", "restore", bad, "--data-dir", filepath.Join(dir, "x")); err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Errorf("restore of a corrupted file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "x")); err == nil {
		t.Errorf("a refused restore created its data directory")
	}
	if _, err := cli(t, nil, "snapshot", "restore", file, "--data-dir", filepath.Join(dir, "old", "r1")); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("restore into a used directory: %v", err)
	}

	newDir := filepath.Join(dir, "new")
	peers := "1=127.0.0.1:1,2=127.0.0.1:2,3=127.0.0.1:3"
	for id := 1; id <= 3; id++ {
		out, err := cli(t, nil, "snapshot", "restore", file, "--data-dir", filepath.Join(newDir, fmt.Sprintf("r%d", id)),
			"--id", fmt.Sprint(id), "--peers", peers)
		if err != nil {
			t.Fatalf("snapshot restore --id %d: %v", id, err)
		}
		if !strings.Contains(out, wantKeys) {
			t.Errorf("restore --id %d: %q, want %q", id, out, wantKeys)
		}
	}
	t.Logf("saved and restored at %v", time.Since(start))
	_, neps := startCluster(t, newDir, 3)
	nc := dialCluster(t, neps)
	t.Logf("restored cluster up at %v", time.Since(start))
	n := 0
	for p := 0; p < backupKeys/1000; p++ {
		// Weak scans: every restored replica starts with the whole state.
		v, err := nc.InvokeWeak(ctx, client.Scan(fmt.Sprintf("k%03d", p), 0)).Final(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range v.Value.Items {
			var i int
			if _, err := fmt.Sscanf(kv.Key, "k%06d", &i); err != nil || string(kv.Value) != fmt.Sprintf("v%d", i) {
				t.Fatalf("restored %q = %q", kv.Key, kv.Value)
			}
			n++
		}
	}
	t.Logf("read back at %v", time.Since(start))
	if n != backupKeys {
		t.Fatalf("restored cluster has %d of %d keys", n, backupKeys)
	}
	v, err := nc.InvokeStrong(ctx, client.Get("big")).Final(ctx)
	if err != nil || !bytes.Equal(v.Value.Value, big) {
		t.Fatalf("restored big value: %d bytes, %v", len(v.Value.Value), err)
	}
	v, err = nc.InvokeStrong(ctx, client.Dequeue("q")).Final(ctx)
	if err != nil || string(v.Value.Value) != "item" {
		t.Fatalf("restored queue: %q, %v", v.Value.Value, err)
	}
	// The new cluster takes writes, and its state is the old one's plus
	// them (the dequeue above, and this put).
	if _, err := nc.InvokeStrong(ctx, client.Put("after", []byte("restore"))).Final(ctx); err != nil {
		t.Fatal(err)
	}
	file2 := filepath.Join(dir, "again.snap")
	if _, err := cli(t, nil, "snapshot", "save", file2, "--endpoints", neps); err != nil {
		t.Fatal(err)
	}
	status2, err := cli(t, nil, "snapshot", "status", file2)
	if err != nil || !strings.Contains(status2, fmt.Sprintf("%d keys", backupKeys+2)) {
		t.Fatalf("snapshot of the restored cluster: %q, %v", status2, err)
	}
}

func backupKey(i int) string { return fmt.Sprintf("k%06d", i) }
