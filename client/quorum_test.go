package client_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/correctable"
	"github.com/correctables/correctables/internal/cluster"
)

// stamped is a fake replica whose weak reads return value with a version
// vector {1: seq}.
func stamped(id uint64, value string, seq uint64, delay time.Duration) *fakeStore {
	f := &fakeStore{id: id, delay: delay}
	f.script = func(req *api.InvokeRequest, stream grpc.ServerStreamingServer[api.ViewReply]) error {
		return stream.Send(&api.ViewReply{Final: true, Result: &api.Result{Found: true, Value: []byte(value)},
			Stamp: &api.Stamp{Replica: id, CommittedCount: 1, Vv: map[uint64]uint64{1: seq}}})
	}
	return f
}

func TestQuorumReadAsksAMajority(t *testing.T) {
	// a and b are near, c is 200 ms away: a majority is a and b.
	a, b, c := stamped(1, "old", 3, 0), stamped(2, "new", 5, 0), stamped(3, "newest", 9, 200*time.Millisecond)
	addrA, _ := serve(t, a)
	addrB, srvB := serve(t, b)
	addrC, _ := serve(t, c)
	cl := dial(t, []string{addrC, addrA, addrB})
	rec := client.NewTraceRecorder(10)
	traced := dial(t, []string{addrC, addrA, addrB}, client.WithTraceRecorder(rec))

	for _, x := range []*client.Client{cl, traced} {
		v, err := final(t, x.InvokeQuorum(t.Context(), client.Get("k")))
		if err != nil {
			t.Fatal(err)
		}
		if v.Level != client.Quorum || string(v.Value.Value) != "new" {
			t.Fatalf("quorum read: %v %q, want the fresher of the near two, %q at quorum", v.Level, v.Value.Value, "new")
		}
		if s, ok := client.StampOf(v); !ok || s.Replica != 2 {
			t.Fatalf("quorum read's stamp %+v, want replica 2's", s)
		}
	}
	if n := len(c.requests()); n != 0 {
		t.Fatalf("the far replica got %d requests, want 0", n)
	}
	if len(a.requests()) != 2 || !a.requests()[0].GetPreliminary() || a.requests()[0].GetFinal() {
		t.Fatalf("the nearest replica got %v, want two weak reads", a.requests())
	}
	if got := rec.Records(0); len(got) != 1 || got[0].Strong || got[0].Write || got[0].Value != client.ValueHash([]byte("new")) {
		t.Fatalf("trace %+v, want one read of %q", got, "new")
	}

	// b gone: the read asks c instead.
	srvB.Stop()
	v, err := final(t, cl.InvokeQuorum(t.Context(), client.Get("k")))
	if err != nil {
		t.Fatal(err)
	}
	if string(v.Value.Value) != "newest" || len(c.requests()) != 1 {
		t.Fatalf("with b down: %q (c asked %d times), want %q from c", v.Value.Value, len(c.requests()), "newest")
	}

	// A majority of one endpoint out of two is not enough.
	two := dial(t, []string{addrA, deadAddr(t)})
	if _, err := final(t, two.InvokeQuorum(t.Context(), client.Get("k"))); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("one of two endpoints: %v, want ErrUnavailable", err)
	}
}

