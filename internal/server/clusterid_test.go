package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/correctable"
)

// The cluster id depends on the members and their addresses and on the
// token, not on the order they are listed in.
func TestComputeClusterID(t *testing.T) {
	a := map[uint64]string{1: "127.0.0.1:7101", 2: "127.0.0.1:7102", 3: "127.0.0.1:7103"}
	b := map[uint64]string{}
	for _, id := range []uint64{3, 1, 2} {
		b[id] = a[id]
	}
	id := ComputeClusterID(a, "")
	if id == 0 || ComputeClusterID(b, "") != id {
		t.Fatalf("same members in another order: %x and %x", id, ComputeClusterID(b, ""))
	}
	other := func(f func(map[uint64]string)) map[uint64]string {
		m := maps.Clone(a)
		f(m)
		return m
	}
	for name, m := range map[string]map[uint64]string{
		"another address":   other(func(m map[uint64]string) { m[3] = "127.0.0.1:7104" }),
		"ids swapped":       other(func(m map[uint64]string) { m[1], m[2] = m[2], m[1] }),
		"another id":        other(func(m map[uint64]string) { m[4] = m[3]; delete(m, 3) }),
		"one member more":   other(func(m map[uint64]string) { m[4] = "127.0.0.1:7104" }),
		"one member less":   other(func(m map[uint64]string) { delete(m, 3) }),
		"address boundary":  other(func(m map[uint64]string) { m[1], m[2] = "127.0.0.1:710", "1127.0.0.1:7102" }),
		"address to a port": other(func(m map[uint64]string) { m[3] = "127.0.0.1:71030" }),
	} {
		if ComputeClusterID(m, "") == id {
			t.Errorf("%s: same cluster id %x", name, id)
		}
	}
	if ComputeClusterID(a, "prod-2") == id || ComputeClusterID(a, "prod-2") == ComputeClusterID(a, "prod-3") {
		t.Error("the token does not change the cluster id")
	}
	if ComputeClusterID(a, "prod-2") != ComputeClusterID(b, "prod-2") {
		t.Error("same members and token in another order give another id")
	}
}

// cidLog is a log destination safe for concurrent writes.
type cidLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *cidLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *cidLog) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

// Log lines of a refusal: the receiving side's (once per peer) and the
// sending side's.
const (
	refusedStream = "peer stream refused: it comes from a replica of another cluster"
	refusedByPeer = "peer refused this replica's stream: the replica at its address belongs to another cluster"
)

