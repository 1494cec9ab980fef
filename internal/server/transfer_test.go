package server

import (
	"context"
	"testing"
	"time"

	"github.com/correctables/correctables/api"
)

// waitLeader waits until every server names the same leader.
func waitLeader(ctx context.Context, t *testing.T, servers []*Server) uint64 {
	t.Helper()
	for {
		var lead uint64
		agree := true
		for _, s := range servers {
			l, err := s.Leader(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if l == 0 || (lead != 0 && l != lead) {
				agree = false
			}
			lead = l
		}
		if agree {
			return lead
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no leader: %v", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// A leadership transfer to a stopped replica (`up --wan` moves leadership
// to the replica nearest the client, which may be down) used to block every
// proposal for ever: raft drops proposals while a transfer is pending, and
// the transfer was never given up (internal/consensus disables raft's
// election timer, which is what gives it up). The leader now abandons it
// after ElectionTicks and the strong put commits.
func TestTransferToStoppedReplicaDoesNotBlockProposals(t *testing.T) {
	servers := startCluster(t, 3, func(uint64) Storage { return reviewMem() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lead := waitLeader(ctx, t, servers)
	c := dial(t, servers[lead-1].ClientAddr())
	if _, err := invoke(ctx, c, &api.InvokeRequest{Op: put("warm", "up"), Final: true, Strong: true}); err != nil {
		t.Fatal(err)
	}
	down := lead%3 + 1
	if err := servers[down-1].Stop(); err != nil {
		t.Fatal(err)
	}
	if err := servers[lead-1].TransferLeadership(ctx, down); err != nil {
		t.Fatal(err)
	}
	if _, err := invoke(ctx, c, &api.InvokeRequest{Op: put("k", "v"), Final: true, Strong: true}); err != nil {
		t.Fatalf("strong put after a transfer to stopped replica %d: %v", down, err)
	}
}