// TestQuorumReadHedges: a replica of the nearest majority that answers its
// probes at once but a read only after 500 ms (a stalled link, a pause)
// does not hold the read: past the hedge the read asks the third replica
// and returns with the first majority.
func TestQuorumReadHedges(t *testing.T) {
	a := stamped(1, "a", 3, 0)
	b := &fakeStore{id: 2}
	b.script = func(req *api.InvokeRequest, stream grpc.ServerStreamingServer[api.ViewReply]) error {
		select {
		case <-time.After(500 * time.Millisecond):
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
		return stream.Send(&api.ViewReply{Final: true, Result: &api.Result{Found: true, Value: []byte("b")},
			Stamp: &api.Stamp{Replica: 2, Vv: map[uint64]uint64{1: 3}}})
	}
	c := stamped(3, "c", 3, 20*time.Millisecond) // farther than a and b
	addrA, _ := serve(t, a)
	addrB, _ := serve(t, b)
	addrC, _ := serve(t, c)
	cl := dial(t, []string{addrA, addrB, addrC})
	start := time.Now()
	v, err := final(t, cl.InvokeQuorum(t.Context(), client.Get("k")))
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := client.StampOf(v); s.Replica == 2 || time.Since(start) >= 500*time.Millisecond {
		t.Fatalf("quorum read with b stalled: from replica %d after %v, want a's or c's before b's 500 ms", s.Replica, time.Since(start))
	}
	if st := cl.Stats(); st.Hedges != 1 {
		t.Fatalf("stats %+v, want one hedge", st)
	}

	// WithQuorumHedge(0) asks every endpoint at once: c too, before any
	// hedge.
	all := dial(t, []string{addrA, addrB, addrC}, client.WithQuorumHedge(0))
	before := len(c.requests())
	if _, err := final(t, all.InvokeQuorum(t.Context(), client.Get("k"))); err != nil {
		t.Fatal(err)
	}
	if st := all.Stats(); st.Hedges != 0 || len(c.requests()) != before+1 {
		t.Fatalf("asking all: %d hedges, c asked %d times, want none and once", st.Hedges, len(c.requests())-before)
	}
	if _, err := client.Dial(t.Context(), []string{addrA}, client.WithQuorumHedge(-time.Second)); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("a negative hedge: %v, want ErrInvalidArgument", err)
	}
}

// refusingUpdates makes f refuse every update before running it (as an
// overloaded replica does: the client tries the next endpoint), so that a
// test's writes land at the replica it means, whatever the endpoints' RTTs.
func refusingUpdates(f *fakeStore) *fakeStore {
	f.script = func(req *api.InvokeRequest, stream grpc.ServerStreamingServer[api.ViewReply]) error {
		return status.Error(codes.ResourceExhausted, "replica overloaded ("+api.RefusedMarker+")")
	}
	return f
}

// TestQuorumReadAsksPastARefusal: a replica that refuses the read before
// running it (overloaded) does not fail a read that a majority can answer:
// the read asks the next one.
func TestQuorumReadAsksPastARefusal(t *testing.T) {
	a, b := stamped(1, "a", 3, 0), stamped(2, "b", 3, 5*time.Millisecond)
	c := &fakeStore{id: 3, fail: status.Error(codes.ResourceExhausted, "replica overloaded ("+api.RefusedMarker+")")}
	addrA, _ := serve(t, a)
	addrB, _ := serve(t, b)
	addrC, _ := serve(t, c)
	for _, opts := range [][]client.Option{nil, {client.WithQuorumHedge(0)}} {
		cl := dial(t, []string{addrA, addrC, addrB}, opts...)
		if _, err := final(t, cl.InvokeQuorum(t.Context(), client.Get("k"))); err != nil {
			t.Fatalf("quorum read with one replica refusing (options %v): %v", opts, err)
		}
	}
}

// TestQuorumWriteOutlastsABlip: a replica whose Status fails for a moment
// (a connection reset) still confirms the write once it answers again; an
// endpoint that is the origin under another address never counts.
func TestQuorumWriteOutlastsABlip(t *testing.T) {
	a := &fakeStore{id: 1, prelim: &api.Result{Ok: true}}
	b := refusingUpdates(&fakeStore{id: 2, statusVV: func() map[uint64]uint64 { return map[uint64]uint64{1: 1} }})
	c := refusingUpdates(&fakeStore{id: 3})
	addrA, _ := serve(t, a)
	addrB, _ := serve(t, b)
	addrC, _ := serve(t, c)
	cl := dial(t, []string{addrA, addrB, addrC})
	b.statusFail.Store(true)
	c.statusFail.Store(true)
	go func() {
		time.Sleep(50 * time.Millisecond)
		b.statusFail.Store(false)
	}()
	if v, err := final(t, cl.InvokeQuorum(t.Context(), client.Put("k", []byte("v")))); err != nil || v.Level != client.Quorum {
		t.Fatalf("quorum write through a 50 ms blip of b: %v, %v", v.Level, err)
	}

	// a again, as "b": the origin under a second address.
	twice := refusingUpdates(&fakeStore{id: 1, statusVV: func() map[uint64]uint64 { return map[uint64]uint64{1: 1} }})
	addrT, _ := serve(t, twice)
	cl2 := dial(t, []string{addrA, addrT})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	if _, err := final(t, cl2.InvokeQuorum(ctx, client.Put("k", []byte("v")))); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("quorum write whose only other endpoint is its origin: %v, want ErrUnavailable", err)
	}
}

