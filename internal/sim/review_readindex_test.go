package sim

import (
	"math/rand/v2"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/correctables/correctables/internal/replica"
	"github.com/correctables/correctables/internal/state"
)

// A strong read's ReadIndex request context is only a per-replica counter
// that restarts at 1 when the replica restarts. A ReadIndex answer to a
// request made before a crash can therefore be taken for the answer to a
// new read after the restart, and serve that read at an index older than a
// write that completed before the read began.
//
// Setup (3 replicas, leader L, follower F, other follower G): heartbeat
// acknowledgements from G are lost and appends to F are lost, so L keeps
// committing with G but cannot confirm reads. F issues a strong read (ctx 1)
// and crashes. A strong write then completes. F restarts and issues a new
// strong read (ctx 1 again); L's next heartbeat round, acknowledged by the
// restarted F, confirms the old request at its old index and answers F with
// ctx 1.
func TestReviewStaleReadIndexAfterRestart(t *testing.T) {
	var L, F, G uint64
	var wDone bool
	opt := Options{Seed: 3, Replicas: 3, Clients: 3, OpsPerClient: 1, Quiet: 5 * time.Second,
		StrongFraction: 1,
		Workload: func(r *rand.Rand, keys int) state.Op {
			return state.Op{Kind: state.OpPut, Key: "z", Value: []byte("z")}
		},
	}
	_ = wDone
	opt.Hook = func(c *Cluster) {
		c.At(time.Second, func() {
			L = c.Leader()
			if L == 0 {
				t.Fatal("no leader")
			}
			for _, n := range c.Nodes {
				if n.ID != L {
					if F == 0 {
						F = n.ID
					} else {
						G = n.ID
					}
				}
			}
			submitAt(t, c, L, 1, state.Op{Kind: state.OpPut, Key: "x", Value: []byte("old")}, true)
		})
		c.At(1500*time.Millisecond, func() {
			c.Filter = func(m replica.Message) bool {
				if m.Type != replica.MsgRaft {
					return false
				}
				switch {
				case m.From == G && m.To == L && m.Raft.GetType() == raftpb.MsgHeartbeatResp:
					return true
				case m.From == L && m.To == F && (m.Raft.GetType() == raftpb.MsgApp || m.Raft.GetType() == raftpb.MsgSnap):
					return true
				}
				return false
			}
			submitAt(t, c, F, 2, state.Op{Kind: state.OpGet, Key: "x"}, true)
			c.Crash(F)
		})
		c.At(1600*time.Millisecond, func() {
			submitAt(t, c, L, 1, state.Op{Kind: state.OpPut, Key: "x", Value: []byte("new")}, true)
		})
		c.At(2200*time.Millisecond, func() {
			c.Restart(F)
			submitAt(t, c, F, 3, state.Op{Kind: state.OpGet, Key: "x"}, true)
		})
		c.At(3000*time.Millisecond, func() { c.Filter = nil })
	}
	res := Run(opt)
	for _, r := range res.Records {
		if r.Op.Key == "x" {
			t.Logf("client %d %v %q: %+v", r.Client, r.Op.Kind, r.Op.Value, r.Views)
		}
	}
	if res.Err != nil {
		t.Fatal(res.Err)
	}
}
