package client_test

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/correctables/correctables/api"
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