// TestQuorumWriteWaitsForAMajority: a quorum write returns once the origin
// and one more of three replicas have received it (Continuous Partial
// Quorums §1: QUORUM), fails with the context's error while no other
// replica has, and with ErrUnavailable when none can answer.
func TestQuorumWriteWaitsForAMajority(t *testing.T) {
	var writtenAt atomic.Int64 // when a took the write (UnixNano), 0 before
	a := &fakeStore{id: 1, prelim: &api.Result{Ok: true}}
	a.script = func(req *api.InvokeRequest, stream grpc.ServerStreamingServer[api.ViewReply]) error {
		writtenAt.CompareAndSwap(0, time.Now().UnixNano())
		return stream.Send(&api.ViewReply{Final: true, Result: &api.Result{Ok: true}, Id: &api.OpID{Origin: 1, Seq: 7},
			Stamp: &api.Stamp{Replica: 1, Vv: map[uint64]uint64{1: 7}}})
	}
	const lag = 40 * time.Millisecond
	var bReceives atomic.Bool
	// Only a takes updates (b and c refuse them before running them, so
	// that the write lands at a whichever endpoint is nearest).
	b := refusingUpdates(&fakeStore{id: 2, statusVV: func() map[uint64]uint64 {
		at := writtenAt.Load()
		if bReceives.Load() && at != 0 && time.Since(time.Unix(0, at)) >= lag {
			return map[uint64]uint64{1: 7}
		}
		return map[uint64]uint64{1: 6}
	}})
	c := refusingUpdates(&fakeStore{id: 3, statusVV: func() map[uint64]uint64 { return map[uint64]uint64{1: 6, 3: 9} }})
	addrA, _ := serve(t, a)
	addrB, _ := serve(t, b)
	addrC, _ := serve(t, c)
	// Only a takes updates here: the others are asked their Status.
	cl := dial(t, []string{addrA, addrB, addrC})

	// No other replica receives it: the write waits until ctx ends.
	ctx, cancel := context.WithTimeout(t.Context(), 150*time.Millisecond)
	_, err := final(t, cl.InvokeQuorum(ctx, client.Put("k", []byte("v"))))
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("quorum write nobody else receives: %v, want the deadline", err)
	}

	// b receives it 40 ms after a took it.
	writtenAt.Store(0)
	bReceives.Store(true)
	before := b.statusCount()
	start := time.Now()
	v, err := final(t, cl.InvokeQuorum(t.Context(), client.Put("k", []byte("v"))))
	if err != nil {
		t.Fatal(err)
	}
	if v.Level != client.Quorum || !v.Value.OK || time.Since(start) < lag {
		t.Fatalf("quorum write: %v %+v after %v, want ok at quorum after at least %v", v.Level, v.Value, time.Since(start), lag)
	}
	if s, _ := client.StampOf(v); s.Op != (client.OpID{Origin: 1, Seq: 7}) {
		t.Fatalf("quorum write's stamp %+v, want operation 1:7", s)
	}
	if n := b.statusCount() - before; n < 2 {
		t.Fatalf("b was asked %d times, want it polled until it had the write", n)
	}

	// Neither b nor c answers: a majority cannot be known.
	b.statusFail.Store(true)
	c.statusFail.Store(true)
	if _, err := final(t, cl.InvokeQuorum(t.Context(), client.Put("k", []byte("v")))); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("quorum write with the others down: %v, want ErrUnavailable", err)
	}

	// One endpoint is its own majority.
	one := dial(t, []string{addrA})
	if v, err := final(t, one.InvokeQuorum(t.Context(), client.Put("k", []byte("v")))); err != nil || v.Level != client.Quorum {
		t.Fatalf("quorum write with one endpoint: %v, %v", v.Level, err)
	}
}

