package server

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/correctable"
	"github.com/correctables/correctables/internal/state"
	"github.com/correctables/correctables/internal/storage"
)

// A put of a value of exactly the documented limit (state.DefaultMaxValue)
// goes through the real path: gRPC, validation, the raft log on Pebble,
// log entries decoded by every replica, snapshots. Its final view arrives;
// a replica stopped and restarted from its data directory (its own
// snapshot holds the value) and caught up by the leader's snapshot (it was
// down while the others compacted their logs) serves it.
//
// It used to take the cluster down: the value passed validation, then no
// replica could decode the log entry carrying it (a 1 MiB cap on byte
// lengths in the replica's decoder), and the leader fail-stopped.
func TestValueAtLimitSurvivesRestartAndSnapshot(t *testing.T) {
	dir := t.TempDir()
	peers := freePeers(t, 3)
	start := func(id uint64) *Server {
		return startOnPebble(t, dir, peers, id, true, func(c *Config) { c.SnapshotEntries, c.CompactMargin = 4, 1 })
	}
	servers := []*Server{start(1), start(2), start(3)}
	defer func() {
		for _, s := range servers {
			s.Stop()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	c1 := dial(t, peers[1])
	strongPut := func(k string, v []byte) (applied uint64) {
		t.Helper()
		views, err := invoke(ctx, c1, &api.InvokeRequest{Op: &api.Op{Kind: api.Kind_KIND_PUT, Key: k, Value: v}, Final: true, Strong: true})
		if err != nil {
			t.Fatalf("strong put of %s (%d bytes): %v", k, len(v), err)
		}
		if len(views) == 0 || !views[len(views)-1].GetFinal() {
			t.Fatalf("strong put of %s: no final view in %d views", k, len(views))
		}
		return views[len(views)-1].GetStamp().GetAppliedIndex()
	}
	big := bytes.Repeat([]byte{'v'}, state.DefaultMaxValue)
	big[0], big[len(big)-1] = 'a', 'z'
	bigAt := strongPut("big", big)
	// Past SnapshotEntries: every replica snapshots a state holding it,
	// replica 3 once it has applied that far (a majority without it
	// acknowledged the puts).
	for i := range 8 {
		strongPut(fmt.Sprint("k", i), []byte(fmt.Sprint(i)))
	}
	for c3 := dial(t, peers[3]); ; time.Sleep(5 * time.Millisecond) {
		st, err := c3.Status(ctx, &api.StatusRequest{})
		if err != nil {
			t.Fatalf("replica 3's status: %v", err)
		}
		if st.GetSnapshotIndex() >= bigAt {
			break
		}
	}
	if err := servers[2].Stop(); err != nil {
		t.Fatal(err)
	}
	// Replica 3's own snapshot on disk holds the value: its restart
	// restores it.
	st, err := storage.Open(storage.Options{Dir: filepath.Join(dir, "3"), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := st.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if n := len(snap.GetData()); n <= state.DefaultMaxValue {
		t.Fatalf("replica 3's snapshot at %d has %d bytes; want one holding the %d-byte value", snap.GetMetadata().GetIndex(), n, len(big))
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	// While replica 3 is down the others move on and compact their logs:
	// replica 3 catches up from a snapshot, which carries the value.
	for i := range 12 {
		strongPut(fmt.Sprint("k", i), []byte(fmt.Sprint("again", i)))
	}
	servers[2] = start(3)
	c3 := dial(t, peers[3])
	// A strong read at replica 3 waits until it applied the read index,
	// beyond the log the others kept.
	views, err := invoke(ctx, c3, &api.InvokeRequest{Op: &api.Op{Kind: api.Kind_KIND_GET, Key: "big"}, Final: true, Strong: true})
	if err != nil {
		t.Fatalf("strong read at the restarted replica: %v", err)
	}
	if got := views[len(views)-1].GetResult().GetValue(); !bytes.Equal(got, big) {
		t.Fatalf("strong read at the restarted replica: %d bytes, want the %d-byte value", len(got), len(big))
	}
	views, err = invoke(ctx, c3, &api.InvokeRequest{Op: &api.Op{Kind: api.Kind_KIND_GET, Key: "k11"}, Preliminary: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(views[0].GetResult().GetValue()); got != "again11" {
		t.Fatalf("weak read at the restarted replica: %q, want again11", got)
	}
}

// Through the client library, every operation at the documented limits
// (state.DefaultLimits) gets both its views: a key of MaxKey and a value of
// MaxValue, a CAS of two maximal values, a transaction of MaxOpBytes and
// one of MaxTxnOps writes, and a scan of a few maximal values, whose reply
// is over the 4 MiB gRPC clients receive by default. That scan used to
// fail as ErrOverloaded ("received message larger than max"), an error
// that invites retries that can never succeed.
func TestClientOperationsAtLimits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := startSingle(t, ctx)
	run := func(op client.Op) client.Result {
		t.Helper()
		cor := c.Invoke(ctx, op, correctable.Eventual, correctable.Strong)
		var last client.Result
		n := 0
		for v := range cor.AllViews() {
			last, n = v.Value, n+1
		}
		if err := cor.Err(); err != nil {
			t.Fatalf("%v: %v", op, err)
		}
		if n != 2 {
			t.Fatalf("%v: %d views, want 2", op, n)
		}
		if last.Err != nil {
			t.Fatalf("%v: %v", op, last.Err)
		}
		return last
	}
	lim := state.DefaultLimits()
	key := strings.Repeat("k", lim.MaxKey)
	val := bytes.Repeat([]byte{'v'}, lim.MaxValue)
	run(client.Put(key, val))
	if r := run(client.Get(key)); !bytes.Equal(r.Value, val) {
		t.Fatalf("get: %d bytes, want %d", len(r.Value), len(val))
	}
	if r := run(client.CAS(key, val, val)); !r.OK {
		t.Fatal("cas of two maximal values did not succeed")
	}
	// MaxOpBytes of keys and values in all.
	rest := lim.MaxOpBytes - 2*(1+lim.MaxValue) - 1
	run(client.Txn(nil, []client.Write{{Key: "a", Value: val}, {Key: "b", Value: val}, {Key: "c", Value: val[:rest]}}, nil))
	var ws []client.Write
	for i := range lim.MaxTxnOps {
		ws = append(ws, client.Write{Key: fmt.Sprint(strings.Repeat("w", 64), i)})
	}
	run(client.Txn(nil, ws, nil))
	const scanned = 5
	for i := range scanned {
		run(client.Put(fmt.Sprint("s", i), val))
	}
	if r := run(client.Scan("s", 0)); len(r.Items) != scanned || !bytes.Equal(r.Items[scanned-1].Value, val) {
		t.Fatalf("scan of %d maximal values: %d items", scanned, len(r.Items))
	}
}
