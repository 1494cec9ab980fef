package replica

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/correctables/correctables/internal/state"
)

// trio is three replicas on raft.MemoryStorage driven by hand; messages
// wait in q until deliver hands them over.
type trio struct {
	t      *testing.T
	r      map[uint64]*Replica
	stor   map[uint64]*raft.MemoryStorage
	q      []Message
	stable map[uint64]int // final views delivered, by replica
}

func newTrio(t *testing.T, tweak func(*Config)) *trio {
	tr := &trio{t: t, r: map[uint64]*Replica{}, stor: map[uint64]*raft.MemoryStorage{}, stable: map[uint64]int{}}
	for id := uint64(1); id <= 3; id++ {
		st := raft.NewMemoryStorage()
		cfg := Config{ID: id, Peers: []uint64{1, 2, 3}, Storage: st, Clock: func() int64 { return 1e12 },
			Rand: rand.New(rand.NewPCG(id, id)), SnapshotEntries: -1}
		if tweak != nil {
			tweak(&cfg)
		}
		r, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		tr.r[id], tr.stor[id] = r, st
	}
	return tr
}

// drive handles replica id's Readies as the driver does and returns false
// if HasReady still holds after 100 of them: a Ready that leaves HasReady
// true without new input is one the driver would loop on for ever.
func (tr *trio) drive(id uint64) bool {
	tr.t.Helper()
	r, st := tr.r[id], tr.stor[id]
	for i := 0; r.HasReady(); i++ {
		if i == 100 {
			return false
		}
		rd, err := r.Ready()
		if err != nil {
			tr.t.Fatal(err)
		}
		if rd.HardState != nil && !raft.IsEmptyHardState(rd.HardState) {
			if err := st.SetHardState(proto.Clone(rd.HardState).(*raftpb.HardState)); err != nil {
				tr.t.Fatal(err)
			}
		}
		if err := st.Append(rd.Entries); err != nil {
			tr.t.Fatal(err)
		}
		tr.q = append(tr.q, rd.Early...)
		tr.q = append(tr.q, rd.Messages...)
		for _, v := range rd.Views {
			if v.Stable {
				tr.stable[id]++
			}
		}
		r.Advance(rd)
	}
	return true
}

func (tr *trio) mustDrive(id uint64) {
	tr.t.Helper()
	if !tr.drive(id) {
		tr.t.Fatalf("replica %d: HasReady still true after 100 Readies without input (leader %d)", id, tr.r[id].Leader())
	}
}

// deliver hands every queued message over, and what they cause, until the
// queue is empty.
func (tr *trio) deliver() {
	tr.t.Helper()
	for len(tr.q) > 0 {
		m := tr.q[0]
		tr.q = tr.q[1:]
		_ = tr.r[m.To].Step(m)
		tr.mustDrive(m.To)
	}
}

// ops returns replica origin's own operations 1..n.
func (tr *trio) ops(origin uint64, n int) []*Req {
	tr.t.Helper()
	var ops []*Req
	for s := uint64(1); s <= uint64(n); s++ {
		q, ok := tr.r[origin].Op(OpID{origin, s})
		if !ok {
			tr.t.Fatalf("replica %d does not hold its operation %d", origin, s)
		}
		ops = append(ops, q)
	}
	return ops
}

// elect ticks until every replica knows a leader.
func (tr *trio) elect() {
	tr.t.Helper()
	for i := 0; tr.r[1].Leader() == 0 || tr.r[2].Leader() == 0 || tr.r[3].Leader() == 0; i++ {
		if i > 1000 {
			tr.t.Fatal("no leader after 1000 ticks")
		}
		tr.tick()
	}
}

// tick ticks every replica and delivers what follows.
func (tr *trio) tick() {
	tr.t.Helper()
	for id := uint64(1); id <= 3; id++ {
		tr.r[id].Tick()
		tr.mustDrive(id)
	}
	tr.deliver()
}

// A follower holding a batch (NoopBatch or more) of its own strong
// operations that are not committed, and that loses its leader, used to
// answer HasReady true for ever while Ready had nothing: losing the leader
// resets what it has proposed, the batch looked due, but proposeOwn stops
// at the first own strong operation. The driver, which handles Readies
// while HasReady holds, then never returned to the server's loop: the
// replica took no tick, no peer message, no client request (new clients
// could not connect) and no Stop. This is how a replica stopped answering
// under the open-loop overload of the evaluation benches.
//
// The retry and no-op periods are set long so that neither happens to
// re-propose the batch in the tick that loses the leader (with the
// server's defaults, 50 and 5 ticks, that hid the spin in some runs, never
// when the leader was lost through a peer's message).
func TestFollowerLosingLeaderWithStrongBatchDrains(t *testing.T) {
	tr := newTrio(t, func(c *Config) { c.RetryTicks, c.NoopTicks = 10_000, 10_000 })
	tr.elect()
	lead := tr.r[1].Leader()
	f := lead%3 + 1
	n := 2 * tr.r[f].cfg.NoopBatch
	for i := range n {
		if err := tr.r[f].Submit(ClientRequest{Client: 1, Seq: uint64(i + 1), Strong: true, Want: WantTentative | WantStable,
			Op: state.Op{Kind: state.OpPut, Key: fmt.Sprint("k", i), Value: []byte("v")}}); err != nil {
			t.Fatal(err)
		}
		tr.mustDrive(f)
	}
	// The follower is cut off: what it sends is lost, it hears nothing,
	// and its election timeout makes it forget its leader.
	tr.q = nil
	for i := 0; tr.r[f].Leader() != 0; i++ {
		if i > 1000 {
			t.Fatalf("replica %d still follows %d after 1000 ticks alone", f, tr.r[f].Leader())
		}
		tr.r[f].Tick()
		tr.mustDrive(f)
		tr.q = nil
	}
	// Healed: a leader is found again and the batch commits.
	for i := 0; tr.stable[f] < n; i++ {
		if i > 5000 {
			t.Fatalf("%d of %d strong puts at replica %d committed after 5000 ticks", tr.stable[f], n, f)
		}
		tr.tick()
	}
}
