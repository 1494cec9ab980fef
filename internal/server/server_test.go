package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/internal/replica"
)

// memStorage is an in-memory Storage for unit tests of the loop; the
// end-to-end tests run on internal/storage (Pebble).
type memStorage struct {
	*raft.MemoryStorage
	own []*replica.Req
}

func (m *memStorage) Save(hs *raftpb.HardState, ents []*raftpb.Entry, snap *raftpb.Snapshot, own []*replica.Req) error {
	if snap != nil && !raft.IsEmptySnap(snap) {
		if err := m.ApplySnapshot(snap); err != nil {
			return err
		}
	}
	if hs != nil && !raft.IsEmptyHardState(hs) {
		if err := m.SetHardState(proto.Clone(hs).(*raftpb.HardState)); err != nil {
			return err
		}
	}
	if err := m.Append(ents); err != nil {
		return err
	}
	m.own = append(m.own, own...)
	return nil
}
func (m *memStorage) OwnOps() ([]*replica.Req, error) { return m.own, nil }
func (m *memStorage) TruncateOwn(upTo uint64) error {
	keep := m.own[:0:0]
	for _, q := range m.own {
		if q.ID.Seq > upTo {
			keep = append(keep, q)
		}
	}
	m.own = keep
	return nil
}
func (m *memStorage) Close() error { return nil }

// heldListeners holds, by address, the listeners freeAddr opened and no
// server has taken yet.
var heldListeners sync.Map

func init() {
	listenTCP = func(addr string) (net.Listener, error) {
		if l, ok := heldListeners.LoadAndDelete(addr); ok {
			return l.(net.Listener), nil
		}
		return net.Listen("tcp", addr)
	}
}

// freeAddr returns a loopback address whose listener stays open until the
// first server to listen on the address takes it (or the test ends).
// Closing it and listening again later would let another process's
// outgoing connection take the ephemeral port in between ("address
// already in use").
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	heldListeners.Store(addr, l)
	t.Cleanup(func() {
		if l, ok := heldListeners.LoadAndDelete(addr); ok {
			l.(net.Listener).Close()
		}
	})
	return addr
}

// deadAddr returns a loopback address that nothing listens on: a peer that
// never starts.
func deadAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startCluster starts n servers on loopback, each serving clients and peers
// on one address.
func startCluster(t testing.TB, n int, mk func(id uint64) Storage) []*Server {
	t.Helper()
	return startClusterWith(t, n, mk, nil)
}

// startClusterWith is startCluster with tweak (if not nil) applied to each
// replica's Config before it starts.
func startClusterWith(t testing.TB, n int, mk func(id uint64) Storage, tweak func(*Config)) []*Server {
	t.Helper()
	peers := map[uint64]string{}
	for i := 1; i <= n; i++ {
		peers[uint64(i)] = freeAddr(t)
	}
	var cfgs []Config
	for i := 1; i <= n; i++ {
		id := uint64(i)
		cfgs = append(cfgs, Config{
			ID: id, Peers: peers, ClientAddr: peers[id], PeerAddr: peers[id], Storage: mk(id),
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Seed: uint64(i),
		})
		if tweak != nil {
			tweak(&cfgs[len(cfgs)-1])
		}
	}
	return startServers(t, cfgs...)
}

func dial(t testing.TB, addr string) api.StoreClient {
	t.Helper()
	return api.NewStoreClient(plainConn(t, addr))
}

func invoke(ctx context.Context, c api.StoreClient, req *api.InvokeRequest) ([]*api.ViewReply, error) {
	st, err := c.Invoke(ctx, req)
	if err != nil {
		return nil, err
	}
	var views []*api.ViewReply
	for {
		v, err := st.Recv()
		if err == io.EOF {
			return views, nil
		}
		if err != nil {
			return views, err
		}
		views = append(views, v)
	}
}

func put(k, v string) *api.Op {
	return &api.Op{Kind: api.Kind_KIND_PUT, Key: k, Value: []byte(v)}
}

