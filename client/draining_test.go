package client_test

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/correctable"
)

// A replica draining before its removal refuses an update before running
// it: the Client sends the update to the next endpoint (any other
// Unavailable after the request left stops an update there, see
// TestFailoverSafety).
func TestFailoverFromDrainingReplica(t *testing.T) {
	near := &fakeStore{id: 1, fail: status.Error(codes.Unavailable, "replica: "+api.DrainingMarker+"; use another replica")}
	// Far by 300 ms, so that the probes rank it second (see
	// TestFailoverSafety).
	far := &fakeStore{id: 2, prelim: resB, delay: 300 * time.Millisecond}
	nearAddr, _ := serve(t, near)
	farAddr, _ := serve(t, far)
	c := dial(t, []string{nearAddr, farAddr})
	if _, err := final(t, c.Put(t.Context(), "k", []byte("v"), correctable.Eventual)); err != nil {
		t.Fatalf("put: %v", err)
	}
	if n := len(near.requests()); n != 1 {
		t.Errorf("the draining replica got %d requests, want 1 (the probes did not rank it first)", n)
	}
	if n := len(far.requests()); n != 1 {
		t.Errorf("the next replica got %d requests, want 1", n)
	}
}

// A replica that refuses an operation as overloaded (ResourceExhausted: a
// replica fenced after its restart, or one with too many operations in
// flight) ran nothing: the Client tries the next endpoint, and the
// endpoint stays in the route. With every endpoint refusing, the
// operation fails with ErrOverloaded.
func TestFailoverFromRefusingReplica(t *testing.T) {
	near := &fakeStore{id: 1, fail: status.Error(codes.ResourceExhausted, "replica: "+api.FencedMarker+" ("+api.RefusedMarker+")")}
	far := &fakeStore{id: 2, prelim: resB, delay: 300 * time.Millisecond} // ranked second, as above
	nearAddr, _ := serve(t, near)
	farAddr, _ := serve(t, far)
	c := dial(t, []string{nearAddr, farAddr})
	for i := range 3 {
		if _, err := final(t, c.Put(t.Context(), "k", []byte("v"), correctable.Eventual)); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	if n := len(near.requests()); n != 3 {
		t.Errorf("the refusing replica got %d requests, want 3 (it stays first in the route)", n)
	}
	if n := len(far.requests()); n != 3 {
		t.Errorf("the next replica got %d requests, want 3", n)
	}
	if st := c.Stats(); st.Failovers != 3 || st.Failed != 0 {
		t.Errorf("Stats = %+v, want 3 failovers, none failed", st)
	}

	other := &fakeStore{id: 3, fail: status.Error(codes.ResourceExhausted, "replica: too many operations in flight ("+api.RefusedMarker+")"), delay: 300 * time.Millisecond}
	otherAddr, _ := serve(t, other)
	c2 := dial(t, []string{nearAddr, otherAddr})
	_, err := final(t, c2.Put(t.Context(), "k", []byte("v"), correctable.Eventual))
	if !errors.Is(err, client.ErrOverloaded) || !strings.Contains(err.Error(), nearAddr) || !strings.Contains(err.Error(), otherAddr) {
		t.Fatalf("every endpoint refusing: err = %v, want ErrOverloaded naming both endpoints", err)
	}
}

// A ResourceExhausted without api.RefusedMarker is gRPC's own (a message
// over a size limit, which the client raises after the replica ran the
// operation): an update is not sent to another replica, where it would
// run twice.
func TestNoFailoverOnUnmarkedResourceExhausted(t *testing.T) {
	near := &fakeStore{id: 1, fail: status.Error(codes.ResourceExhausted, "grpc: received message larger than max (65600 vs. 1024)")}
	far := &fakeStore{id: 2, prelim: resB, delay: 300 * time.Millisecond}
	nearAddr, _ := serve(t, near)
	farAddr, _ := serve(t, far)
	c := dial(t, []string{nearAddr, farAddr})
	_, err := final(t, c.Put(t.Context(), "k", []byte("v"), correctable.Eventual))
	if !errors.Is(err, client.ErrOverloaded) {
		t.Fatalf("err = %v, want ErrOverloaded", err)
	}
	if n := len(far.requests()); n != 0 {
		t.Fatalf("the next replica got %d requests, want 0: the update may have run at the first", n)
	}
}

// When every endpoint refuses an update as restarted and catching up
// (api.FencedMarker: the whole cluster restarted), the Client tries again
// shortly, as the fence lifts once a leader's first entry is applied; a
// refusal for another reason is not retried that way.
func TestRetryWhileEveryReplicaIsFenced(t *testing.T) {
	var refusals atomic.Int32
	refusals.Store(4)
	fencedErr := status.Error(codes.ResourceExhausted, "replica: "+api.FencedMarker+" ("+api.RefusedMarker+")")
	f := &fakeStore{id: 1, script: func(req *api.InvokeRequest, stream grpc.ServerStreamingServer[api.ViewReply]) error {
		if refusals.Add(-1) >= 0 {
			return fencedErr
		}
		return stream.Send(&api.ViewReply{Final: true, Result: resB, Id: &api.OpID{Origin: 1, Seq: 1}, Stamp: testStamp})
	}}
	addr, _ := serve(t, f)
	c := dial(t, []string{addr})
	if _, err := final(t, c.Put(t.Context(), "k", []byte("v"), correctable.Eventual)); err != nil {
		t.Fatalf("put while the replica is fenced for 4 tries: %v", err)
	}
	if n := len(f.requests()); n != 5 {
		t.Errorf("requests = %d, want 5 (4 refused, then taken)", n)
	}

	busy := &fakeStore{id: 2, fail: status.Error(codes.ResourceExhausted, "replica: too many operations in flight ("+api.RefusedMarker+")")}
	busyAddr, _ := serve(t, busy)
	c2 := dial(t, []string{busyAddr})
	if _, err := final(t, c2.Put(t.Context(), "k", []byte("v"), correctable.Eventual)); !errors.Is(err, client.ErrOverloaded) {
		t.Fatalf("put at an overloaded replica: %v, want ErrOverloaded", err)
	}
	if n := len(busy.requests()); n != 1 {
		t.Errorf("the overloaded replica got %d requests, want 1", n)
	}
}
