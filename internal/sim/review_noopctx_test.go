package sim

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/correctables/correctables/internal/replica"
	"github.com/correctables/correctables/internal/state"
)

// After a restart, a pending strong operation is proposed only once its
// replica holds its causal context again (propose checks vv.Covers(Ctx)).
// The periodic no-op does not check: it proposes every tentative operation
// it holds, the strong one included, without the context operations the
// crash lost. The strong operation then commits before an operation of its
// causal context.
func TestReviewNoopCommitsStrongBeforeItsContext(t *testing.T) {
	var L, A, B uint64
	var c *Cluster
	opt := Options{Seed: 5, Replicas: 3, Clients: 1, OpsPerClient: 1, Quiet: 5 * time.Second,
		Workload: func(r *rand.Rand, keys int) state.Op {
			return state.Op{Kind: state.OpPut, Key: "z", Value: []byte("z")}
		},
	}
	opt.Hook = func(cl *Cluster) {
		c = cl
		c.At(time.Second, func() {
			L = c.Leader()
			for _, n := range c.Nodes {
				if n.ID != L {
					if A == 0 {
						A = n.ID
					} else {
						B = n.ID
					}
				}
			}
			// B's operations reach A by gossip only; nobody proposes them.
			c.Filter = func(m replica.Message) bool {
				if m.Type == replica.MsgRaft && m.Raft.GetType() == raftpb.MsgProp && (m.From == A || m.From == B) {
					return true
				}
				return m.To == L && m.Type != replica.MsgRaft
			}
			submitAt(t, c, B, 1, state.Op{Kind: state.OpPut, Key: "k", Value: []byte("ctx")}, false)
		})
		c.At(1200*time.Millisecond, func() {
			if q, ok := c.Node(A).Rep.Op(replica.OpID{Origin: B, Seq: 1}); !ok || q == nil {
				t.Fatalf("A did not receive B's operation")
			}
			submitAt(t, c, A, 1, state.Op{Kind: state.OpAppend, Key: "k", Value: []byte("+s")}, true)
			c.Crash(A)
			c.Filter = nil
			c.Partition([]uint64{B})
		})
		c.At(1400*time.Millisecond, func() { c.Restart(A) })
		c.At(2500*time.Millisecond, func() { c.HealAll() })
	}
	var err error
	c, err = New(opt)
	if err != nil {
		t.Fatal(err)
	}
	res := c.Run()
	t.Logf("L=%d A=%d B=%d committed %v", L, A, B, c.Node(L).Rep.Committed())
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	ref := c.Node(L).Rep
	committed := ref.Committed()
	for i, id := range committed {
		q, _ := ref.Op(id)
		if !q.Strong {
			continue
		}
		for o, s := range q.Ctx {
			for seq := uint64(1); seq <= s; seq++ {
				j := slices.Index(committed, replica.OpID{Origin: o, Seq: seq})
				if j > i {
					t.Errorf("strong %v committed at %d before %d.%d of its causal context (at %d); committed %v", id, i, o, seq, j, committed)
				}
			}
		}
	}
}
