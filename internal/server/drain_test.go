package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/internal/replica"
)

// Weak writes a running replica acknowledged (preliminary view only) and
// gossiped to nobody survive its removal: member remove drains it first,
// and every one of them is then read back, strongly, from a survivor. The
// replica's gossip is cut (every message from it but raft's is dropped)
// and its no-op period is too long to commit its writes, so nothing but
// the drain carries them into the log: removed without it, they were lost
// (as the replica test's control shows on the replica core).
func TestMemberRemoveDrainsUngossipedWeakWrites(t *testing.T) {
	const x = 3
	pc := startPebbleCluster(t, 3, func(id uint64, c *Config) {
		if id == x {
			c.NoopTicks = 1 << 30
			c.dropPeerMsg = func(m replica.Message) bool { return m.Type != replica.MsgRaft }
		}
	})
	peers, servers := pc.peers, pc.servers
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	strongPutUntilFinal(ctx, t, dial(t, peers[1]), time.Second)
	cx := dial(t, peers[x])
	const n = 20
	for i := range n {
		views, err := invoke(ctx, cx, &api.InvokeRequest{Op: put(fmt.Sprint("w", i), fmt.Sprint("v", i)), Preliminary: true})
		if err != nil || len(views) != 1 || views[0].GetFinal() {
			t.Fatalf("weak write %d through replica %d: %v %v", i, x, views, err)
		}
	}
	// Nothing carried them elsewhere: a weak read at replica 1 does not
	// see them.
	views, err := invoke(ctx, dial(t, peers[1]), &api.InvokeRequest{Op: &api.Op{Kind: api.Kind_KIND_GET, Key: "w0"}, Preliminary: true})
	if err != nil || len(views) != 1 || views[0].GetResult().GetFound() {
		t.Fatalf("replica 1 has a weak write of replica %d before the removal (the gossip cut does not hold): %v %v", x, views, err)
	}
	l, err := dialCluster(t, peers[1]).MemberRemove(ctx, &api.MemberRemoveRequest{Id: x})
	if err != nil {
		t.Fatal(err)
	}
	if l.GetWarning() != "" {
		t.Errorf("member remove of a live replica warns: %q", l.GetWarning())
	}
	select {
	case <-servers[x].Done():
	case <-ctx.Done():
		t.Fatal("the removed replica keeps running")
	}
	pc.stop(x)
	c1 := dial(t, peers[1])
	for i := range n {
		views, err := invoke(ctx, c1, &api.InvokeRequest{Op: &api.Op{Kind: api.Kind_KIND_GET, Key: fmt.Sprint("w", i)}, Final: true, Strong: true})
		if err != nil || len(views) == 0 {
			t.Fatalf("strong read of w%d at replica 1: %v %v", i, views, err)
		}
		v := views[len(views)-1]
		if !v.GetFinal() || string(v.GetResult().GetValue()) != fmt.Sprint("v", i) {
			t.Errorf("w%d at replica 1 after the removal of replica %d: %v, want v%d (an acknowledged write was lost)", i, x, v, i)
		}
	}
}

// A draining replica refuses client operations with Unavailable, saying it
// drains (api.DrainingMarker), before running them; member list shows it
// draining; the others serve; member remove then finds it drained.
func TestDrainingReplicaRefusesClients(t *testing.T) {
	pc := startPebbleCluster(t, 3, nil)
	peers, servers := pc.peers, pc.servers
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	strongPutUntilFinal(ctx, t, dial(t, peers[1]), time.Second)
	// A change that cannot be made drains nobody.
	_, err := dialCluster(t, peers[1]).MemberReplace(ctx, &api.MemberReplaceRequest{Remove: 3, Id: 2, PeerAddr: "127.0.0.1:1"})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("member replace of 3 by member 2: %v, want InvalidArgument", err)
	}
	if draining := drainingMembers(ctx, t, peers[1]); len(draining) != 0 {
		t.Fatalf("an invalid member replace left %v draining", draining)
	}
	if warning, err := (clusterService{s: servers[1]}).drain(ctx, 3, time.Minute); err != nil || warning != "" {
		t.Fatalf("drain of replica 3: %q %v", warning, err)
	}
	// Replica 3 has applied its drain marker (it confirmed its drain).
	_, err = invoke(ctx, dial(t, peers[3]), &api.InvokeRequest{Op: put("k", "v"), Preliminary: true})
	if st, _ := status.FromError(err); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), api.DrainingMarker) {
		t.Fatalf("a write at draining replica 3: %v, want Unavailable saying %q", err, api.DrainingMarker)
	}
	if _, err := invoke(ctx, dial(t, peers[1]), &api.InvokeRequest{Op: put("k", "v"), Preliminary: true}); err != nil {
		t.Fatalf("a write at replica 1: %v", err)
	}
	if draining := drainingMembers(ctx, t, peers[1]); len(draining) != 1 || draining[0] != 3 {
		t.Errorf("member list: draining %v, want [3]", draining)
	}
	if l, err := dialCluster(t, peers[1]).MemberRemove(ctx, &api.MemberRemoveRequest{Id: 3}); err != nil || l.GetWarning() != "" {
		t.Fatalf("member remove of drained replica 3: %v, warning %q", err, l.GetWarning())
	}
}

// drainingMembers returns the members that the replica at addr lists as
// draining.
func drainingMembers(ctx context.Context, t *testing.T, addr string) []uint64 {
	t.Helper()
	l, err := dialCluster(t, addr).MemberList(ctx, &api.MemberListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var out []uint64
	for _, m := range l.GetMembers() {
		if m.GetDraining() {
			out = append(out, m.GetId())
		}
	}
	return out
}
