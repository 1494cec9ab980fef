package server

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/internal/replica"
	"github.com/correctables/correctables/internal/storage"
)

func dialCluster(t testing.TB, addr string) api.ClusterClient {
	t.Helper()
	return api.NewClusterClient(plainConn(t, addr))
}

func listIDs(l *api.MemberListReply) (ids []uint64, learners []uint64) {
	for _, m := range l.GetMembers() {
		ids = append(ids, m.GetId())
		if m.GetLearner() {
			learners = append(learners, m.GetId())
		}
	}
	return ids, learners
}

// TestMembershipOnPebble adds a fourth replica as a learner to a cluster
// whose log is compacted (it catches up from a snapshot), promotes it,
// removes a replica (which stops, and whose id is refused afterwards), and
// checks the data at the new replica.
func TestMembershipOnPebble(t *testing.T) {
	small := func(c *Config) { c.SnapshotEntries, c.CompactMargin = 20, 5 }
	pc := startPebbleCluster(t, 3, func(_ uint64, c *Config) { small(c) })
	dir, peers, servers := pc.dir, pc.peers, pc.servers
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c1 := dial(t, peers[1])
	strongPutUntilFinal(ctx, t, c1, time.Second) // waits for a leader
	for i := range 60 {
		if _, err := invoke(ctx, c1, &api.InvokeRequest{Op: put(fmt.Sprint("k", i%7), fmt.Sprint(i)), Final: true, Strong: true}); err != nil {
			t.Fatal(err)
		}
	}
	m1 := dialCluster(t, peers[2])

	// Bad requests change nothing.
	for _, bad := range []*api.MemberAddRequest{{Id: 2, PeerAddr: "127.0.0.1:1"}, {Id: 7}} {
		if _, err := m1.MemberAdd(ctx, bad); status.Code(err) != codes.InvalidArgument {
			t.Errorf("MemberAdd(%v) = %v, want InvalidArgument", bad, err)
		}
	}
	if _, err := m1.MemberRemove(ctx, &api.MemberRemoveRequest{Id: 9}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("removing a non-member: %v, want InvalidArgument", err)
	}

	// Add 4 as a learner (id picked by the cluster), start it empty.
	addr4 := freeAddr(t)
	l, err := m1.MemberAdd(ctx, &api.MemberAddRequest{PeerAddr: addr4, Learner: true})
	if err != nil {
		t.Fatal(err)
	}
	if ids, learners := listIDs(l); !slices.Equal(ids, []uint64{1, 2, 3, 4}) || !slices.Equal(learners, []uint64{4}) {
		t.Fatalf("after adding: members %v learners %v", ids, learners)
	}
	joinPeers := map[uint64]string{1: peers[1], 2: peers[2], 3: peers[3], 4: addr4}
	servers[4] = startOnPebble(t, dir, joinPeers, 4, true, func(c *Config) { small(c); c.Join = true })
	c4 := dial(t, addr4)
	views, err := invoke(ctx, c4, &api.InvokeRequest{Op: &api.Op{Kind: api.Kind_KIND_GET, Key: "k3"}, Final: true, Strong: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(views[len(views)-1].GetResult().GetValue()); got != "59" {
		t.Fatalf("k3 at the new replica: %q, want 59", got)
	}
	var stats replica.Stats
	if err := servers[4].exec(ctx, func(r *replica.Replica) { stats = r.Stats() }); err != nil {
		t.Fatal(err)
	}
	if stats.SnapshotsReceived == 0 {
		t.Error("the new replica did not catch up from a snapshot")
	}
	if _, err := m1.MemberPromote(ctx, &api.MemberPromoteRequest{Id: 4}); err != nil {
		t.Fatal(err)
	}

	// Remove 3: it stops; the others go on with 1, 2, 4.
	l, err = dialCluster(t, peers[1]).MemberRemove(ctx, &api.MemberRemoveRequest{Id: 3})
	if err != nil {
		t.Fatal(err)
	}
	if ids, _ := listIDs(l); !slices.Equal(ids, []uint64{1, 2, 4}) || !slices.Equal(l.GetRemoved(), []uint64{3}) {
		t.Fatalf("after removing 3: members %v removed %v", ids, l.GetRemoved())
	}
	select {
	case <-servers[3].Done():
		if !errors.Is(servers[3].Err(), ErrRemoved) {
			t.Fatalf("replica 3 stopped with %v, want ErrRemoved", servers[3].Err())
		}
	case <-ctx.Done():
		t.Fatal("replica 3 did not stop after its removal")
	}
	if _, err := m1.MemberAdd(ctx, &api.MemberAddRequest{Id: 3, PeerAddr: peers[3]}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("re-adding removed 3: %v, want InvalidArgument", err)
	}
	if _, err := invoke(ctx, c4, &api.InvokeRequest{Op: put("after", "removal"), Final: true, Strong: true}); err != nil {
		t.Fatal(err)
	}
	// A restart of the removed replica from its data stops again: at once
	// if its log holds its removal, else as soon as a member refuses it.
	pc.stop(3)
	st, err := storage.Open(storage.Options{Dir: filepath.Join(dir, "3"), NoSync: true, Logger: reviewQuiet(), AsyncSnapshotReads: true})
	if err != nil {
		t.Fatal(err)
	}
	s3, err := New(Config{ID: 3, Peers: peers, ClientAddr: peers[3], Storage: st, Logger: reviewQuiet()})
	if err != nil {
		if !errors.Is(err, replica.ErrRemoved) {
			t.Fatalf("restarting removed replica 3: %v, want replica.ErrRemoved", err)
		}
		st.Close()
		return
	}
	if err := s3.Start(); err != nil {
		t.Fatal(err)
	}
	defer s3.Stop()
	select {
	case <-s3.Done():
		if !errors.Is(s3.Err(), ErrRemoved) {
			t.Fatalf("restarted replica 3 stopped with %v, want ErrRemoved", s3.Err())
		}
	case <-ctx.Done():
		t.Fatal("restarted removed replica 3 keeps running")
	}
}