// Two three-replica clusters on one machine. A replica of cluster B is
// restarted on the address of a stopped replica of cluster A, with A's
// addresses as its peers: A's replicas refuse its streams and it refuses
// theirs; nothing of B reaches A's state (A's term, version vector,
// committed and tentative operations do not change, B's keys do not
// appear), and a client of A that reaches that address gets the cluster
// mismatch, not B's data.
func TestClusterIDRefusesAnotherCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dirA, dirB := t.TempDir(), t.TempDir()
	peersA, peersB := freePeers(t, 3), freePeers(t, 3)
	logs := map[string]*cidLog{}
	start := func(name, dir string, peers map[uint64]string, id uint64) *Server {
		l := &cidLog{}
		logs[name] = l
		s := startOnPebble(t, dir, peers, id, true, func(c *Config) {
			c.Logger = slog.New(slog.NewTextHandler(l, nil))
		})
		t.Cleanup(func() { s.Stop() })
		return s
	}
	A, B := map[uint64]*Server{}, map[uint64]*Server{}
	for id := uint64(1); id <= 3; id++ {
		A[id] = start(fmt.Sprint("A", id), dirA, peersA, id)
		B[id] = start(fmt.Sprint("B", id), dirB, peersB, id)
	}
	idA, idB := A[1].ClusterID(), B[1].ClusterID()
	if idA == 0 || idB == 0 || idA == idB {
		t.Fatalf("cluster ids A %x, B %x: want two different non-zero ids", idA, idB)
	}
	if idA != ComputeClusterID(peersA, "") {
		t.Fatalf("cluster A's id %x is not the one computed from its members", idA)
	}
	for id := uint64(2); id <= 3; id++ {
		if A[id].ClusterID() != idA || B[id].ClusterID() != idB {
			t.Fatalf("replica %d: cluster ids %x and %x, want %x and %x", id, A[id].ClusterID(), B[id].ClusterID(), idA, idB)
		}
	}

	endpoints := func(p map[uint64]string) []string { return []string{p[1], p[2], p[3]} }
	// Generous timeouts: replicas starting on a busy machine answer late.
	slow := []client.Option{client.WithDialTimeout(time.Minute), client.WithProbeTimeout(10 * time.Second)}
	cA, err := client.Dial(ctx, endpoints(peersA), slow...)
	if err != nil {
		t.Fatal(err)
	}
	defer cA.Close()
	cB, err := client.Dial(ctx, endpoints(peersB), slow...)
	if err != nil {
		t.Fatal(err)
	}
	defer cB.Close()
	strongPut := func(c *client.Client, k, v string) {
		t.Helper()
		for {
			view, err := c.Put(ctx, k, []byte(v), correctable.Strong).Final(ctx)
			if err == nil && view.Value.Err == nil {
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("put %s=%s: %v %v", k, v, err, view.Value.Err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	strongPut(cA, "k", "a")
	strongPut(cB, "k", "b")
	if cA.ClusterID() != idA || cB.ClusterID() != idB {
		t.Fatalf("clients pinned to %x and %x, want %x and %x", cA.ClusterID(), cB.ClusterID(), idA, idB)
	}
	// B has more to offer than A: a longer log and operations of its own
	// at every replica that its gossip would carry.
	for i := range 20 {
		strongPut(cB, fmt.Sprint("onlyB/", i), "b")
	}

	// x: a follower of A (stopping it leaves A's leader and term alone).
	lead, err := A[1].Leader(ctx)
	if err != nil || lead == 0 {
		t.Fatalf("A's leader: %d %v", lead, err)
	}
	x := uint64(3)
	if lead == 3 {
		x = 2
	}
	// A client of A pinned to x's address alone.
	cX, err := client.Dial(ctx, []string{peersA[x]}, slow...)
	if err != nil {
		t.Fatal(err)
	}
	defer cX.Close()
	if cX.ClusterID() != idA {
		t.Fatalf("client of A's replica %d pinned to %x, want %x", x, cX.ClusterID(), idA)
	}

	if err := A[x].Stop(); err != nil {
		t.Fatal(err)
	}
	if err := B[x].Stop(); err != nil {
		t.Fatal(err)
	}
	// What A holds before B's replica takes the address.
	type progress struct {
		term, committed, tentative uint64
		vv                         map[uint64]uint64
	}
	stateA := func() map[uint64]progress {
		out := map[uint64]progress{}
		for id, s := range A {
			if id == x {
				continue
			}
			st, err := s.Status(ctx, &api.StatusRequest{})
			if err != nil {
				t.Fatal(err)
			}
			out[id] = progress{st.GetTerm(), st.GetCommittedOps(), st.GetTentativeOps(), st.GetVv()}
		}
		return out
	}
	before := stateA()

	// B's replica x on A's address, with A's addresses as its peers: its
	// data directory says cluster B (the id is not computed again).
	bx := start("Bx", dirB, peersA, x)
	if bx.ClusterID() != idB {
		t.Fatalf("B's replica restarted with A's peers has cluster id %x, want B's %x", bx.ClusterID(), idB)
	}
	// Both sides refuse, and log it.
	waitLog := func(name, line string) {
		t.Helper()
		for logs[name].count(line) == 0 {
			if ctx.Err() != nil {
				t.Fatalf("%s never logged %q", name, line)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	var others []string
	for id := range A {
		if id != x {
			others = append(others, fmt.Sprint("A", id))
		}
	}
	for _, name := range others {
		waitLog(name, refusedStream)
	}
	waitLog("Bx", refusedStream)
	waitLog("Bx", refusedByPeer)
	// Let B's replica retry for a few election timeouts (it campaigns, and
	// redials with a backoff of at most a second).
	time.Sleep(4 * time.Second)
	for _, name := range others {
		if n := logs[name].count(refusedStream); n != 1 {
			t.Errorf("%s logged the refusal %d times, want once", name, n)
		}
	}

	after := stateA()
	for id, p := range before {
		q := after[id]
		if q.term != p.term || q.committed != p.committed || q.tentative != p.tentative || !maps.Equal(q.vv, p.vv) {
			t.Errorf("A's replica %d changed while B's replica was at A's address: %+v, then %+v", id, p, q)
		}
	}
	for id := range A {
		if id == x {
			continue
		}
		st := dial(t, peersA[id])
		views, err := invoke(ctx, st, &api.InvokeRequest{Op: &api.Op{Kind: api.Kind_KIND_GET, Key: "onlyB/0"}, Preliminary: true})
		if err != nil || len(views) != 1 || views[0].GetResult().GetFound() {
			t.Errorf("A's replica %d: weak get of B's key: %v %v", id, views, err)
		}
	}

	// The client pinned to A at x's address: the cluster mismatch, not
	// B's data.
	v, err := cX.Get(ctx, "k", correctable.Strong).Final(ctx)
	if !errors.Is(err, client.ErrClusterMismatch) || !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("get through a client of A at B's replica: %v, %v; want the cluster mismatch", v, err)
	}
	for _, want := range []string{api.FormatClusterID(idA), api.FormatClusterID(idB), peersA[x]} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("mismatch error %q does not name %s", err, want)
		}
	}
	// A write through it is refused before it runs: B does not have it.
	_, err = cX.Put(ctx, "fromA", []byte("x"), correctable.Strong).Final(ctx)
	var me *client.ClusterMismatchError
	if !errors.As(err, &me) || !me.NotRun || me.Pinned != idA || me.Got != idB {
		t.Fatalf("put through a client of A at B's replica: %v (%+v); want a mismatch refused before it ran", err, me)
	}
	got, err := cB.Get(ctx, "fromA", correctable.Strong).Final(ctx)
	if err != nil || got.Value.Found {
		t.Fatalf("B after the refused put of a client of A: %+v %v", got.Value, err)
	}
	// A new client pinned to A from the start finds no replica of A there.
	if c, err := client.Dial(ctx, []string{peersA[x]}, append(slow, client.WithClusterID(idA))...); !errors.Is(err, client.ErrClusterMismatch) {
		if err == nil {
			c.Close()
		}
		t.Fatalf("dial pinned to A at B's replica: %v, want the cluster mismatch", err)
	}
	// A client of all of A's endpoints reads and writes A's data only,
	// failing over from x's address (updates too: they were refused
	// before running there).
	for i := range 6 {
		v, err := cA.Get(ctx, "k", correctable.Strong).Final(ctx)
		if err != nil || string(v.Value.Value) != "a" {
			t.Fatalf("get %d through a client of A: %q %v", i, v.Value.Value, err)
		}
		if _, err := cA.Put(ctx, fmt.Sprint("a/", i), []byte("a"), correctable.Strong).Final(ctx); err != nil {
			t.Fatalf("put %d through a client of A: %v", i, err)
		}
	}
	// Replies carry the cluster id in their header, Status included.
	var hdr metadata.MD
	if _, err := dial(t, peersA[x]).Status(ctx, &api.StatusRequest{}, grpc.Header(&hdr)); err != nil {
		t.Fatal(err)
	}
	if got := hdr.Get(api.ClusterIDMetadata); len(got) != 1 || got[0] != api.FormatClusterID(idB) {
		t.Fatalf("Status header at B's replica: %v, want %s", got, api.FormatClusterID(idB))
	}
	// A raw call that expects A is refused before it runs.
	octx := metadata.AppendToOutgoingContext(ctx, api.ClusterIDMetadata, api.FormatClusterID(idA))
	_, err = invoke(octx, dial(t, peersA[x]), &api.InvokeRequest{Op: put("raw", "x"), Preliminary: true})
	if err == nil || !strings.Contains(err.Error(), "cluster id mismatch: this is cluster "+api.FormatClusterID(idB)) {
		t.Fatalf("invoke expecting A at B's replica: %v", err)
	}
}

// A replica started with Join has no cluster id until the first stream of
// a member: it takes that one and keeps it in its data directory.
func TestClusterIDJoinerLearnsIt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	peers := freePeers(t, 2)
	s1 := startOnPebble(t, dir, map[uint64]string{1: peers[1]}, 1, true, nil)
	defer s1.Stop()
	c := dialCluster(t, peers[1])
	id := s1.ClusterID()
	if id == 0 {
		t.Fatal("no cluster id")
	}
	for {
		_, err := c.MemberAdd(ctx, &api.MemberAddRequest{PeerAddr: peers[2], Learner: true})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	s2 := startOnPebble(t, dir, peers, 2, true, func(c *Config) { c.Join = true })
	if s2.ClusterID() != 0 {
		t.Fatalf("a joining replica has cluster id %x before any member streamed to it", s2.ClusterID())
	}
	for s2.ClusterID() != id {
		if ctx.Err() != nil {
			t.Fatalf("the joining replica has cluster id %x, want %x", s2.ClusterID(), id)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := s2.Stop(); err != nil {
		t.Fatal(err)
	}
	// Restarted (without Join, and with peers that would compute another
	// id), it keeps the id it learnt.
	s2 = startOnPebble(t, dir, peers, 2, true, nil)
	defer s2.Stop()
	if s2.ClusterID() != id {
		t.Fatalf("restarted, the joined replica has cluster id %x, want %x", s2.ClusterID(), id)
	}
}