func TestQuorumReadWaitsForACatchUp(t *testing.T) {
	// a (near) and b have each received an operation the other has not;
	// a receives b's on the third read.
	var reads atomic.Int32
	a := &fakeStore{id: 1}
	a.script = func(req *api.InvokeRequest, stream grpc.ServerStreamingServer[api.ViewReply]) error {
		value, vv := "a", map[uint64]uint64{1: 3, 2: 1}
		if reads.Add(1) >= 3 {
			value, vv = "a with b's", map[uint64]uint64{1: 3, 2: 4}
		}
		return stream.Send(&api.ViewReply{Final: true, Result: &api.Result{Found: true, Value: []byte(value)},
			Stamp: &api.Stamp{Replica: 1, Vv: vv}})
	}
	b := &fakeStore{id: 2, delay: 50 * time.Millisecond}
	b.script = func(req *api.InvokeRequest, stream grpc.ServerStreamingServer[api.ViewReply]) error {
		return stream.Send(&api.ViewReply{Final: true, Result: &api.Result{Found: true, Value: []byte("b")},
			Stamp: &api.Stamp{Replica: 2, Vv: map[uint64]uint64{1: 2, 2: 4}}})
	}
	far := &fakeStore{id: 3, delay: 400 * time.Millisecond}
	addrA, _ := serve(t, a)
	addrB, _ := serve(t, b)
	addrF, _ := serve(t, far)
	cl := dial(t, []string{addrF, addrB, addrA})
	v, err := final(t, cl.InvokeQuorum(t.Context(), client.Get("k")))
	if err != nil {
		t.Fatal(err)
	}
	if string(v.Value.Value) != "a with b's" || reads.Load() != 3 || len(far.requests()) != 0 {
		t.Fatalf("concurrent states: %q after %d reads at a (%d at the far one), want %q after 3 and none",
			v.Value.Value, reads.Load(), len(far.requests()), "a with b's")
	}
	// The catch-up asks with the union of the first answers' version
	// vectors as min_vv (a replica holds the read until it has it; this
	// fake ignores it, so the client polls); the first round asks without.
	want := map[uint64]uint64{1: 3, 2: 4}
	for i, r := range a.requests() {
		if got := r.GetMinVv(); (i == 0) != (len(got) == 0) || (i > 0 && !maps.Equal(got, want)) {
			t.Errorf("read %d at a: min_vv %v, want none for the first and %v for the catch-up", i+1, got, want)
		}
	}
}

