package server

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/internal/replica"
)

// cutGossip starts a Pebble cluster of three in which replica x's gossip
// and anti-entropy reach nobody while cut is set, and its no-op never
// comes, so that its weak writes stay on it alone until cut is cleared.
func cutGossip(t *testing.T, x uint64, cut *atomic.Bool, tweak func(*Config)) *pebbleCluster {
	t.Helper()
	return startPebbleCluster(t, 3, func(id uint64, c *Config) {
		if tweak != nil {
			tweak(c)
		}
		if id == x {
			c.NoopTicks = 1 << 30
			c.dropPeerMsg = func(m replica.Message) bool { return cut.Load() && m.Type != replica.MsgRaft }
		}
	})
}

// A weak read with a min_vv waits at its replica until the replica has
// received what min_vv counts, and then runs on a state that includes it
// (api.InvokeRequest.min_vv; the catch-up of a quorum read, client
// InvokeQuorum, asks so instead of polling). Replica 3's weak write reaches
// replica 1 only once the gossip cut heals: the read at replica 1 that
// names it must not answer before, and must find the value after. A
// replica that ignored min_vv answered at once, without the value.
func TestWeakReadWaitsForMinVV(t *testing.T) {
	const x = 3
	var cut atomic.Bool
	cut.Store(true)
	pc := cutGossip(t, x, &cut, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	strongPutUntilFinal(ctx, t, dial(t, pc.peers[1]), time.Second)
	w, err := dial(t, pc.peers[x]).Call(ctx, &api.InvokeRequest{Op: put("k", "from-3"), Preliminary: true})
	if err != nil {
		t.Fatalf("weak write at replica %d: %v", x, err)
	}
	id := w.GetId()
	if id.GetOrigin() != x || id.GetSeq() == 0 {
		t.Fatalf("weak write's id %v, want one of replica %d", id, x)
	}
	get := &api.Op{Kind: api.Kind_KIND_GET, Key: "k"}
	c1 := dial(t, pc.peers[1])
	// Without min_vv, replica 1 answers at once, without the write.
	if v, err := c1.Call(ctx, &api.InvokeRequest{Op: get, Preliminary: true}); err != nil || v.GetResult().GetFound() {
		t.Fatalf("replica 1 has replica %d's write before the cut heals (the cut does not hold): %v %v", x, v, err)
	}
	minVV := map[uint64]uint64{x: id.GetSeq()}
	got := inBackground(func() (*api.ViewReply, error) {
		return c1.Call(ctx, &api.InvokeRequest{Op: get, Preliminary: true, MinVv: minVV})
	})
	gotStatus := inBackground(func() (*api.StatusReply, error) {
		return c1.Status(ctx, &api.StatusRequest{MinVv: minVV})
	})
	// Let the read reach replica 1 and wait there, then heal the cut.
	select {
	case a := <-got:
		t.Fatalf("the read with min_vv {%d: %d} answered while replica 1 could not have the write: %v %v", x, id.GetSeq(), a.r, a.err)
	case a := <-gotStatus:
		t.Fatalf("Status with min_vv {%d: %d} answered while replica 1 could not have the write: %v %v", x, id.GetSeq(), a.r, a.err)
	case <-time.After(300 * time.Millisecond):
	}
	healed := time.Now()
	cut.Store(false)
	a := <-got
	if a.err != nil {
		t.Fatalf("the read with min_vv after the cut healed: %v", a.err)
	}
	if a.at.Before(healed) {
		t.Errorf("the read answered at %v, before the cut healed at %v", a.at, healed)
	}
	if string(a.r.GetResult().GetValue()) != "from-3" {
		t.Errorf("the read with min_vv {%d: %d} got %v, want replica %d's value", x, id.GetSeq(), a.r.GetResult(), x)
	}
	if s := a.r.GetStamp().GetVv()[x]; s < id.GetSeq() {
		t.Errorf("the read's stamp counts %d operations of replica %d, want at least %d", s, x, id.GetSeq())
	}
	sa := <-gotStatus
	if sa.err != nil {
		t.Fatalf("Status with min_vv after the cut healed: %v", sa.err)
	}
	if sa.at.Before(healed) || sa.r.GetVv()[x] < id.GetSeq() {
		t.Errorf("Status with min_vv {%d: %d} answered at %v (the cut healed at %v) with vv %v", x, id.GetSeq(), sa.at, healed, sa.r.GetVv())
	}
}

// answered is a call's reply or error and when it came (inBackground).
type answered[R any] struct {
	r   R
	err error
	at  time.Time
}

// inBackground makes the call f in a goroutine and returns where its
// answer comes.
func inBackground[R any](f func() (R, error)) <-chan answered[R] {
	out := make(chan answered[R], 1)
	go func() {
		r, err := f()
		out <- answered[R]{r, err, time.Now()}
	}()
	return out
}

// A replica that does not receive what a read's min_vv counts within
// Config.MinVVWait refuses the read before running it (ResourceExhausted
// with api.RefusedMarker, which the client takes as "ask again or
// elsewhere"), and the call's own deadline ends the wait sooner.
func TestWeakReadMinVVWaitBound(t *testing.T) {
	const x = 3
	var cut atomic.Bool
	cut.Store(true)
	pc := cutGossip(t, x, &cut, func(c *Config) { c.MinVVWait = 300 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	strongPutUntilFinal(ctx, t, dial(t, pc.peers[1]), time.Second)
	w, err := dial(t, pc.peers[x]).Call(ctx, &api.InvokeRequest{Op: put("k", "from-3"), Preliminary: true})
	if err != nil {
		t.Fatalf("weak write at replica %d: %v", x, err)
	}
	read := &api.InvokeRequest{Op: &api.Op{Kind: api.Kind_KIND_GET, Key: "k"}, Preliminary: true, MinVv: map[uint64]uint64{x: w.GetId().GetSeq()}}
	c1 := dial(t, pc.peers[1])
	_, err = c1.Call(ctx, read)
	if st, _ := status.FromError(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), api.RefusedMarker) || !strings.Contains(st.Message(), "min_vv") {
		t.Fatalf("a read whose min_vv replica 1 cannot cover: %v, want ResourceExhausted saying min_vv and %q", err, api.RefusedMarker)
	}
	// Status answers at the bound with what the replica has.
	start := time.Now()
	r, err := c1.Status(ctx, &api.StatusRequest{MinVv: map[uint64]uint64{x: w.GetId().GetSeq()}})
	if err != nil || r.GetVv()[x] >= w.GetId().GetSeq() {
		t.Fatalf("Status with a min_vv replica 1 cannot cover: %v %v, want its vv without the write", r, err)
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("Status with a min_vv replica 1 cannot cover answered after %v, before its bound of 300ms", took)
	}
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelShort()
	if _, err := c1.Call(short, read); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("the same read with a 50ms deadline: %v, want DeadlineExceeded", err)
	}
	// The waits ended: replica 1 holds none of them.
	deadline := time.Now().Add(10 * time.Second)
	for {
		done := make(chan int, 1)
		pc.servers[1].do <- func(*replica.Replica) { done <- len(pc.servers[1].behind) }
		n := <-done
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica 1 still holds %d reads waiting for their min_vv after their callers left", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// min_vv is for weak reads that ask for the preliminary view only: on any
// other request, with origin 0, or with more than MaxMinVV entries it is
// InvalidArgument, and an update that carries it does not run.
func TestMinVVInvalid(t *testing.T) {
	pc := startPebbleCluster(t, 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := dial(t, pc.peers[1])
	strongPutUntilFinal(ctx, t, c, time.Second)
	get := &api.Op{Kind: api.Kind_KIND_GET, Key: "k"}
	big := map[uint64]uint64{}
	for i := range MaxMinVV + 1 {
		big[uint64(i+1)] = 1
	}
	for name, req := range map[string]*api.InvokeRequest{
		"weak update":  {Op: put("k", "v"), Preliminary: true, MinVv: map[uint64]uint64{1: 1}},
		"strong read":  {Op: get, Final: true, Strong: true, MinVv: map[uint64]uint64{1: 1}},
		"origin 0":     {Op: get, Preliminary: true, MinVv: map[uint64]uint64{0: 1}},
		"1025 entries": {Op: get, Preliminary: true, MinVv: big},
	} {
		_, err := c.Call(ctx, req)
		if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "min_vv") {
			t.Errorf("%s with min_vv: %v, want InvalidArgument naming min_vv", name, err)
		}
	}
	for name, m := range map[string]map[uint64]uint64{"origin 0": {0: 1}, "1025 entries": big} {
		_, err := c.Status(ctx, &api.StatusRequest{MinVv: m})
		if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "min_vv") {
			t.Errorf("Status with min_vv of %s: %v, want InvalidArgument naming min_vv", name, err)
		}
	}
	if v, err := c.Call(ctx, &api.InvokeRequest{Op: get, Final: true, Strong: true}); err != nil || v.GetResult().GetFound() {
		t.Errorf("the refused weak update with min_vv ran: %v %v", v, err)
	}
	// read_vv is for reads that ask for the preliminary view; a weak read
	// that asks for it gets it, with every origin of the stamp's vv.
	for name, req := range map[string]*api.InvokeRequest{
		"weak update":              {Op: put("k", "v2"), Preliminary: true, ReadVv: true},
		"strong update":            {Op: put("k", "v2"), Final: true, Strong: true, ReadVv: true},
		"strong read of the final": {Op: get, Final: true, Strong: true, ReadVv: true},
	} {
		_, err := c.Call(ctx, req)
		if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "read_vv") {
			t.Errorf("%s with read_vv: %v, want InvalidArgument naming read_vv", name, err)
		}
	}
	if v, err := c.Call(ctx, &api.InvokeRequest{Op: get, Final: true, Strong: true}); err != nil || v.GetResult().GetFound() {
		t.Errorf("a refused update with read_vv ran: %v %v", v, err)
	}
	v, err := c.Call(ctx, &api.InvokeRequest{Op: get, Preliminary: true, ReadVv: true})
	if rv, vv := v.GetStamp().GetReadVv(), v.GetStamp().GetVv(); err != nil || len(rv) == 0 || len(rv) != len(vv) {
		t.Errorf("a weak read with read_vv: read_vv %v, vv %v, %v; want one entry per origin of the vv", rv, vv, err)
	}
	// A min_vv the replica covers (or of zero operations) runs at once.
	for _, vv := range []map[uint64]uint64{{1: 1}, {7: 0}} {
		if _, err := c.Call(ctx, &api.InvokeRequest{Op: get, Preliminary: true, MinVv: vv}); err != nil {
			t.Errorf("a read with min_vv %v: %v", vv, err)
		}
	}
}
