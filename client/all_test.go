package client_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/client"
)

// TestAllWriteWaitsForEveryReplica: an update at All returns only once
// every other replica reports that it has received it, where one at Quorum
// returns after the first (Continuous Partial Quorums §1: three/all); with
// one replica unable to answer it fails with ErrUnavailable.
func TestAllWriteWaitsForEveryReplica(t *testing.T) {
	var writtenAt atomic.Int64 // when a took the latest write (UnixNano)
	a := &fakeStore{id: 1}
	a.script = func(req *api.InvokeRequest, stream grpc.ServerStreamingServer[api.ViewReply]) error {
		writtenAt.Store(time.Now().UnixNano())
		return stream.Send(&api.ViewReply{Final: true, Result: &api.Result{Ok: true}, Id: &api.OpID{Origin: 1, Seq: 7},
			Stamp: &api.Stamp{Replica: 1, Vv: map[uint64]uint64{1: 7}}})
	}
	// receivesAfter is a replica that has operation 1:7 once lag has passed
	// since a took the write.
	receivesAfter := func(id uint64, lag time.Duration) *fakeStore {
		return refusingUpdates(&fakeStore{id: id, statusVV: func() map[uint64]uint64 {
			if time.Since(time.Unix(0, writtenAt.Load())) >= lag {
				return map[uint64]uint64{1: 7}
			}
			return map[uint64]uint64{1: 6}
		}})
	}
	const lagB, lagC = 20 * time.Millisecond, 150 * time.Millisecond
	b, c := receivesAfter(2, lagB), receivesAfter(3, lagC)
	addrA, _ := serve(t, a)
	addrB, _ := serve(t, b)
	addrC, _ := serve(t, c)
	cl := dial(t, []string{addrA, addrB, addrC})

	start := time.Now()
	v, err := final(t, cl.InvokeAll(t.Context(), client.Put("k", []byte("v"))))
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); v.Level != client.All || !v.Value.OK || took < lagC {
		t.Fatalf("write at all: %v %+v after %v, want ok at all after at least %v (c's lag)", v.Level, v.Value, took, lagC)
	}
	if s, _ := client.StampOf(v); s.Op != (client.OpID{Origin: 1, Seq: 7}) {
		t.Fatalf("write at all's stamp %+v, want operation 1:7", s)
	}
	// c cannot answer: every replica's receipt cannot be known.
	c.statusFail.Store(true)
	if _, err := final(t, cl.InvokeAll(t.Context(), client.Put("k", []byte("v")))); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("write at all with c failing: %v, want ErrUnavailable", err)
	}
	// A quorum write still completes.
	if _, err := final(t, cl.InvokeQuorum(t.Context(), client.Put("k", []byte("v")))); err != nil {
		t.Fatalf("quorum write with c failing: %v", err)
	}
	// c is now known to be down: the next update at all is refused before
	// it runs anywhere.
	before := len(a.requests())
	if _, err := final(t, cl.InvokeAll(t.Context(), client.Put("k", []byte("v")))); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("write at all with c known down: %v, want ErrUnavailable", err)
	}
	if n := len(a.requests()) - before; n != 0 {
		t.Fatalf("write at all with c known down ran at a (%d requests), want refused before running", n)
	}

	// A CPQ policy over updates at All: every update drawn at p = 1 is
	// at All, every read stays weak (a new client: the first one's probes
	// are an hour apart, and c is still down to it).
	c.statusFail.Store(false)
	cl = dial(t, []string{addrA, addrB, addrC})
	pol, err := client.NewCPQ(client.CPQConfig{WriteP: 1, AllWrites: true, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := final(t, cl.InvokeCPQ(t.Context(), client.Put("k", []byte("v")), pol)); err != nil || v.Level != client.All {
		t.Fatalf("CPQ update at p = 1 with AllWrites: %v, %v, want a view at all", v.Level, err)
	}
	if _, err := client.NewCPQ(client.CPQConfig{AllWrites: true, QuorumWrites: true}); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("CPQ with AllWrites and QuorumWrites: %v, want ErrInvalidArgument", err)
	}
}

