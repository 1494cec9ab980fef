package client_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/correctable"
	"github.com/correctables/correctables/internal/cluster"
)

// TestSessionAcrossReplicasE2E runs a session on a real three-replica
// cluster, moving between replicas while every message to replica 3 is
// delayed: views that claim read-my-writes or monotonic reads must return
// the session's latest write, and the lagging replica's views must not
// claim them until it has caught up.
func TestSessionAcrossReplicasE2E(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := cluster.Start(cluster.Options{
		Dir: t.TempDir(), NoSync: true, Logger: slog.New(slog.DiscardHandler),
		ReplicationDelay: map[uint64]time.Duration{3: 0},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Stop()
	if err := cl.MoveLeader(ctx, 1); err != nil {
		t.Fatal(err)
	}
	// One client per replica: the session moves between them.
	clients := make([]*client.Client, 3)
	for i, ep := range cl.Endpoints {
		c, err := client.Dial(ctx, []string{ep})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients[i] = c
	}
	const delay = 1500 * time.Millisecond
	if err := cl.SetReplicationDelay(3, delay); err != nil {
		t.Fatal(err)
	}
	s := client.NewSession()
	// lastRead is the value the session last read of "k", per guarantee
	// claimed; written the one it last wrote.
	written, lastSeen := "", ""
	var laggingRefused, laggingClaimed, claims int
	read := func(replica int) {
		t.Helper()
		v, err := clients[replica-1].InvokeSession(ctx, s, client.Get("k"), correctable.Eventual).Final(ctx)
		if err != nil {
			t.Fatal(err)
		}
		g, ok := client.GuaranteesOf(v)
		if !ok {
			t.Fatal("a session view without guarantees")
		}
		got := string(v.Value.Value)
		if g.ReadMyWrites {
			claims++
			if got != written {
				t.Fatalf("replica %d claims read-my-writes with %q, the session wrote %q last", replica, got, written)
			}
		}
		if g.MonotonicReads && got < lastSeen {
			t.Fatalf("replica %d claims monotonic reads with %q after the session read %q", replica, got, lastSeen)
		}
		if replica == 3 {
			if g.ReadMyWrites {
				laggingClaimed++
			} else {
				laggingRefused++
			}
		}
		if got > lastSeen {
			lastSeen = got
		}
	}
	for i := range 8 {
		written = fmt.Sprintf("v%03d", i)
		// A strong put at replica 1: committed by replicas 1 and 2, while
		// replica 3 receives it late.
		if _, err := clients[0].InvokeSession(ctx, s, client.Put("k", []byte(written))).Final(ctx); err != nil {
			t.Fatal(err)
		}
		read(3) // lagging: must not claim the write it lacks
		read(2)
		read(3) // and must not claim monotonic reads after replica 2's
		read(1)
	}
	if laggingRefused == 0 {
		t.Fatalf("the delayed replica never lagged (claimed read-my-writes %d times)", laggingClaimed)
	}
	if claims == 0 {
		t.Fatal("no view claimed read-my-writes")
	}
	// Once the delay is gone and the replica caught up, it claims them.
	if err := cl.SetReplicationDelay(3, 0); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		before := laggingClaimed
		read(3)
		if laggingClaimed > before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("replica 3 never caught up with the session")
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("lagging replica: refused read-my-writes %d times, claimed %d; %d claims checked", laggingRefused, laggingClaimed, claims)
}
