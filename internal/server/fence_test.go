package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/correctable"
	"github.com/correctables/correctables/internal/replica"
)

// A leader that restarts is fenced (internal/replica/fence.go): it takes no
// update until it has applied an entry of a later term. In a cluster of
// several it refuses an update at once, with api.FencedMarker, instead of
// holding it for BusyWait, since the other replicas take it now; the
// client library sends it there. Before, the update waited at the fenced
// replica for BusyWait (an hour here) and the client's deadline ran out.
func TestFencedReplicaSendsUpdatesElsewhere(t *testing.T) {
	if !strings.Contains(toStatus(replica.ErrFenced).Error(), api.FencedMarker) {
		t.Fatalf("the fence's status %q lacks api.FencedMarker %q", toStatus(replica.ErrFenced), api.FencedMarker)
	}
	// Every refusal before running says so, for the client's failover.
	for _, err := range []error{replica.ErrFenced, replica.ErrBusy, ErrOverloaded} {
		if st := toStatus(err); status.Code(st) != codes.ResourceExhausted || !strings.Contains(st.Error(), api.RefusedMarker) {
			t.Fatalf("the status of %v is %q: want ResourceExhausted with api.RefusedMarker", err, st)
		}
	}
	hour := func(_ uint64, c *Config) { c.BusyWait = time.Hour }
	pc := startPebbleCluster(t, 3, hour)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	strongPutUntilFinal(ctx, t, dial(t, pc.peers[1]), time.Second)
	lead := pc.leader(ctx, t)
	for id := range pc.peers {
		pc.stop(id)
	}
	// The old leader alone: fenced (its term's vote is its own), and
	// nothing can lift the fence while the others are down.
	pc.servers[lead] = startOnPebble(t, pc.dir, pc.peers, lead, true, func(c *Config) { hour(lead, c) })
	var fenced bool
	if err := pc.servers[lead].exec(ctx, func(r *replica.Replica) { fenced = r.Fenced() }); err != nil || !fenced {
		t.Fatalf("restarted leader fenced: %v, %v; want fenced", fenced, err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	_, err := invoke(wctx, dial(t, pc.peers[lead]), &api.InvokeRequest{Op: put("w", "1"), Preliminary: true})
	wcancel()
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), api.FencedMarker) {
		t.Fatalf("weak put at the fenced replica: %v; want ResourceExhausted at once, with the fence's marker", err)
	}

	// The others back: the public client gets every update through,
	// wherever it sends it first.
	for id := range pc.peers {
		if id != lead {
			pc.servers[id] = startOnPebble(t, pc.dir, pc.peers, id, true, func(c *Config) { hour(id, c) })
		}
	}
	addrs := make([]string, 0, 3)
	for _, id := range []uint64{lead, lead%3 + 1, (lead+1)%3 + 1} {
		addrs = append(addrs, pc.peers[id])
	}
	c, err := client.Dial(ctx, addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 20 {
		pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := c.Put(pctx, "k", []byte{byte(i)}, correctable.Eventual).Final(pctx)
		pcancel()
		if err != nil {
			t.Fatalf("weak put %d after the restart: %v", i, err)
		}
	}
}