// TestAllReadAsksEveryReplica: a read at All asks every endpoint at once
// (no hedge to wait for), returns a state that covers what every answer's
// result depends on, and fails with ErrUnavailable when one endpoint cannot
// answer, where a quorum read goes on with the other two.
func TestAllReadAsksEveryReplica(t *testing.T) {
	// c is the slowest and the freshest: a quorum read of the nearest two
	// does not see its value, a read at all does.
	a, b, c := stamped(1, "old", 3, 0), stamped(2, "new", 5, 0), stamped(3, "newest", 9, 200*time.Millisecond)
	addrA, _ := serve(t, a)
	addrB, _ := serve(t, b)
	addrC, srvC := serve(t, c)
	cl := dial(t, []string{addrA, addrB, addrC})

	v, err := final(t, cl.InvokeAll(t.Context(), client.Get("k")))
	if err != nil {
		t.Fatal(err)
	}
	if v.Level != client.All || string(v.Value.Value) != "newest" {
		t.Fatalf("read at all: %v %q, want %q at all", v.Level, v.Value.Value, "newest")
	}
	for i, f := range []*fakeStore{a, b, c} {
		if n := len(f.requests()); n != 1 {
			t.Fatalf("replica %d got %d requests, want 1", i+1, n)
		}
	}
	if v, err := final(t, cl.InvokeQuorum(t.Context(), client.Get("k"))); err != nil || string(v.Value.Value) != "new" {
		t.Fatalf("quorum read: %q, %v, want %q from the nearest two", v.Value.Value, err, "new")
	}

	srvC.Stop()
	if _, err := final(t, cl.InvokeAll(t.Context(), client.Get("k"))); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("read at all with c down: %v, want ErrUnavailable", err)
	}
	if v, err := final(t, cl.InvokeQuorum(t.Context(), client.Get("k"))); err != nil || v.Level != client.Quorum {
		t.Fatalf("quorum read with c down: %v, %v", v.Level, err)
	}
}

// TestAllWriteE2E: on a real cluster whose third replica hears from the
// others only after a second, a write at All returns once that replica has
// it, and a weak read of each replica on its own then returns it
// (R = 1, W = N).
func TestAllWriteE2E(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, all, origin := clusterWithAWrite(ctx, t, (*client.Client).InvokeAll)
	far := othersThan(origin)[1] // a replica other than the writes' origin
	const lag = time.Second
	if err := cl.SetReplicationDelay(far, lag); err != nil {
		t.Fatal(err)
	}
	ones := make([]*client.Client, len(cl.Endpoints))
	for i, ep := range cl.Endpoints {
		var err error
		if ones[i], err = client.Dial(ctx, []string{ep}); err != nil {
			t.Fatal(err)
		}
		defer ones[i].Close()
	}
	for i := range 3 {
		val := fmt.Sprintf("v%d", i+1)
		start := time.Now()
		w, err := all.InvokeAll(ctx, client.Put("k", []byte(val))).Final(ctx)
		if err != nil {
			t.Fatalf("write at all %s: %v", val, err)
		}
		if w.Level != client.All {
			t.Fatalf("write at all's view at %v, want all", w.Level)
		}
		if ws, _ := client.StampOf(w); ws.Op.Origin != origin {
			t.Skipf("write %s went to replica %d, not %d: the nearest replica changed", val, ws.Op.Origin, origin)
		}
		if took := time.Since(start); took < lag/2 {
			t.Fatalf("write at all %s returned after %v, before replica %d (%v behind) could have it", val, took, far, lag)
		}
		for j, one := range ones {
			v, err := one.InvokeWeak(ctx, client.Get("k")).Final(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if string(v.Value.Value) != val {
				t.Fatalf("weak read of %s after write at all %s: %q", cl.Endpoints[j], val, v.Value.Value)
			}
		}
	}
}
