package server

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/internal/replica"
)

// gatedStorage holds the write of a Ready that persists an own operation
// putting hold, until release is closed; entered is closed once such a
// write has begun.
type gatedStorage struct {
	Storage
	hold    []byte
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (g *gatedStorage) Save(hs *raftpb.HardState, ents []*raftpb.Entry, snap *raftpb.Snapshot, own []*replica.Req) error {
	for _, q := range own {
		if bytes.Equal(q.Op.Value, g.hold) {
			g.once.Do(func() { close(g.entered) })
			<-g.release
		}
	}
	return g.Storage.Save(hs, ents, snap, own)
}

// A weak read that arrives while the loop waits for a write runs at once
// off the loop, and its view leaves only once that write has synced: it
// read the state the write makes durable (here a put of the read's key).
// It does not queue for the loop's next round (which, through the loop,
// would come after the write, with a synced write of its own if that
// round persisted anything). A read on an idle replica runs off the loop
// too. Through the public API: Call and Invoke alike.
func TestWeakReadDuringAWriteWaitsForItsSyncOnly(t *testing.T) {
	g := &gatedStorage{Storage: reviewMem(), hold: []byte("v2"), entered: make(chan struct{}), release: make(chan struct{})}
	addr := freeAddr(t)
	s := startServers(t, Config{ID: 1, Peers: map[uint64]string{1: addr}, ClientAddr: addr, Storage: g, Logger: reviewQuiet()})[0]
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(g.release) }) }
	t.Cleanup(release) // before the server stops, should the test fail first
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := dial(t, addr)
	weakGet := &api.InvokeRequest{Op: &api.Op{Kind: api.Kind_KIND_GET, Key: "k"}, Preliminary: true}
	if _, err := c.Call(ctx, &api.InvokeRequest{Op: put("k", "v1"), Preliminary: true}); err != nil {
		t.Fatal(err)
	}
	// An idle replica's loop holds it only for a round (a tick's, the
	// put's commit): a read that arrives in one goes through the loop. On a
	// busy machine that can be any one read, so it reads until one has run
	// off the loop (each must see v1), within the test's deadline.
	for s.readsNow.Load() == 0 {
		if r, err := c.Call(ctx, weakGet); err != nil || string(r.GetResult().GetValue()) != "v1" {
			t.Fatalf("weak get on an idle replica (%d ran off the loop): %v, %v; want v1", s.readsNow.Load(), r, err)
		}
	}
	if n := s.readsNow.Load(); n != 1 {
		t.Fatalf("%d reads ran off the loop on an idle replica; want 1", n)
	}
	putDone := make(chan error, 1)
	go func() {
		_, err := c.Call(ctx, &api.InvokeRequest{Op: put("k", "v2"), Preliminary: true})
		putDone <- err
	}()
	<-g.entered // the loop waits for the put's write
	type got struct {
		v   string
		err error
	}
	reads := make(chan got, 2)
	// waitReads waits until n reads in all have run off the loop; none may
	// return meanwhile. The two reads go one after the other: together,
	// one could find the other holding the replica for longer than readNow
	// waits for it (a busy machine, the race detector) and go through the
	// loop, which this test holds in the write for good.
	waitReads := func(n int64) {
		for s.readsNow.Load() < n {
			select {
			case r := <-reads:
				t.Fatalf("a read returned (%q, %v) while the write of what it read had not synced", r.v, r.err)
			case <-ctx.Done():
				t.Fatalf("the reads did not run off the loop while it waited for the write (%d did)", s.readsNow.Load())
			case <-time.After(time.Millisecond):
			}
		}
	}
	go func() {
		r, err := c.Call(ctx, weakGet)
		reads <- got{string(r.GetResult().GetValue()), err}
	}()
	waitReads(2)
	go func() {
		views, err := invoke(ctx, c, weakGet)
		v := ""
		if len(views) == 1 {
			v = string(views[0].GetResult().GetValue())
		}
		reads <- got{v, err}
	}()
	waitReads(3)
	if n := len(s.submit); n != 0 {
		t.Fatalf("%d requests queue for the loop; want none (the reads ran off it)", n)
	}
	// A Status is answered off the loop too, with what the replica holds
	// (the put being written), not the Status the loop published before
	// it.
	st, err := c.Status(ctx, &api.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetVv()[1] != 2 || s.statusesNow.Load() == 0 {
		t.Fatalf("Status during the write: vv %v, %d answered off the loop; want the put counted (2), off the loop", st.GetVv(), s.statusesNow.Load())
	}
	// One with a min_vv it covers as well; one it does not cover waits.
	if _, err := c.Status(ctx, &api.StatusRequest{MinVv: map[uint64]uint64{1: 2}}); err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancelShort()
	if st, err := c.Status(short, &api.StatusRequest{MinVv: map[uint64]uint64{1: 3}}); err == nil {
		t.Fatalf("Status with a min_vv of an operation the replica never had: %v; want it to wait (DeadlineExceeded)", st)
	}
	select {
	case r := <-reads:
		t.Fatalf("a read returned (%q, %v) while the write of what it read had not synced", r.v, r.err)
	case <-time.After(50 * time.Millisecond):
	}
	release()
	for range 2 {
		if r := <-reads; r.err != nil || r.v != "v2" {
			t.Fatalf("weak get after the write synced: %q, %v; want v2", r.v, r.err)
		}
	}
	if err := <-putDone; err != nil {
		t.Fatal(err)
	}
}
