package driver

import (
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/correctables/correctables/internal/replica"
	"github.com/correctables/correctables/internal/state"
)

// recorder is a Storage on raft.MemoryStorage that logs every call into a
// shared event list, so the test sees the order of persist, send and
// deliver. (The simulation and the server run the driver on Pebble.)
type recorder struct {
	*raft.MemoryStorage
	events *[]string
	own    []*replica.Req
}

func (m *recorder) Save(hs *raftpb.HardState, ents []*raftpb.Entry, snap *raftpb.Snapshot, own []*replica.Req) error {
	*m.events = append(*m.events, "save")
	if hs != nil && !raft.IsEmptyHardState(hs) {
		if err := m.SetHardState(proto.Clone(hs).(*raftpb.HardState)); err != nil {
			return err
		}
	}
	m.own = append(m.own, own...)
	return m.Append(ents)
}
func (m *recorder) OwnOps() ([]*replica.Req, error) { return m.own, nil }
func (m *recorder) TruncateOwn(uint64) error        { return nil }
func (m *recorder) Close() error                    { return nil }

// The driver persists before it delivers a view or sends a message about
// an operation: a weak put's view and its gossip come after the Save that
// holds it, in the same HandleReady. Observe sees one round per call.
func TestPersistBeforeDeliverAndSend(t *testing.T) {
	var events []string
	st := &recorder{MemoryStorage: raft.NewMemoryStorage(), events: &events}
	rep, err := replica.New(replica.Config{ID: 1, Peers: []uint64{1, 2, 3}, Storage: st,
		Clock: func() int64 { return 1e12 }, Rand: rand.New(rand.NewPCG(1, 1))})
	if err != nil {
		t.Fatal(err)
	}
	var rounds []Round
	d, err := New(Config{Replica: rep, Storage: st,
		Send:    func(m replica.Message) { events = append(events, "send "+m.Type.String()) },
		Deliver: func(v replica.View) error { events = append(events, "deliver"); return nil },
		Observe: func(r Round) { rounds = append(rounds, r) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Submit(replica.ClientRequest{Client: 1, Seq: 1, Want: replica.WantTentative,
		Op: state.Op{Kind: state.OpPut, Key: "k", Value: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	events = nil
	if err := d.HandleReady(); err != nil {
		t.Fatal(err)
	}
	saved := -1
	for i, e := range events {
		switch {
		case e == "save" && saved < 0:
			saved = i
		case e == "deliver" || e == "send ops":
			if saved < 0 {
				t.Fatalf("%q before the operation was saved: %v", e, events)
			}
		}
	}
	if saved < 0 || len(st.own) != 1 {
		t.Fatalf("events %v, %d own operations saved; want the put saved", events, len(st.own))
	}
	if len(rounds) != 1 || rounds[0].OwnOps != 1 || rounds[0].Views != 1 {
		t.Fatalf("rounds %+v; want one with one own operation and one view", rounds)
	}
	if _, err := New(Config{}); err == nil {
		t.Fatal("New without a replica and storage: want an error")
	}
}

// stuckReplica reports a Ready forever and has nothing in it: the shape of
// the overload livelock (a batch reported due that could not go), which
// kept the server's loop in HandleReady and away from its ticks, requests
// and Stop. A test double of the Ready/Advance interface; the real replica
// is driven by the tests above.
type stuckReplica struct{ readies, advances int }

func (s *stuckReplica) HasReady() bool { return true }
func (s *stuckReplica) Ready() (replica.Ready, error) {
	s.readies++
	return replica.Ready{}, nil
}
func (s *stuckReplica) Advance(replica.Ready) { s.advances++ }

// A replica that never stops reporting a Ready cannot hold the caller: each
// call returns after MaxReadies, says so in its round, and the next call
// goes on.
func TestHandleReadyReturnsToItsCaller(t *testing.T) {
	rep := &stuckReplica{}
	st := &recorder{MemoryStorage: raft.NewMemoryStorage(), events: new([]string)}
	var rounds []Round
	d, err := New(Config{Replica: rep, Storage: st, MaxReadies: 7,
		Send:    func(replica.Message) {},
		Deliver: func(replica.View) error { return nil },
		Observe: func(r Round) { rounds = append(rounds, r) },
		Logger:  slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	for call := 1; call <= 3; call++ {
		done := make(chan error, 1)
		go func() { done <- d.HandleReady() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("call %d: HandleReady did not return with a replica that always has a Ready", call)
		}
		if rep.readies != 7*call || rep.advances != 7*call {
			t.Fatalf("call %d: %d readies, %d advances; want %d each", call, rep.readies, rep.advances, 7*call)
		}
		if len(rounds) != call || !rounds[call-1].Capped || rounds[call-1].Readies != 7 {
			t.Fatalf("call %d: rounds %+v; want one capped round of 7 per call", call, rounds)
		}
	}
	if len(*st.events) != 0 {
		t.Fatalf("empty Readies wrote %v", *st.events)
	}
	if _, err := New(Config{Replica: rep, Storage: st, MaxReadies: -1,
		Send: func(replica.Message) {}, Deliver: func(replica.View) error { return nil }}); err == nil {
		t.Fatal("a negative MaxReadies was accepted")
	}
}
