package driver

import (
	"math/rand/v2"
	"testing"

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
