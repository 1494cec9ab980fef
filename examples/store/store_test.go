package store_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/correctable"
	"github.com/correctables/correctables/examples/internal/exampletest"
	"github.com/correctables/correctables/examples/store"
)

// TestClientBindingAndConfirmations runs the adapter on a real cluster, with
// the replicas' confirmations (Correctables §5.2) on and off.
func TestClientBindingAndConfirmations(t *testing.T) {
	c := exampletest.Cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	withConf := exampletest.Dial(t, c.Endpoints)
	without := exampletest.Dial(t, c.Endpoints, client.WithoutConfirmations())
	b := store.Client(withConf)
	value := bytes.Repeat([]byte("v"), 500)
	if _, err := store.Final(ctx, b, store.Put("k", value)); err != nil {
		t.Fatal(err)
	}
	// Every replica has the value: the preliminary view has it wherever
	// the nearest replica is.
	exampletest.Settle(ctx, t, c.Endpoints, b, []string{"k"})
	for _, tc := range []struct {
		name      string
		cl        *client.Client
		confirmed bool
	}{{"confirmations", withConf, true}, {"no confirmations", without, false}} {
		before := tc.cl.Stats()
		views := store.Read(ctx, store.Client(tc.cl), "k")
		var got []correctable.View[store.Result]
		for v := range views.AllViews() {
			got = append(got, v)
		}
		if err := views.Err(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if len(got) != 2 || got[0].Level != correctable.Eventual || !got[1].Final {
			t.Fatalf("%s: views %+v", tc.name, got)
		}
		for _, v := range got {
			if !v.Value.Found || !bytes.Equal(v.Value.Value, value) {
				t.Fatalf("%s: view %+v, want the value written", tc.name, v)
			}
		}
		if got[1].Confirmed != tc.confirmed {
			t.Fatalf("%s: final view confirmed %v, want %v", tc.name, got[1].Confirmed, tc.confirmed)
		}
		recv := tc.cl.Stats().BytesReceived - before.BytesReceived
		// Two views of the 500-byte value without confirmations, one with.
		if tc.confirmed && recv >= 1000 || !tc.confirmed && recv < 1000 {
			t.Fatalf("%s: %d bytes received for one read of a 500-byte value", tc.name, recv)
		}
	}
	// Queues and appends through the adapter.
	if _, err := store.Final(ctx, b, store.Enqueue("q", []byte("a"))); err != nil {
		t.Fatal(err)
	}
	r, err := store.Final(ctx, b, store.Dequeue("q"))
	if err != nil || !r.OK || string(r.Value) != "a" || r.Left != 0 {
		t.Fatalf("dequeue: %+v, %v", r, err)
	}
	if r, err := store.Final(ctx, b, store.Dequeue("q")); err != nil || r.OK {
		t.Fatalf("dequeue of an empty queue: %+v, %v", r, err)
	}
	if _, err := store.Final(ctx, b, store.Append("s", []byte("x,"))); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Final(ctx, b, store.Append("s", []byte("y,"))); err != nil {
		t.Fatal(err)
	}
	if r, err := store.Final(ctx, b, store.Get("s")); err != nil || string(r.Value) != "x,y," {
		t.Fatalf("get after appends: %+v, %v", r, err)
	}
	if _, err := store.Final(ctx, b, store.Op{Kind: 99, Key: "k"}); err == nil {
		t.Fatal("unknown operation kind accepted")
	}
}
