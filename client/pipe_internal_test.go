package client

import (
	"testing"

	"github.com/correctables/correctables/api"
)

// TestPipeHoldFor: only weak reads (answered as they arrive, off the
// replica's loop) are held for the next reply; writes, strong operations
// and transactions that write are answered at the end of a replica's round
// and get the short hold (see pipeEager).
func TestPipeHoldFor(t *testing.T) {
	write := &api.Write{Key: "k"}
	for _, tc := range []struct {
		name string
		req  *api.InvokeRequest
		want bool // the read hold
	}{
		{"weak get", &api.InvokeRequest{Op: &api.Op{Kind: api.Kind_KIND_GET, Key: "k"}}, true},
		{"weak scan", &api.InvokeRequest{Op: &api.Op{Kind: api.Kind_KIND_SCAN}}, true},
		{"weak read-only txn", &api.InvokeRequest{Op: &api.Op{Kind: api.Kind_KIND_TXN, Txn: &api.Txn{Guards: []*api.Guard{{Key: "k"}}}}}, true},
		{"strong get", &api.InvokeRequest{Op: &api.Op{Kind: api.Kind_KIND_GET, Key: "k"}, Strong: true}, false},
		{"weak put", &api.InvokeRequest{Op: &api.Op{Kind: api.Kind_KIND_PUT, Key: "k"}}, false},
		{"strong put", &api.InvokeRequest{Op: &api.Op{Kind: api.Kind_KIND_PUT, Key: "k"}, Strong: true}, false},
		{"weak noop", &api.InvokeRequest{Op: &api.Op{Kind: api.Kind_KIND_NOOP}}, false},
		{"txn writing on success", &api.InvokeRequest{Op: &api.Op{Kind: api.Kind_KIND_TXN, Txn: &api.Txn{ThenWrites: []*api.Write{write}}}}, false},
		{"txn writing on failure", &api.InvokeRequest{Op: &api.Op{Kind: api.Kind_KIND_TXN, Txn: &api.Txn{ElseWrites: []*api.Write{write}}}}, false},
	} {
		want := pipeHold
		if tc.want {
			want = pipeReadHold
		}
		if got := holdFor(tc.req); got != want {
			t.Errorf("%s: hold %v, want %v", tc.name, got, want)
		}
	}
	if pipeHold >= pipeReadHold {
		t.Fatalf("pipeHold %v not shorter than pipeReadHold %v", pipeHold, pipeReadHold)
	}
}