// TestQuorumReadE2E partitions replica 2 from the others' messages, writes
// weakly at replica 1 and checks that a quorum read over replicas 1 and 2
// returns the value replica 1 holds, while a weak read at replica 2 returns
// the older one.
func TestQuorumReadE2E(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := delayableCluster(ctx, t)
	one, err := client.Dial(ctx, cl.Endpoints[:1])
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	two, err := client.Dial(ctx, cl.Endpoints[1:2])
	if err != nil {
		t.Fatal(err)
	}
	defer two.Close()
	if _, err := one.InvokeStrong(ctx, client.Put("k", []byte("v0"))).Final(ctx); err != nil {
		t.Fatal(err)
	}
	// Replica 2 has v0, then hears nothing more from the others.
	for {
		v, err := two.InvokeWeak(ctx, client.Get("k")).Final(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(v.Value.Value) == "v0" {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := cl.SetReplicationDelay(2, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := one.InvokeWeak(ctx, client.Put("k", []byte("v1"))).Final(ctx); err != nil {
		t.Fatal(err)
	}
	weak, err := two.InvokeWeak(ctx, client.Get("k")).Final(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if string(weak.Value.Value) != "v0" {
		// Only if the 10 s had passed: the machine stalled that long.
		t.Skipf("replica 2 read %q while cut off, want v0: the delay had passed", weak.Value.Value)
	}
	// Both orders of the endpoints: whichever is nearer, replica 1's state
	// covers replica 2's.
	for _, eps := range [][]string{{cl.Endpoints[1], cl.Endpoints[0]}, {cl.Endpoints[0], cl.Endpoints[1]}} {
		q, err := client.Dial(ctx, eps)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			v, err := q.InvokeQuorum(ctx, client.Get("k")).Final(ctx)
			if err != nil {
				t.Fatal(err)
			}
			s, _ := client.StampOf(v)
			if string(v.Value.Value) != "v1" || v.Level != client.Quorum || s.Replica != 1 {
				t.Fatalf("quorum read %d over %v: %q at %v from replica %d, want v1 from replica 1 (replica 2 read %q)",
					i, eps, v.Value.Value, v.Level, s.Replica, weak.Value.Value)
			}
		}
		q.Close()
	}
}

// TestQuorumReadE2EIgnoresOtherKeys: replicas 1 and 2, cut off from each
// other's messages, each take a weak put of a key of their own; their
// states are then concurrent (each has received an operation the other has
// not), but a quorum read over the two of a key that neither put touched,
// or that only one of them has, returns at once, without waiting for them
// to agree: each answer says what its result depends on (Stamp.ReadVV),
// and one replica holds all of that. Comparing whole version vectors, each
// read would wait for the 10 s cut to end.
func TestQuorumReadE2EIgnoresOtherKeys(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := delayableCluster(ctx, t)
	var at [2]*client.Client
	for i := range at {
		c, err := client.Dial(ctx, cl.Endpoints[i:i+1])
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		at[i] = c
	}
	if _, err := at[0].InvokeStrong(ctx, client.Put("k", []byte("v0"))).Final(ctx); err != nil {
		t.Fatal(err)
	}
	for { // replica 2 has v0
		v, err := at[1].InvokeWeak(ctx, client.Get("k")).Final(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(v.Value.Value) == "v0" {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, id := range []uint64{1, 2} {
		if err := cl.SetReplicationDelay(id, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	cut := time.Now()
	for i, kv := range [][2]string{{"one", "x1"}, {"two", "x2"}} {
		if _, err := at[i].InvokeWeak(ctx, client.Put(kv[0], []byte(kv[1]))).Final(ctx); err != nil {
			t.Fatal(err)
		}
	}
	q, err := client.Dial(ctx, cl.Endpoints[:2])
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	var stamps []client.Stamp
	for _, c := range []struct{ key, want string }{{"k", "v0"}, {"one", "x1"}, {"two", "x2"}, {"k", "v0"}} {
		// Far less than the cut: a read that waits for it fails here.
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		v, err := q.InvokeQuorum(rctx, client.Get(c.key)).Final(rctx)
		rcancel()
		if err != nil {
			t.Fatalf("quorum read of %s: %v (%d reads waited for the replicas to agree)", c.key, err, q.Stats().QuorumWaits)
		}
		s, _ := client.StampOf(v)
		stamps = append(stamps, s)
		if string(v.Value.Value) != c.want || v.Level != client.Quorum {
			t.Fatalf("quorum read of %s: %q at %v from replica %d, want %q", c.key, v.Value.Value, v.Level, s.Replica, c.want)
		}
	}
	if time.Since(cut) >= 10*time.Second {
		t.Skip("the machine stalled past the 10 s cut: the replicas may have agreed meanwhile")
	}
	if w := q.Stats().QuorumWaits; w != 0 {
		t.Fatalf("%d quorum reads waited for the replicas to agree; want none (stamps %+v)", w, stamps)
	}
	if s := stamps[0]; s.ReadVV == nil || s.ReadVV[1] >= s.VV[1] && s.ReadVV[2] >= s.VV[2] {
		t.Fatalf("the read of k: ReadVV %v, VV %v; want it below the VV (the other keys' puts)", s.ReadVV, s.VV)
	}
}

// TestQuorumWriteE2E: with the replica the client writes at (its nearest)
// heard at once by nobody, one other replica hearing it 300 ms late and the
// third 10 s late, a quorum write through a client of all three replicas
// completes once the 300 ms one has it, and then a quorum read over every
// pair of replicas returns it, which a weak write does not promise (a read
// over the two others would miss it for 300 ms): two majorities share a
// replica (Continuous Partial Quorums §1, QUORUM-QUORUM).
func TestQuorumWriteE2E(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, all, origin := clusterWithAWrite(ctx, t, (*client.Client).InvokeQuorum)
	others := othersThan(origin)
	if err := cl.SetReplicationDelay(others[0], 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := cl.SetReplicationDelay(others[1], 10*time.Second); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := range 3 {
		val := fmt.Sprintf("v%d", i+1)
		w, err := all.InvokeQuorum(ctx, client.Put("k", []byte(val))).Final(ctx)
		if err != nil {
			t.Fatalf("quorum write %s: %v", val, err)
		}
		if w.Level != client.Quorum {
			t.Fatalf("quorum write's view at %v, want quorum", w.Level)
		}
		for _, pair := range [][]string{{cl.Endpoints[0], cl.Endpoints[1]}, {cl.Endpoints[1], cl.Endpoints[2]}, {cl.Endpoints[2], cl.Endpoints[0]}} {
			q, err := client.Dial(ctx, pair)
			if err != nil {
				t.Fatal(err)
			}
			v, err := q.InvokeQuorum(ctx, client.Get("k")).Final(ctx)
			q.Close()
			if err != nil {
				t.Fatal(err)
			}
			if string(v.Value.Value) != val {
				if time.Since(start) > 10*time.Second {
					t.Skipf("the machine stalled past the 10 s delay: its replica may have heard the write")
				}
				ws, _ := client.StampOf(w)
				t.Fatalf("quorum read over %v after quorum write %s (operation %d:%d): %q", pair, val, ws.Op.Origin, ws.Op.Seq, v.Value.Value)
			}
		}
	}
}

// clusterWithAWrite starts a delayableCluster, dials every replica, writes
// k = v0 with invoke, and returns the cluster, the client (closed when the
// test ends) and the replica the write went to.
func clusterWithAWrite(ctx context.Context, t *testing.T, invoke func(*client.Client, context.Context, client.Op) *correctable.Correctable[client.Result]) (*cluster.Cluster, *client.Client, uint64) {
	t.Helper()
	cl := delayableCluster(ctx, t)
	all, err := client.Dial(ctx, cl.Endpoints)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { all.Close() })
	w, err := invoke(all, ctx, client.Put("k", []byte("v0"))).Final(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := client.StampOf(w)
	return cl, all, s.Op.Origin
}

// othersThan returns the ids of the three replicas other than id.
func othersThan(id uint64) []uint64 {
	var out []uint64
	for r := uint64(1); r <= 3; r++ {
		if r != id {
			out = append(out, r)
		}
	}
	return out
}

// delayableCluster starts a three-replica cluster whose links towards each
// replica can be delayed (cluster.SetReplicationDelay), waits for its
// leader, and stops it when the test ends.
func delayableCluster(ctx context.Context, t *testing.T) *cluster.Cluster {
	t.Helper()
	return startedClusterWith(ctx, t, cluster.Options{ReplicationDelay: map[uint64]time.Duration{1: 0, 2: 0, 3: 0}})
}
