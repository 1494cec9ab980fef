package consensus

import (
	"fmt"
	"testing"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// laggedDelivery runs the cluster one tick at a time, like cluster.step,
// but what the leader sends to slow reaches it lag ticks later, in order:
// a follower whose loop is busy (a restart's catch-up, a loaded machine)
// takes its messages late, while its replies, once it sends them, are
// prompt. The first drop appends with entries to slow are lost. It
// returns the bytes of entries the leader put in appends to slow, the most
// of them in one Ready, and whether slow caught up with the leader's log
// within ticks.
func laggedDelivery(t *testing.T, c *cluster, lead, slow uint64, lag, drop, ticks int) (sent, maxReady int, caughtUp bool) {
	type delayed struct {
		at int
		m  *raftpb.Message
	}
	var queue []delayed
	for now := 0; now < ticks; now++ {
		for id := uint64(1); id <= 3; id++ {
			c.nodes[id].Tick()
		}
		for len(queue) > 0 && queue[0].at <= now {
			_ = c.nodes[slow].Step(queue[0].m)
			queue = queue[1:]
		}
		for moved := true; moved; {
			moved = false
			for id := uint64(1); id <= 3; id++ {
				n := c.nodes[id]
				for n.HasReady() {
					rd := n.Ready()
					inReady := 0
					if rd.HardState != nil && !raft.IsEmptyHardState(rd.HardState) {
						c.storage[id].SetHardState(rd.HardState)
					}
					c.storage[id].Append(rd.Entries)
					for _, m := range rd.Messages {
						if m.GetTo() == slow {
							if m.GetType() == raftpb.MsgApp && len(m.GetEntries()) > 0 {
								for _, e := range m.GetEntries() {
									sent += proto.Size(e)
									inReady += proto.Size(e)
								}
								maxReady = max(maxReady, inReady)
								if drop > 0 {
									drop--
									continue
								}
							}
							queue = append(queue, delayed{now + lag, m})
							continue
						}
						_ = c.nodes[m.GetTo()].Step(m)
						moved = true
					}
					n.Advance(rd)
				}
			}
		}
		ll, _ := c.storage[lead].LastIndex()
		sl, _ := c.storage[slow].LastIndex()
		if sl == ll {
			return sent, maxReady, true
		}
	}
	return sent, maxReady, false
}

// A follower that is behind and slow to take its messages is sent the
// entries it lacks about once, not once per heartbeat. raft's leader
// resends a probing follower an append of up to MaxSizePerMsg on every
// heartbeat reply; with a heartbeat every 30 ms (a server's default) and a
// follower whose loop lags a second behind its inbox, that was thirty
// copies of a megabyte, which the follower had to decode (slowing it
// further) and the leader to read from its log and encode: a restarted
// replica of the kill soak (TestSoakLeaderKills) took updates again only
// after 20 s, with loop rounds of seconds on it and its leader. Here the
// heartbeat is every tick, the follower lags 0-200 ticks, and the first
// appends with entries to it may be lost.
func TestProbeSendsEntriesOnce(t *testing.T) {
	for _, tc := range []struct{ lag, drop int }{{0, 0}, {5, 0}, {50, 0}, {200, 0}, {50, 1}, {50, 3}} {
		t.Run(fmt.Sprintf("lag=%d/drop=%d", tc.lag, tc.drop), func(t *testing.T) {
			sent, _, missing, ok := probeCatchUp(t, 4000, tc.lag, tc.drop)
			if !ok {
				t.Fatalf("the slow follower did not catch up within 3000 ticks (sent %d bytes of entries)", sent)
			}
			t.Logf("%d bytes of entries missing, %d sent", missing, sent)
			// Lost appends are sent again; each copy counts.
			if sent > (2+tc.drop)*missing {
				t.Errorf("the leader sent %d bytes of entries to a follower missing %d: more than %d times what it lacked",
					sent, missing, 2+tc.drop)
			}
		})
	}
}

// probeCatchUp cuts a follower off while the leader appends entries of
// 1,000 bytes, then lets it catch up through laggedDelivery.
func probeCatchUp(t *testing.T, entries, lag, drop int) (sent, maxReady, missing int, ok bool) {
	c := newCluster(t, 3)
	lead := c.elect(t)
	if lead == 0 {
		t.Fatal("no leader")
	}
	slow := lead%3 + 1
	c.cut[slow] = true
	value := make([]byte, 1000)
	for i := range entries {
		if err := c.nodes[lead].Propose(value); err != nil {
			t.Fatalf("proposal %d: %v", i, err)
		}
		if i%100 == 0 {
			c.step(t)
		}
	}
	c.step(t)
	c.cut[slow] = false
	first, _ := c.storage[slow].LastIndex()
	last, _ := c.storage[lead].LastIndex()
	ents, err := c.storage[lead].Entries(first+1, last+1, 1<<62)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		missing += proto.Size(e)
	}
	sent, maxReady, ok = laggedDelivery(t, c, lead, slow, lag, drop, 3000)
	return sent, maxReady, missing, ok
}

