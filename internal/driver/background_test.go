package driver

import (
	"math/rand/v2"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/correctables/correctables/internal/replica"
	"github.com/correctables/correctables/internal/state"
	"github.com/correctables/correctables/internal/storage"
)

// gatedStore is the real Pebble store whose CreateSnapshot waits, once
// started, until the test releases it: a snapshot that takes long to write.
type gatedStore struct {
	*storage.Store
	started, release chan struct{}
}

func (g *gatedStore) CreateSnapshot(index uint64, cs *raftpb.ConfState, data []byte) (*raftpb.Snapshot, error) {
	g.started <- struct{}{}
	<-g.release
	return g.Store.CreateSnapshot(index, cs, data)
}

// TestSnapshotInBackground: with Config.Post the driver writes a snapshot
// on a goroutine of its own. While the write is held (a large state on a
// slow disk), the replica goes on: operations submitted meanwhile are
// persisted and answered. Once written, the rest runs on the loop through
// Post: the log is compacted behind the snapshot, which the Store returns,
// and the replica asks for the next one in due course. On the real Pebble
// store (internal/storage), so the snapshot file and its record are the
// ones a restart reads.
func TestSnapshotInBackground(t *testing.T) {
	st, err := storage.Open(storage.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	g := &gatedStore{Store: st, started: make(chan struct{}, 1), release: make(chan struct{})}
	rep, err := replica.New(replica.Config{ID: 1, Peers: []uint64{1}, Storage: g, SnapshotEntries: 8,
		Clock: func() int64 { return 1e12 }, Rand: rand.New(rand.NewPCG(1, 1))})
	if err != nil {
		t.Fatal(err)
	}
	posted := make(chan func(), 4)
	stable := 0
	d, err := New(Config{Replica: rep, Storage: g,
		Send: func(replica.Message) {},
		Deliver: func(v replica.View) error {
			if v.Stable {
				stable++
			}
			return nil
		},
		Post: func(f func()) bool { posted <- f; return true },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		d.Wait()
		if err := st.Close(); err != nil {
			t.Error(err)
		}
	}()
	seq := uint64(0)
	put := func() {
		seq++
		if err := rep.Submit(replica.ClientRequest{Client: 1, Seq: seq, Want: replica.WantStable, Strong: true,
			Op: state.Op{Kind: state.OpPut, Key: "k", Value: []byte{byte(seq)}}}); err != nil {
			t.Fatal(err)
		}
		if err := d.HandleReady(); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 100 && !rep.IsLeader(); i++ {
		rep.Tick()
		if err := d.HandleReady(); err != nil {
			t.Fatal(err)
		}
	}
	if !rep.IsLeader() {
		t.Fatal("a one-replica cluster elected no leader")
	}
	// Puts until a snapshot is asked for and its write is held.
	for held := false; !held; {
		put()
		select {
		case <-g.started:
			held = true
		default:
			if seq > 100 {
				t.Fatal("no snapshot asked for after 100 committed puts")
			}
		}
	}
	_, _, snapAt := rep.Progress()
	before := stable
	for range 20 {
		put()
	}
	if stable-before != 20 {
		t.Fatalf("%d of 20 puts answered while a snapshot was being written; want all", stable-before)
	}
	if s, _ := st.Snapshot(); s.GetMetadata().GetIndex() != 0 {
		t.Fatalf("a snapshot at %d stored before its write was released", s.GetMetadata().GetIndex())
	}
	close(g.release)
	f := <-posted
	f() // on the loop
	s, err := st.Snapshot()
	if err != nil || s.GetMetadata().GetIndex() != snapAt || len(s.GetData()) == 0 {
		t.Fatalf("stored snapshot at %d (%d bytes, %v); want one at %d", s.GetMetadata().GetIndex(), len(s.GetData()), err, snapAt)
	}
	if first, _ := st.FirstIndex(); first <= 1 {
		t.Fatalf("log not compacted behind the snapshot: first index %d", first)
	}
	// The replica asks again once due: the next write is not held.
	g.release = make(chan struct{})
	close(g.release)
	for i := 0; i < 100; i++ {
		put()
		select {
		case <-g.started:
			(<-posted)()
			if s, _ := st.Snapshot(); s.GetMetadata().GetIndex() <= snapAt {
				t.Fatalf("second snapshot at %d, not past %d", s.GetMetadata().GetIndex(), snapAt)
			}
			return
		default:
		}
	}
	t.Fatal("no second snapshot after 100 more puts")
}
