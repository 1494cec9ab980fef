package client_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/correctable"
	"github.com/correctables/correctables/internal/cluster"
)

// TestStrongOnlyUpdatesGoToTheLeader: on an emulated WAN where replica 1 is
// the nearest and replica 3 leads, an update that asks for its final view
// only goes to the leader (one write there, overlapping its followers'),
// while an update that wants the preliminary view too, and a strong read,
// still go to the nearest replica.
func TestStrongOnlyUpdatesGoToTheLeader(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := cluster.Start(cluster.Options{Dir: t.TempDir(), NoSync: true, WAN: "ec2-2016", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Stop()
	if err := cl.MoveLeader(ctx, 3); err != nil {
		t.Fatal(err)
	}
	// The trace of an operation comes after its final view: wait for it.
	endpoints := make(chan string, 16)
	// The client orders replicas by the median of its last probes' round
	// trips: on a machine busy enough to hold a probe tens of milliseconds
	// (the suite under -race with both cores loaded: Dial's three probes
	// once put replica 1 at 42 ms, behind replica 2's 32), the order the
	// WAN gives (replica 1 in the client's region, 2 about 25 ms away, 3
	// about 90) shows once the window holds more probes. Probe often and
	// wait for it.
	c, err := client.Dial(ctx, cl.Endpoints, client.WithProbeInterval(20*time.Millisecond), client.WithOpTrace(func(tr client.OpTrace) {
		endpoints <- tr.Endpoint
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for eps := c.Endpoints(); eps[0].Replica != 1; eps = c.Endpoints() {
		if ctx.Err() != nil {
			t.Fatalf("endpoints %+v: want replica 1 nearest", eps)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// nearest reports whether addr was the client's nearest endpoint just
	// before or just after an operation (a probe in between may reorder).
	nearest := func(addr, before string) bool { return addr == before || addr == c.Endpoints()[0].Address }
	last := func() string {
		t.Helper()
		select {
		case e := <-endpoints:
			return e
		case <-ctx.Done():
			t.Fatal("no trace of the operation")
			return ""
		}
	}
	for i := range 3 {
		if _, err := c.InvokeStrong(ctx, client.Put("k", []byte{byte(i)})).Final(ctx); err != nil {
			t.Fatal(err)
		}
		if got := last(); got != cl.Endpoints[2] {
			t.Fatalf("strong put %d went to %s; want the leader, replica 3 at %s", i, got, cl.Endpoints[2])
		}
	}
	before := c.Endpoints()[0].Address
	if _, err := c.Invoke(ctx, client.Put("k", []byte("both")), correctable.Eventual, correctable.Strong).Final(ctx); err != nil {
		t.Fatal(err)
	}
	if got := last(); got == cl.Endpoints[2] || !nearest(got, before) {
		t.Fatalf("a put with both views went to %s; want the nearest (%s), not the leader", got, before)
	}
	before = c.Endpoints()[0].Address
	if _, err := c.InvokeStrong(ctx, client.Get("k")).Final(ctx); err != nil {
		t.Fatal(err)
	}
	if got := last(); got == cl.Endpoints[2] || !nearest(got, before) {
		t.Fatalf("a strong get went to %s; want the nearest (%s), not the leader", got, before)
	}
}
