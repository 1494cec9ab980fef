package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/correctables/correctables/api"
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

// A link to a peer that is down queues nothing past peerDownGrace, and
// what it had queued goes: here the leader is killed and the others go on
// under weak and strong puts, then it restarts, fenced (replica/fence.go)
// until it applies an entry of the new leader's term. Before, the links to
// it held everything sent to it while it was down (each heartbeat, the
// probe, the gossip of every weak put: hundreds of messages a second, up to
// PeerQueue); on its return it answered the stale heartbeats, each answer
// made the new leader send its probe again, and the appends that would
// lift its fence were dropped while the queue was full: it stayed fenced
// 0.4-4 s in the kill soak.
func TestDownPeerQueuesNothing(t *testing.T) {
	pc := startPebbleCluster(t, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	strongPutUntilFinal(ctx, t, dial(t, pc.peers[1]), time.Second)
	old := pc.leader(ctx, t)
	pc.stop(old)
	other := old%3 + 1
	c := dial(t, pc.peers[other])
	strongPutUntilFinal(ctx, t, c, time.Second) // a new leader
	for end := time.Now().Add(peerDownGrace + time.Second); time.Now().Before(end); {
		for i := range 20 {
			if _, err := invoke(ctx, c, &api.InvokeRequest{Op: put(fmt.Sprint("k", i), "v"), Preliminary: true}); err != nil {
				t.Fatal(err)
			}
		}
		strongPutUntilFinal(ctx, t, c, time.Second)
	}
	for id, s := range pc.servers {
		if id == old {
			continue
		}
		l, ok := s.links.Load(old)
		if !ok {
			t.Fatalf("replica %d has no link to %d", id, old)
		}
		p := l.(*peer)
		if n, b := len(p.queue), p.queued.Load(); n != 0 || b != 0 {
			t.Errorf("replica %d's link to %d, down for over %v: %d messages (%d bytes) queued", id, old, peerDownGrace+time.Second, n, b)
		}
	}

	// It comes back, is brought up and takes updates again.
	start := time.Now()
	pc.servers[old] = startOnPebble(t, pc.dir, pc.peers, old, true, nil)
	co := dial(t, pc.peers[old])
	for {
		_, err := invoke(ctx, co, &api.InvokeRequest{Op: put("back", "v"), Preliminary: true})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the restarted former leader %d took no update: %v", old, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("the restarted former leader took an update %v after it started", time.Since(start).Round(time.Millisecond))
}
