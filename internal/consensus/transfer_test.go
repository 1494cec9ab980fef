package consensus

import (
	"bytes"
	"testing"

	"go.etcd.io/raft/v3"
)

// electLeader steps the cluster until it has a leader and every node knows
// it, and returns the leader.
func (c *cluster) electLeader(t *testing.T) uint64 {
	t.Helper()
	for i := 0; i < 200; i++ {
		c.step(t)
		if l := c.leader(); l != 0 && c.agree(l) {
			return l
		}
	}
	t.Fatal("no leader after 200 ticks")
	return 0
}

// agree reports whether every node not cut off follows lead.
func (c *cluster) agree(lead uint64) bool {
	for id, n := range c.nodes {
		if !c.cut[id] && n.Status().Lead != lead {
			return false
		}
	}
	return true
}

// committed reports whether node id's log holds data in a committed entry.
func (c *cluster) committed(t *testing.T, id uint64, data []byte) bool {
	t.Helper()
	st := c.storage[id]
	first, err := st.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	commit := c.nodes[id].Status().GetCommit()
	if commit < first {
		return false
	}
	ents, err := st.Entries(first, commit+1, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if bytes.Equal(e.GetData(), data) {
			return true
		}
	}
	return false
}

// proposeUntilCommitted proposes data at the leader every tick (a dropped
// proposal is retried, as the replica does) and returns the ticks it took
// to commit, or fails after limit ticks.
func (c *cluster) proposeUntilCommitted(t *testing.T, lead uint64, data []byte, limit int) int {
	t.Helper()
	var lastErr error
	for ticks := 1; ticks <= limit; ticks++ {
		if lastErr = c.nodes[lead].Propose(data); lastErr == nil {
			c.step(t)
			if c.committed(t, lead, data) {
				return ticks
			}
			continue
		}
		c.step(t)
	}
	st := c.nodes[lead].Status()
	t.Fatalf("proposal not committed in %d ticks (leader %d is %s, transfer to %d pending; last Propose: %v)",
		limit, lead, st.RaftState, st.LeadTransferee, lastErr)
	return 0
}

// A leadership transfer to a crashed follower never completes. raft gives
// up a transfer after an election timeout of ticks, but Node disables
// raft's election timer (ElectionTick 1<<30), so the leader kept the
// transfer pending, and dropped every proposal, for ever. Node now
// abandons it after ElectionTicks ticks: proposals commit again within a
// bounded number of ticks (counted, not timed).
func TestTransferToCrashedFollowerIsAbandoned(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		c := newCluster(t, seed)
		lead := c.electLeader(t)
		c.proposeUntilCommitted(t, lead, []byte("before"), 10)
		var dead uint64
		for id := uint64(1); id <= 3; id++ {
			if id != lead {
				dead = id
				break
			}
		}
		c.cut[dead] = true // crashed: everything to and from it is lost
		c.nodes[lead].TransferLeadership(dead)
		if got := c.nodes[lead].Status().LeadTransferee; got != dead {
			t.Fatalf("seed %d: transfer to %d not pending (LeadTransferee %d)", seed, dead, got)
		}
		if err := c.nodes[lead].Propose([]byte("dropped")); err != raft.ErrProposalDropped {
			t.Fatalf("seed %d: proposal during the transfer: %v, want it dropped", seed, err)
		}
		electionTicks := c.nodes[lead].cfg.ElectionTicks
		ticks := c.proposeUntilCommitted(t, lead, []byte("after"), 2*electionTicks+2)
		if !c.nodes[lead].IsLeader() {
			t.Fatalf("seed %d: %d lost leadership", seed, lead)
		}
		if got := c.nodes[lead].Status().LeadTransferee; got != 0 {
			t.Fatalf("seed %d: transfer to %d still pending", seed, got)
		}
		t.Logf("seed %d: committed %d ticks after the transfer to crashed %d", seed, ticks, dead)
	}
}

// A transfer to a live follower still completes (abandoning is only for a
// transfer that outlives ElectionTicks), and one requested again after an
// abandoned one is given its own ElectionTicks.
func TestTransferToLiveFollowerCompletes(t *testing.T) {
	c := newCluster(t, 3)
	lead := c.electLeader(t)
	c.proposeUntilCommitted(t, lead, []byte("x"), 10)
	var to uint64
	for id := uint64(1); id <= 3; id++ {
		if id != lead {
			to = id
		}
	}
	// First abandoned while it is cut off, then asked again once it is back.
	c.cut[to] = true
	c.nodes[lead].TransferLeadership(to)
	electionTicks := c.nodes[lead].cfg.ElectionTicks
	for range electionTicks {
		c.step(t)
	}
	if got := c.nodes[lead].Status().LeadTransferee; got != 0 {
		t.Fatalf("transfer to cut-off %d still pending after %d ticks", got, electionTicks)
	}
	c.cut[to] = false
	c.step(t)
	c.nodes[lead].TransferLeadership(to)
	for i := 0; i < electionTicks && c.leader() != to; i++ {
		c.step(t)
	}
	if l := c.leader(); l != to {
		t.Fatalf("leader %d after transfer to live %d", l, to)
	}
}
