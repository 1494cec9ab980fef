package consensus

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// cluster is three Nodes with synchronous, lossless delivery.
type cluster struct {
	nodes   map[uint64]*Node
	storage map[uint64]*raft.MemoryStorage
	cut     map[uint64]bool    // nodes cut off from everyone
	link    map[[2]uint64]bool // links down, both ways
}

func newCluster(t *testing.T, seed uint64) *cluster {
	c := &cluster{nodes: map[uint64]*Node{}, storage: map[uint64]*raft.MemoryStorage{}, cut: map[uint64]bool{}, link: map[[2]uint64]bool{}}
	for id := uint64(1); id <= 3; id++ {
		st := raft.NewMemoryStorage()
		n, err := New(Config{ID: id, Peers: []uint64{1, 2, 3}, Storage: st, Rand: rand.New(rand.NewPCG(seed, id))})
		if err != nil {
			t.Fatal(err)
		}
		c.nodes[id], c.storage[id] = n, st
	}
	return c
}

// step ticks every node once and delivers messages until none are left;
// it returns a trace of what happened.
func (c *cluster) step(t *testing.T) string {
	var trace string
	for id := uint64(1); id <= 3; id++ {
		c.nodes[id].Tick()
	}
	for moved := true; moved; {
		moved = false
		for id := uint64(1); id <= 3; id++ {
			n := c.nodes[id]
			for n.HasReady() {
				rd := n.Ready()
				if rd.HardState != nil && !raft.IsEmptyHardState(rd.HardState) {
					c.storage[id].SetHardState(rd.HardState)
				}
				c.storage[id].Append(rd.Entries)
				for _, ent := range rd.CommittedEntries {
					if ent.GetType() == raftpb.EntryConfChange {
						var cc raftpb.ConfChange
						if err := proto.Unmarshal(ent.GetData(), &cc); err != nil {
							t.Fatal(err)
						}
						n.ApplyConfChange(&cc)
					}
				}
				for _, m := range rd.Messages {
					if c.cut[m.GetFrom()] || c.cut[m.GetTo()] || c.link[[2]uint64{m.GetFrom(), m.GetTo()}] || c.link[[2]uint64{m.GetTo(), m.GetFrom()}] {
						continue
					}
					trace += fmt.Sprintf("%d->%d %s t%d;", m.GetFrom(), m.GetTo(), m.GetType(), m.GetTerm())
					_ = c.nodes[m.GetTo()].Step(m)
					moved = true
				}
				n.Advance(rd)
			}
		}
	}
	return trace
}

// elect steps the cluster until it has a leader, for up to 60 ticks, and
// returns it (0 if none).
func (c *cluster) elect(t *testing.T) uint64 {
	for i := 0; i < 60 && c.leader() == 0; i++ {
		c.step(t)
	}
	return c.leader()
}

func (c *cluster) leader() uint64 {
	for id, n := range c.nodes {
		if n.IsLeader() && !c.cut[id] {
			return id
		}
	}
	return 0
}

// The election timer draws only from the injected Rand: the same seed gives
// the same elections, message for message.
func TestElectionsAreDeterministic(t *testing.T) {
	run := func(seed uint64) (string, uint64) {
		c := newCluster(t, seed)
		var trace string
		for i := 0; i < 60; i++ {
			trace += c.step(t)
		}
		return trace, c.leader()
	}
	for seed := uint64(1); seed <= 5; seed++ {
		a, la := run(seed)
		b, lb := run(seed)
		if a != b || la != lb {
			t.Fatalf("seed %d: two runs differ (leaders %d and %d)", seed, la, lb)
		}
		if la == 0 {
			t.Fatalf("seed %d: no leader after 60 ticks", seed)
		}
	}
}