// A leader brings a follower that lacks 20 MB up a few megabytes a round
// trip (MaxInflightBytes), not all at once: what it reads from its log and
// encodes in one Ready, on its loop, is bounded whatever the follower lacks
// (all 20 MB in one Ready without the bound). One Ready may send what is
// in flight (the window, overshot by at most one message) and again what
// the replies it handled acknowledged: twice the window at most.
func TestCatchUpBoundedPerReady(t *testing.T) {
	sent, maxReady, missing, ok := probeCatchUp(t, 20000, 5, 0)
	if !ok {
		t.Fatalf("the follower did not catch up within 3000 ticks (sent %d bytes of entries)", sent)
	}
	t.Logf("%d bytes of entries missing, %d sent, at most %d in one Ready", missing, sent, maxReady)
	if limit := 2 * (4<<20 + 1<<20); maxReady > limit {
		t.Errorf("the leader put %d bytes of entries to one follower in one Ready, more than twice MaxInflightBytes and one message (%d)", maxReady, limit)
	}
}

// A probe the transport could not send (ReportUnreachable) is not a copy
// on its way: the next probe to that follower carries its entries, where a
// repeat of one that may still arrive goes without them (stripProbes).
func TestUnreachableFollowerGetsEntriesAgain(t *testing.T) {
	c := newCluster(t, 3)
	lead := c.elect(t)
	if lead == 0 {
		t.Fatal("no leader")
	}
	slow := lead%3 + 1
	n := c.nodes[lead]
	n.ReportUnreachable(slow) // raft probes it
	if err := n.Propose([]byte("x")); err != nil {
		t.Fatal(err)
	}
	// probe handles one Ready of the leader, returning how many entries its
	// appends to slow carried (-1: no append to slow), and then an answer
	// to a heartbeat from slow, which makes raft send its probe again.
	term := n.Status().GetTerm()
	probe := func() int {
		rd := n.Ready()
		c.storage[lead].Append(rd.Entries)
		got := -1
		for _, m := range rd.Messages {
			if m.GetType() == raftpb.MsgApp && m.GetTo() == slow {
				got = max(got, len(m.GetEntries()))
			}
		}
		n.Advance(rd)
		hb := raftpb.MessageType_MsgHeartbeatResp
		if err := n.Step(&raftpb.Message{Type: &hb, From: &slow, To: &lead, Term: &term}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := probe(); got <= 0 {
		t.Fatalf("first probe to %d: %d entries, want some", slow, got)
	}
	if got := probe(); got != 0 {
		t.Fatalf("the probe again, the first maybe on its way: %d entries, want 0", got)
	}
	n.ReportUnreachable(slow)
	if got := probe(); got <= 0 {
		t.Fatalf("the probe after the transport reported %d unreachable: %d entries, want them all again", slow, got)
	}
}
