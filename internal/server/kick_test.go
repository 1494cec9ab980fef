package server

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/correctables/correctables/internal/replica"
)

// A replica that restarts opens its streams to the others at once, and
// each of them then dials it again at once, whatever its links' backoff:
// here both waits between dials (gRPC's connection backoff and the wait
// between two streams) are an hour, so the restarted follower hears from
// no one, and catches up on nothing, unless the stream it opened kicks the
// link back. Before, with the default waits of up to a second each, a
// replica down for a while was heard from by its leader one to two seconds
// after it came back, and a restarted leader stayed fenced that long.
func TestRestartedPeerIsDialledAtOnce(t *testing.T) {
	first, max, connect := streamRetryFirst, streamRetryMax, peerConnect
	t.Cleanup(func() { streamRetryFirst, streamRetryMax, peerConnect = first, max, connect })
	streamRetryFirst, streamRetryMax = time.Hour, time.Hour
	peerConnect = grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: time.Hour, Multiplier: 1, MaxDelay: time.Hour},
		MinConnectTimeout: 20 * time.Second,
	}

	pc := startPebbleCluster(t, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	strongPutUntilFinal(ctx, t, dial(t, pc.peers[1]), time.Second)
	lead := pc.leader(ctx, t)
	f := lead%3 + 1
	pc.stop(f)
	// The others' links to f fail (heartbeats go to it every tick) and
	// wait an hour; meanwhile the cluster commits without it.
	c := dial(t, pc.peers[lead])
	for range 20 {
		strongPutUntilFinal(ctx, t, c, time.Second)
	}
	time.Sleep(500 * time.Millisecond)
	var commit uint64
	if err := pc.servers[lead].exec(ctx, func(r *replica.Replica) { _, commit, _ = r.Progress() }); err != nil {
		t.Fatal(err)
	}

	pc.servers[f] = startOnPebble(t, pc.dir, pc.peers, f, true, nil)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var applied uint64
		if err := pc.servers[f].exec(ctx, func(r *replica.Replica) { applied, _, _ = r.Progress() }); err != nil {
			t.Fatal(err)
		}
		if applied >= commit {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("restarted replica %d applied %d of the %d entries its leader %d had committed, 30 s after it started: no one dialled it again", f, applied, commit, lead)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