// A leader cut off from the others is replaced; PreVote keeps the cut-off
// node from raising the term while it is alone.
func TestLeaderReplacedAndPreVote(t *testing.T) {
	c := newCluster(t, 7)
	old := c.elect(t)
	if old == 0 {
		t.Fatal("no leader")
	}
	c.cut[old] = true
	for i := 0; i < 100 && c.leader() == 0; i++ {
		c.step(t)
	}
	nl := c.leader()
	if nl == 0 || nl == old {
		t.Fatalf("no new leader after cutting off %d", old)
	}
	term := c.nodes[nl].Status().GetTerm()
	// Cut off a follower too: with PreVote, it campaigns without raising
	// its term, so it does not disrupt the leader when it comes back.
	var f uint64
	for id := range c.nodes {
		if id != nl && id != old {
			f = id
		}
	}
	c.cut[old] = false
	for i := 0; i < 10; i++ {
		c.step(t)
	}
	c.cut[f] = true
	before := c.nodes[f].Status().GetTerm()
	for i := 0; i < 200; i++ {
		c.step(t)
	}
	if got := c.nodes[f].Status().GetTerm(); got != before {
		t.Fatalf("cut-off follower raised its term from %d to %d despite PreVote", before, got)
	}
	c.cut[f] = false
	for i := 0; i < 20; i++ {
		c.step(t)
	}
	if c.leader() != nl || c.nodes[nl].Status().GetTerm() != term {
		t.Fatalf("leader %d (term %d) disrupted: now %d", nl, term, c.leader())
	}
}

// A follower that stops hearing from the leader while the other follower
// still does (here its link to the leader is down; on a loaded machine, its
// own loop too slow for the heartbeats) campaigns, and the other follower,
// in the leader's lease, ignores it: the leader stays. Without the lease
// the other follower granted the pre-vote and the vote, and a healthy
// leader was deposed.
func TestFollowerInLeaseIgnoresCampaign(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		c := newCluster(t, seed)
		lead := c.elect(t)
		if lead == 0 {
			t.Fatalf("seed %d: no leader", seed)
		}
		term := c.nodes[lead].Status().GetTerm()
		f := lead%3 + 1
		c.link[[2]uint64{lead, f}] = true
		for i := 0; i < 200; i++ {
			c.step(t)
		}
		if got := c.leader(); got != lead || c.nodes[lead].Status().GetTerm() != term {
			t.Fatalf("seed %d: leader %d (term %d) deposed by a campaign of %d, cut off from it only: leader %d, term %d",
				seed, lead, term, f, got, c.nodes[got].Status().GetTerm())
		}
		// Once the leader is gone for good, the lease runs out and the
		// others elect one of them.
		c.cut[lead] = true
		for i := 0; i < 200 && c.leader() == 0; i++ {
			c.step(t)
		}
		if got := c.leader(); got == 0 || got == lead {
			t.Fatalf("seed %d: no new leader after %d was cut off", seed, lead)
		}
	}
}

func TestConfigValidation(t *testing.T) {
	st := raft.NewMemoryStorage()
	r := rand.New(rand.NewPCG(1, 1))
	for _, cfg := range []Config{
		{Peers: []uint64{1}, Storage: st, Rand: r},
		{ID: 1, Peers: []uint64{1}, Rand: r},
		{ID: 1, Peers: []uint64{1}, Storage: st},
		{ID: 1, Peers: []uint64{1}, Storage: st, Rand: r, ElectionTicks: 3, HeartbeatTicks: 3},
		{ID: 1, Storage: st, Rand: r},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("config %+v accepted", cfg)
		}
	}
}

// Replicas bootstrap with the same configuration entries in the same order
// whatever order they are given the peers in (a caller may list them from a
// map), so that every log holds the same entries 1..n.
func TestBootstrapEntriesIndependentOfPeerOrder(t *testing.T) {
	var first []*raftpb.Entry
	for i, peers := range [][]uint64{{1, 2, 3}, {3, 1, 2}, {2, 3, 1}} {
		st := raft.NewMemoryStorage()
		n, err := New(Config{ID: uint64(i + 1), Peers: peers, Storage: st, Rand: rand.New(rand.NewPCG(1, 1))})
		if err != nil {
			t.Fatal(err)
		}
		ents := n.Ready().Entries
		if len(ents) != 3 {
			t.Fatalf("peers %v: %d bootstrap entries, want 3", peers, len(ents))
		}
		if first == nil {
			first = ents
			continue
		}
		for j := range ents {
			if ents[j].GetIndex() != first[j].GetIndex() || ents[j].GetTerm() != first[j].GetTerm() || !bytes.Equal(ents[j].GetData(), first[j].GetData()) {
				t.Errorf("peers %v: entry %d = %v, with peers [1 2 3] it was %v", peers, j+1, ents[j], first[j])
			}
		}
	}
}
