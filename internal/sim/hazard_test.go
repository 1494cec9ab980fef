package sim

import (
	"slices"
	"testing"
	"time"

	"github.com/correctables/correctables/internal/replica"
	"github.com/correctables/correctables/internal/state"
)

// submitAt submits a request directly at a node, bypassing the simulated
// clients, and records it like a client call.
func submitAt(t *testing.T, c *Cluster, node uint64, client uint64, op state.Op, strong bool) {
	t.Helper()
	n := c.Node(node)
	cl := c.clients[client-1]
	cl.seq++
	err := n.Rep.Submit(replica.ClientRequest{Client: cl.id, Seq: cl.seq, Op: op, Strong: strong, Want: replica.WantTentative | replica.WantStable})
	if err != nil {
		t.Fatalf("submit at %d: %v", node, err)
	}
	h := c.rec.Invoke(int(cl.id), op, strong)
	cl.handles[cl.seq] = h
	c.calls = append(c.calls, &call{seq: cl.seq, node: node, crashes: n.crashes, strong: strong, h: h})
	c.pump(n)
}

// follower returns a node that is up and not the leader.
func follower(c *Cluster) uint64 {
	for _, n := range c.Nodes {
		if n.Rep != nil && !n.Rep.IsLeader() {
			return n.ID
		}
	}
	return 0
}

// Creek §3.3 and docs/design.md, "Strong operations and CAB": the origin of a strong operation crashes right
// after proposing it, while a weak operation of its causal context exists
// only there (its gossip never left). With Creek's plain CAB, every replica
// would wait forever in checkDep for that weak operation. Here the entry
// carries the context, so the others commit both without the origin.
func TestHazardOriginCrashesAfterProposing(t *testing.T) {
	var origin uint64
	var committedWithoutOrigin bool
	opt := Options{Seed: 7, Replicas: 3, Clients: 1, OpsPerClient: 1, Quiet: 5 * time.Second}
	opt.Hook = func(c *Cluster) {
		c.At(1*time.Second, func() {
			if c.Leader() == 0 {
				t.Fatal("no leader after 1s")
			}
			origin = follower(c)
			// Gossip from the origin is lost; raft messages still flow.
			c.Filter = func(m replica.Message) bool { return m.From == origin && m.Type != replica.MsgRaft }
			submitAt(t, c, origin, 1, state.Op{Kind: state.OpPut, Key: "ctx", Value: []byte("only-at-origin")}, false)
			submitAt(t, c, origin, 1, state.Op{Kind: state.OpPut, Key: "s", Value: []byte("strong")}, true)
			// The proposal is on its way to the leader; the origin dies
			// before anything else leaves it.
			c.Crash(origin)
		})
		c.At(3*time.Second, func() {
			// Two seconds later, still without the origin: the others must
			// have committed the weak op and the strong op after it.
			for _, n := range c.Nodes {
				if n.ID == origin {
					continue
				}
				got := n.Rep.Committed()
				w := slices.Index(got, replica.OpID{Origin: origin, Seq: 1})
				s := slices.Index(got, replica.OpID{Origin: origin, Seq: 2})
				if w < 0 || s < 0 || w > s {
					t.Errorf("replica %d committed %v: want %d.1 then %d.2 without their origin", n.ID, got, origin, origin)
					return
				}
			}
			committedWithoutOrigin = true
			c.Filter = nil
			c.Restart(origin)
		})
	}
	res := Run(opt)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if !committedWithoutOrigin {
		t.Fatal("the check at 3s did not run")
	}
}

// A leader change in the middle of a commit: strong operations are proposed
// at a follower, and the leader is cut off from everyone right after it
// received them, before it could commit them. A new leader is elected; every
// operation gets exactly one stable view (checked by Run's checks:
// final views delivered, one final per record, linearizability).
func TestHazardLeaderChangeMidCommit(t *testing.T) {
	t.Parallel()
	for seed := uint64(1); seed <= 20; seed++ {
		var oldLeader, newLeader uint64
		opt := Options{Seed: seed, Replicas: 3 + 2*int(seed%2), Clients: 2, OpsPerClient: 5, Quiet: 6 * time.Second}
		opt.Hook = func(c *Cluster) {
			c.At(time.Second, func() {
				oldLeader = c.Leader()
				if oldLeader == 0 {
					t.Fatalf("seed %d: no leader after 1s", seed)
				}
				f := follower(c)
				for i := 0; i < 3; i++ {
					submitAt(t, c, f, 1, state.Op{Kind: state.OpIncr, Key: "n", Delta: 1}, true)
				}
				// Cut the leader off once the proposals reached it (one link
				// delay), before the acknowledgements come back.
				c.At(c.linkDelay(f, oldLeader)+time.Microsecond, func() { c.Partition([]uint64{oldLeader}) })
			})
			c.At(2500*time.Millisecond, func() {
				for _, n := range c.Nodes {
					if n.Rep != nil && n.Rep.IsLeader() && n.ID != oldLeader {
						newLeader = n.ID
					}
				}
				c.HealAll()
			})
		}
		res := Run(opt)
		if res.Err != nil {
			t.Fatalf("seed %d: %v", seed, res.Err)
		}
		if newLeader == 0 {
			t.Fatalf("seed %d: no new leader was elected while %d was cut off", seed, oldLeader)
		}
		// The three increments took effect exactly once each.
		var incrs int
		for _, r := range res.Records {
			if r.Op.Kind == state.OpIncr && r.Op.Key == "n" {
				incrs++
			}
		}
		if incrs < 3 {
			t.Fatalf("seed %d: recorded %d increments of n", seed, incrs)
		}
	}
}

// Clocks ±100 ms apart (docs/design.md, "Clocks": the hybrid logical clock bounds the
// damage; the order stays correct, only rollbacks grow). Every check holds.
func TestHazardClockSkew(t *testing.T) {
	t.Parallel()
	var skewed, straight replica.Stats
	for seed := uint64(1); seed <= 30; seed++ {
		for _, skew := range []time.Duration{0, 100 * time.Millisecond} {
			opt := Options{Seed: seed, Replicas: 3, Clients: 6, OpsPerClient: 10, Keys: 2}
			opt.Hook = func(c *Cluster) {
				// Extremes on purpose: one replica 100 ms ahead, one behind.
				c.Nodes[0].skew = int64(skew)
				c.Nodes[1].skew = -int64(skew)
			}
			res := Run(opt)
			if res.Err != nil {
				t.Fatalf("seed %d skew %v: %v", seed, skew, res.Err)
			}
			s := &straight
			if skew > 0 {
				s = &skewed
			}
			s.Executions += res.Stats.Executions
			s.Rollbacks += res.Stats.Rollbacks
		}
	}
	t.Logf("rollbacks: %d without skew, %d with ±100ms skew (executions %d, %d)",
		straight.Rollbacks, skewed.Rollbacks, straight.Executions, skewed.Executions)
}