func TestInvokeTwoViews(t *testing.T) {
	servers := startCluster(t, 3, func(uint64) Storage { return &memStorage{MemoryStorage: raft.NewMemoryStorage()} })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := dial(t, servers[1].ClientAddr())
	views, err := invoke(ctx, c, &api.InvokeRequest{Op: put("k", "v1"), Preliminary: true, Final: true, Strong: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(views) != 2 || views[0].GetFinal() || !views[1].GetFinal() {
		t.Fatalf("want preliminary then final, got %v", views)
	}
	// The put found no previous value both times: the final confirms.
	if !views[1].GetConfirmed() || views[1].GetResult() != nil {
		t.Fatalf("final should be a payload-free confirmation, got %v", views[1])
	}
	// A strong read anywhere sees it.
	views, err = invoke(ctx, dial(t, servers[2].ClientAddr()), &api.InvokeRequest{
		Op: &api.Op{Kind: api.Kind_KIND_GET, Key: "k"}, Final: true, Strong: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(views) != 1 || string(views[0].GetResult().GetValue()) != "v1" {
		t.Fatalf("strong read: %v", views)
	}
}

func TestInvokeBadRequests(t *testing.T) {
	servers := startCluster(t, 1, func(uint64) Storage { return &memStorage{MemoryStorage: raft.NewMemoryStorage()} })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := dial(t, servers[0].ClientAddr())
	for _, tc := range []struct {
		name string
		req  *api.InvokeRequest
	}{
		{"no op", &api.InvokeRequest{Preliminary: true}},
		{"unknown kind", &api.InvokeRequest{Op: &api.Op{Kind: 99, Key: "k"}, Preliminary: true}},
		{"unspecified kind", &api.InvokeRequest{Op: &api.Op{Key: "k"}, Preliminary: true}},
		{"no view asked", &api.InvokeRequest{Op: put("k", "v")}},
		{"weak read final", &api.InvokeRequest{Op: &api.Op{Kind: api.Kind_KIND_GET, Key: "k"}, Final: true}},
		{"oversized value", &api.InvokeRequest{Op: put("k", string(make([]byte, 2<<20))), Preliminary: true}},
		{"oversized key", &api.InvokeRequest{Op: put(string(make([]byte, 5000)), "v"), Preliminary: true}},
		{"put without value field use", &api.InvokeRequest{Op: &api.Op{Kind: api.Kind_KIND_GET, Key: "k", Delta: 3}, Preliminary: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := invoke(ctx, c, tc.req)
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("want InvalidArgument, got %v", err)
			}
		})
	}
	// Nothing changed: the key does not exist.
	views, err := invoke(ctx, c, &api.InvokeRequest{Op: &api.Op{Kind: api.Kind_KIND_SCAN}, Final: true, Strong: true})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(views[0].GetResult().GetItems()); n != 0 {
		t.Fatalf("bad requests changed the state: %d keys", n)
	}
}

var _ = fmt.Sprint

// A replica that was down while the others compacted their logs catches up
// from a snapshot, on Pebble storage, and serves what it missed.
// catchUpAfterDowntime starts three replicas on Pebble that snapshot every
// 20 entries and keep 5 behind a snapshot, stops replica 3, runs n strong
// updates op(i) at replica 2, and starts replica 3 again: it is then behind
// the compacted log. The replicas stop with the test.
func catchUpAfterDowntime(ctx context.Context, t *testing.T, n int, op func(i int) *api.Op) map[uint64]string {
	t.Helper()
	dir := t.TempDir()
	peers := freePeers(t, 3)
	start := func(id uint64) *Server {
		return startOnPebble(t, dir, peers, id, true, func(c *Config) { c.SnapshotEntries, c.CompactMargin = 20, 5 })
	}
	servers := []*Server{start(1), start(2), start(3)}
	t.Cleanup(func() {
		for _, s := range servers {
			s.Stop()
		}
	})
	if err := servers[2].Stop(); err != nil {
		t.Fatal(err)
	}
	c := dial(t, peers[1])
	for i := range n {
		if _, err := invoke(ctx, c, &api.InvokeRequest{Op: op(i), Final: true, Strong: true}); err != nil {
			t.Fatal(err)
		}
	}
	servers[2] = start(3)
	return peers
}

func TestSnapshotCatchUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	peers := catchUpAfterDowntime(ctx, t, 100, func(i int) *api.Op { return put(fmt.Sprint("k", i%7), fmt.Sprint(i)) })
	// Strong reads at the restarted replica wait until it applied the read
	// index, which lies beyond the compacted log: only a snapshot gets it
	// there.
	c3 := dial(t, peers[3])
	views, err := invoke(ctx, c3, &api.InvokeRequest{Op: &api.Op{Kind: api.Kind_KIND_GET, Key: "k1"}, Final: true, Strong: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(views[len(views)-1].GetResult().GetValue()); got != "99" {
		t.Fatalf("k1 at the restarted replica: %q, want 99", got)
	}
	// Its own weak reads see the snapshot's state too.
	views, err = invoke(ctx, c3, &api.InvokeRequest{Op: &api.Op{Kind: api.Kind_KIND_GET, Key: "k0"}, Preliminary: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(views[0].GetResult().GetValue()); got != "98" {
		t.Fatalf("k0 weak read at the restarted replica: %q, want 98", got)
	}
}

// The metrics count what happened: operations by protocol, views by kind,
// confirmations, wire bytes.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	addr := freeAddr(t)
	startServers(t, Config{
		ID: 1, Peers: map[uint64]string{1: addr}, ClientAddr: addr,
		Storage: &memStorage{MemoryStorage: raft.NewMemoryStorage()},
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: NewMetrics(reg, "1"),
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wire clientWire
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithStatsHandler(&wire))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := api.NewStoreClient(conn)
	for i := 0; i < 3; i++ {
		if _, err := invoke(ctx, c, &api.InvokeRequest{Op: put("k", "v"), Preliminary: true, Final: true, Strong: true}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := invoke(ctx, c, &api.InvokeRequest{Op: &api.Op{Kind: api.Kind_KIND_GET, Key: "k"}, Preliminary: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Call(ctx, &api.InvokeRequest{Op: &api.Op{Kind: api.Kind_KIND_GET, Key: "k"}, Preliminary: true}); err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				if l.GetName() != "replica" {
					name += "{" + l.GetValue() + "}"
				}
			}
			switch {
			case m.GetCounter() != nil:
				got[name] = m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				got[name] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	// Each put was executed (in a round that ended before its final view);
	// nothing arrived out of order, so nothing was rolled back.
	if got["correctables_executions_total"] < 3 {
		t.Errorf("correctables_executions_total = %v, want at least 3 (all: %v)", got["correctables_executions_total"], got)
	}
	if r, ok := got["correctables_rollbacks_total"]; !ok || r != 0 {
		t.Errorf("correctables_rollbacks_total = %v (present %v), want 0", r, ok)
	}
	for name, want := range map[string]float64{
		"correctables_operations_total{strong}":          3,
		"correctables_operations_total{weak}":            2,
		"correctables_view_latency_seconds{preliminary}": 5,
		"correctables_view_latency_seconds{final}":       3,
		// Every put's final view equals its preliminary one here.
		"correctables_final_views_total{confirmed}": 3,
		"correctables_final_views_total{diverged}":  0,
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v (all: %v)", name, got[name], want, got)
		}
	}
	// The wire bytes are those gRPC reports to the client's stats handler:
	// what it sent came in, what it received went out (a replica without
	// peers has no other traffic).
	if in, out := got["correctables_wire_bytes_total{in}"], got["correctables_wire_bytes_total{out}"]; in != float64(wire.out.Load()) || out != float64(wire.in.Load()) || in == 0 || out == 0 {
		t.Errorf("wire bytes in %v, out %v; the client sent %d and received %d", in, out, wire.out.Load(), wire.in.Load())
	}
}

// clientWire is a client's stats handler that sums the wire length of the
// messages it sends and receives.
type clientWire struct{ in, out atomic.Int64 }

func (w *clientWire) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (w *clientWire) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (w *clientWire) HandleConn(context.Context, stats.ConnStats)                       {}
func (w *clientWire) HandleRPC(_ context.Context, s stats.RPCStats) {
	switch p := s.(type) {
	case *stats.InPayload:
		w.in.Add(int64(p.WireLength))
	case *stats.OutPayload:
		w.out.Add(int64(p.WireLength))
	}
}

// Status tells how far a replica has applied the log it knows committed:
// a replica catching up shows applied_index behind commit_index.
func TestStatusReportsProgress(t *testing.T) {
	servers := startCluster(t, 3, func(uint64) Storage { return &memStorage{MemoryStorage: raft.NewMemoryStorage()} })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := dial(t, servers[0].ClientAddr())
	for i := range 5 {
		if _, err := invoke(ctx, c, &api.InvokeRequest{Op: put(fmt.Sprint("k", i), "v"), Final: true, Strong: true}); err != nil {
			t.Fatal(err)
		}
	}
	st, err := c.Status(ctx, &api.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetAppliedIndex() == 0 || st.GetCommitIndex() < st.GetAppliedIndex() {
		t.Fatalf("status: applied %d, commit %d; want 0 < applied <= commit", st.GetAppliedIndex(), st.GetCommitIndex())
	}
}

// A replica whose loop is busy (a long write of large values, a catch-up)
// still answers Status, from the end of a recent round, so that clients'
// probes and `correctables status` do not take it for a dead one; before,
// Status waited for the loop and a Dial failed while a stream of 1 MiB
// values kept the loop in its writes.
func TestStatusWhileLoopBusy(t *testing.T) {
	servers := startCluster(t, 1, func(uint64) Storage { return &memStorage{MemoryStorage: raft.NewMemoryStorage()} })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := dial(t, servers[0].ClientAddr())
	if _, err := invoke(ctx, c, &api.InvokeRequest{Op: put("k", "v"), Final: true, Strong: true}); err != nil {
		t.Fatal(err)
	}
	held, release := make(chan struct{}), make(chan struct{})
	go servers[0].exec(ctx, func(*replica.Replica) { close(held); <-release })
	<-held
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	st, err := c.Status(sctx, &api.StatusRequest{})
	scancel()
	if err != nil {
		close(release)
		t.Fatalf("Status while the loop is busy: %v", err)
	}
	// A published status older than statusStale is not served: a loop
	// stuck that long answers no Status, and probes mark it down.
	p := servers[0].published.Load()
	servers[0].published.Store(&publishedStatus{reply: p.reply, at: p.at.Add(-2 * statusStale)})
	sctx, scancel = context.WithTimeout(ctx, time.Second)
	_, err = c.Status(sctx, &api.StatusRequest{})
	scancel()
	close(release)
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("Status with the loop stuck past statusStale: %v, want DeadlineExceeded", err)
	}
	if st.GetId() != 1 || st.GetAppliedIndex() == 0 || st.GetLeader() != 1 {
		t.Fatalf("published status: id %d, applied %d, leader %d; want id 1, applied > 0, leader 1", st.GetId(), st.GetAppliedIndex(), st.GetLeader())
	}
	// Once the loop is free again, Status is the loop's own.
	if _, err := invoke(ctx, c, &api.InvokeRequest{Op: put("k", "w"), Final: true, Strong: true}); err != nil {
		t.Fatal(err)
	}
	st2, err := c.Status(ctx, &api.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st2.GetAppliedIndex() <= st.GetAppliedIndex() {
		t.Fatalf("status after the loop is free: applied %d, not past %d", st2.GetAppliedIndex(), st.GetAppliedIndex())
	}
}

// TestLargeSnapshotCatchUp: a follower that fell behind the compacted log
// gets the leader's snapshot even when the snapshot is larger than one
// message between replicas may be: it goes in parts (PeerEnvelope.part).
// The limits are lowered here (a 2 MiB message, 256 KiB parts) so that a
// state of about 4 MiB is over them; in a server they are 64 MiB and
// 4 MiB. Before, such a snapshot was dropped ("peer message over the size
// limit") every time the leader sent it, and the follower never caught up.
func TestLargeSnapshotCatchUp(t *testing.T) {
	oldMax, oldPart := maxPeerMessage, peerPartBytes
	maxPeerMessage, peerPartBytes = 2<<20, 256<<10
	// Restored after the replicas stop (cleanups run last first).
	t.Cleanup(func() { maxPeerMessage, peerPartBytes = oldMax, oldPart })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	value := func(i int) string { return fmt.Sprintf("%07d", i) + strings.Repeat("v", 1<<19-1000) }
	peers := catchUpAfterDowntime(ctx, t, 40, func(i int) *api.Op { return put(fmt.Sprint("k", i%8), value(i)) })
	c3 := dial(t, peers[3])
	views, err := invoke(ctx, c3, &api.InvokeRequest{Op: &api.Op{Kind: api.Kind_KIND_GET, Key: "k1"}, Final: true, Strong: true})
	if err != nil {
		t.Fatalf("strong read at the replica behind the compacted log: %v", err)
	}
	if got := string(views[len(views)-1].GetResult().GetValue()); got != value(33) {
		t.Fatalf("k1 at the restarted replica: %.10q..., want %.10q...", got, value(33))
	}
}

// A follower that missed many times the state's size in log is brought up
// by a snapshot of the small state, not by the log: with the servers'
// snapshot settings (every 10,000 entries or 16 MiB of them, a margin of
// 1,000 entries or 64 MiB behind each), a replica down while 6 MiB of
// 8 KiB values went to 16 keys (a state of 128 KiB) was sent all 6 MiB of
// log, which its leader read and encoded on its loop and it applied. The
// snapshots' and the margin's bytes bounds follow the state's size
// (replica.snapshotBytesBound, driver.marginBytes).
func TestSmallStateCatchUpBySnapshot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	pc := startPebbleCluster(t, 3, nil)
	pc.stop(3)
	c := dial(t, pc.peers[1])
	const n, size = 768, 8 << 10
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)); i <= n; i = int(next.Add(1)) {
				v := bytes.Repeat([]byte{byte(i)}, size)
				op := &api.Op{Kind: api.Kind_KIND_PUT, Key: fmt.Sprint("k", i%16), Value: v}
				if _, err := invoke(ctx, c, &api.InvokeRequest{Op: op, Final: true, Strong: true}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	want, err := c.Status(ctx, &api.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	pc.servers[3] = startOnPebble(t, pc.dir, pc.peers, 3, true, nil)
	c3 := dial(t, pc.peers[3])
	for {
		st, err := c3.Status(ctx, &api.StatusRequest{})
		if err == nil && st.GetAppliedIndex() >= want.GetAppliedIndex() {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("replica 3 did not catch up: status %v, want applied index %d", st, want.GetAppliedIndex())
		}
		time.Sleep(10 * time.Millisecond)
	}
	var stats replica.Stats
	if err := pc.servers[3].exec(ctx, func(r *replica.Replica) { stats = r.Stats() }); err != nil {
		t.Fatal(err)
	}
	if stats.SnapshotsReceived == 0 {
		t.Errorf("replica 3 missed %d MiB of log over a %d KiB state and was brought up through the log, not a snapshot",
			n*size>>20, 16*size>>10)
	}
	// And what it holds is the state.
	for k := range 16 {
		views, err := invoke(ctx, c3, &api.InvokeRequest{Op: &api.Op{Kind: api.Kind_KIND_GET, Key: fmt.Sprint("k", k)}, Preliminary: true})
		if err != nil {
			t.Fatal(err)
		}
		last := n - (n-k)%16 // the last i <= n with i%16 == k
		if got := views[0].GetResult().GetValue(); len(got) != size || got[0] != byte(last) {
			t.Fatalf("k%d at replica 3: %d bytes starting %d, want %d bytes of %d", k, len(got), got[0], size, byte(last))
		}
	}
}
