package driver

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/correctables/correctables/internal/replica"
	"github.com/correctables/correctables/internal/state"
	"github.com/correctables/correctables/internal/storage"
)

// gated is the recorder with SaveAsync: each write's durable waits for a
// value on gate, so the test decides when a write becomes durable.
type gated struct {
	recorder
	gate chan struct{}
	n    int
}

func (g *gated) SaveAsync(hs *raftpb.HardState, ents []*raftpb.Entry, snap *raftpb.Snapshot, own []*replica.Req) (func() error, error) {
	if err := g.Save(hs, ents, snap, own); err != nil {
		return nil, err
	}
	g.n++
	n := g.n
	return func() error {
		<-g.gate
		// The test goroutine reads events only after the synced channel
		// closed, which happens after this append.
		*g.events = append(*g.events, fmt.Sprintf("durable %d", n))
		return nil
	}, nil
}

func put(t *testing.T, rep *replica.Replica, seq uint64, key string) {
	t.Helper()
	if err := rep.Submit(replica.ClientRequest{Client: 1, Seq: seq, Want: replica.WantTentative,
		Op: state.Op{Kind: state.OpPut, Key: key, Value: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
}

func waitClosed(t *testing.T, c <-chan struct{}) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(time.Minute):
		t.Fatal("a write never became durable")
	}
}

// Pump starts a write and returns before it is durable; until it is, the
// replica takes new operations, further Pump calls do nothing, and neither
// the view of the operation written nor its gossip leaves. Once it is
// durable the next Pump delivers and sends, and writes what came in
// meanwhile as the next batch, which again waits for its own fsync.
func TestPumpHoldsViewsAndMessagesUntilDurable(t *testing.T) {
	var events []string
	st := &gated{recorder: recorder{MemoryStorage: raft.NewMemoryStorage(), events: &events}, gate: make(chan struct{})}
	rep, err := replica.New(replica.Config{ID: 1, Peers: []uint64{1, 2, 3}, Storage: st,
		Clock: func() int64 { return 1e12 }, Rand: rand.New(rand.NewPCG(1, 1))})
	if err != nil {
		t.Fatal(err)
	}
	var rounds []Round
	d, err := New(Config{Replica: rep, Storage: st,
		Send: func(m replica.Message) { events = append(events, "send "+m.Type.String()) },
		Deliver: func(v replica.View) error {
			events = append(events, fmt.Sprintf("deliver %d", v.Seq))
			return nil
		},
		Observe: func(r Round) { rounds = append(rounds, r) },
	})
	if err != nil {
		t.Fatal(err)
	}
	put(t, rep, 1, "a")
	events = nil
	synced, progressed, err := d.Pump()
	if err != nil || synced == nil || !progressed {
		t.Fatalf("Pump = %v, %v, %v; want a write in flight", synced, progressed, err)
	}
	if d.InFlight() != synced {
		t.Fatal("InFlight is not the channel Pump returned")
	}
	if err := d.HandleReady(); err == nil {
		t.Fatal("HandleReady with a write in flight: want an error")
	}
	put(t, rep, 2, "b") // the loop goes on taking operations
	for range 3 {
		again, progressed, err := d.Pump()
		if err != nil || again != synced || progressed {
			t.Fatalf("Pump during the write = %v, %v, %v; want the same channel, no progress", again, progressed, err)
		}
	}
	if want := []string{"save"}; !slices.Equal(events, want) {
		t.Fatalf("before the fsync: events %v; want %v (no view, no gossip)", events, want)
	}
	st.gate <- struct{}{}
	waitClosed(t, synced)
	synced, progressed, err = d.Pump()
	if err != nil || synced == nil || !progressed {
		t.Fatalf("Pump after the fsync = %v, %v, %v; want the next write in flight", synced, progressed, err)
	}
	// The first batch's view and gossip went out after its fsync; the
	// second operation was written and waits for its own.
	i := slices.Index(events, "durable 1")
	if i < 0 || !slices.Contains(events[i:], "deliver 1") || !slices.Contains(events[i:], "send ops") ||
		slices.Contains(events, "deliver 2") || events[len(events)-1] != "save" {
		t.Fatalf("events %v; want durable 1, then deliver 1 and its gossip, then the second save", events)
	}
	st.gate <- struct{}{}
	waitClosed(t, synced)
	if synced, _, err = d.Pump(); err != nil || synced != nil {
		t.Fatalf("last Pump = %v, %v; want nothing in flight", synced, err)
	}
	if j := slices.Index(events, "durable 2"); j < 0 || !slices.Contains(events[j:], "deliver 2") {
		t.Fatalf("events %v; want deliver 2 after durable 2", events)
	}
	if d.InFlight() != nil {
		t.Fatal("InFlight after the last write")
	}
	var saves, own int
	for _, r := range rounds {
		saves += r.Saves
		own += r.OwnOps
	}
	if saves != 2 || own != 2 {
		t.Fatalf("rounds %+v; want two saves of one own operation each, counted when durable", rounds)
	}
	// A Storage without SaveAsync: Pump writes and waits, as HandleReady.
	var plainEvents []string
	plain := &recorder{MemoryStorage: raft.NewMemoryStorage(), events: &plainEvents}
	rep2, err := replica.New(replica.Config{ID: 1, Peers: []uint64{1, 2, 3}, Storage: plain,
		Clock: func() int64 { return 1e12 }, Rand: rand.New(rand.NewPCG(1, 1))})
	if err != nil {
		t.Fatal(err)
	}
	d2, err := New(Config{Replica: rep2, Storage: plain, Send: func(replica.Message) {},
		Deliver: func(v replica.View) error { plainEvents = append(plainEvents, "deliver"); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	put(t, rep2, 1, "a")
	if synced, progressed, err := d2.Pump(); err != nil || synced != nil || !progressed {
		t.Fatalf("Pump over a Storage without SaveAsync = %v, %v, %v; want the Ready handled whole", synced, progressed, err)
	}
	if i := slices.Index(plainEvents, "save"); i < 0 || !slices.Contains(plainEvents[i:], "deliver") {
		t.Fatalf("events %v; want save, then deliver", plainEvents)
	}
}

// On the real storage (Pebble over a crashable in-memory filesystem): a
// crash at the moment any view is delivered keeps the operation it
// acknowledges. The loop here takes new operations while each write is in
// flight, as the server's does. A driver that delivered before the fsync
// ended (or a SaveAsync whose durable returned early) would lose some.
func TestPumpDeliversOnlyDurableOperations(t *testing.T) {
	fs := vfs.NewCrashableMem()
	st, err := storage.Open(storage.Options{Dir: "/r", FS: fs, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rep, err := replica.New(replica.Config{ID: 1, Peers: []uint64{1, 2, 3}, Storage: st,
		Clock: func() int64 { return 1e12 }, Rand: rand.New(rand.NewPCG(1, 1))})
	if err != nil {
		t.Fatal(err)
	}
	var checked int
	var checkErr error
	d, err := New(Config{Replica: rep, Storage: st, Send: func(replica.Message) {},
		Deliver: func(v replica.View) error {
			// Crash now: what survives is what was synced.
			clone := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
			cst, err := storage.Open(storage.Options{Dir: "/r", FS: clone, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				checkErr = err
				return nil
			}
			defer cst.Close()
			own, err := cst.OwnOps()
			if err != nil {
				checkErr = err
				return nil
			}
			if !slices.ContainsFunc(own, func(q *replica.Req) bool { return q.ID == v.ID }) && checkErr == nil {
				checkErr = fmt.Errorf("view of operation %d delivered, but a crash then loses it (%d own operations survive)", v.Seq, len(own))
			}
			checked++
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	const n = 40
	seq := uint64(0)
	for seq < n {
		seq++
		put(t, rep, seq, fmt.Sprintf("k%d", seq))
		synced, _, err := d.Pump()
		if err != nil {
			t.Fatal(err)
		}
		for synced != nil {
			// Operations arrive while the write is in flight.
			if seq < n && seq%3 != 0 {
				seq++
				put(t, rep, seq, fmt.Sprintf("k%d", seq))
			}
			waitClosed(t, synced)
			if synced, _, err = d.Pump(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if checkErr != nil {
		t.Fatal(checkErr)
	}
	if checked != n {
		t.Fatalf("%d views delivered; want %d", checked, n)
	}
}
