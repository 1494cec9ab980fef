package client_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/correctable"
	"github.com/correctables/correctables/internal/cluster"
)

// TestSLAE2E runs SLA Gets, Pileus's and the incremental one, on a real
// three-replica cluster. Latency bounds are loose (the test must pass on a
// loaded machine): it checks targets, the subSLA met, values and errors.
func TestSLAE2E(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := cluster.Start(cluster.Options{Dir: t.TempDir(), NoSync: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Stop()
	if err := cl.MoveLeader(ctx, 1); err != nil {
		t.Fatal(err)
	}
	c, err := client.Dial(ctx, cl.Endpoints)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := c.Monitor().Leader(); got != 1 {
		t.Fatalf("monitor's leader %d, want 1", got)
	}
	s := client.NewSession()
	if _, err := c.InvokeSession(ctx, s, client.Put("k", []byte("v1"))).Final(ctx); err != nil {
		t.Fatal(err)
	}
	loose := client.SLA{Name: "loose", Subs: []client.SubSLA{
		{Consistency: client.Guarantee(correctable.Strong), Latency: 20 * time.Second, Utility: 1},
		{Consistency: client.Guarantee(correctable.Eventual), Latency: 20 * time.Second, Utility: 0.5},
	}}
	r, err := c.GetSLA(ctx, s, loose, "k")
	if err != nil {
		t.Fatal(err)
	}
	if r.SubSLA != 0 || r.Target != 0 || r.TargetReplica != 1 || string(r.Result.Value) != "v1" || r.Utility != 1 || !r.Guarantees.Strong {
		t.Fatalf("GetSLA: %+v", r)
	}

	// Read-my-writes is met at every replica once they have the write.
	rmw := client.SLA{Name: "rmw", Subs: []client.SubSLA{{Consistency: client.Guarantee(correctable.ReadMyWrites), Latency: 20 * time.Second, Utility: 1}}}
	for range 3 {
		r, err := c.GetSLA(ctx, s, rmw, "k")
		if err == nil && string(r.Result.Value) != "v1" {
			t.Fatalf("read-my-writes met with %q", r.Result.Value)
		}
	}

	// An SLA nobody can meet: an error naming it.
	impossible := client.SLA{Name: "impossible", Subs: []client.SubSLA{{Consistency: client.Guarantee(correctable.Strong), Latency: time.Nanosecond, Utility: 1}}}
	if _, err := c.GetSLA(ctx, s, impossible, "k"); !errors.Is(err, client.ErrSLANotMet) || !strings.Contains(err.Error(), `"impossible"`) {
		t.Fatalf("GetSLA under an impossible SLA: %v", err)
	}

	// The incremental SLA: views tagged with the subSLA met, the last one
	// the top subSLA.
	cor := c.InvokeSLA(ctx, s, loose, "k")
	var views []correctable.View[client.SLAResult]
	for v := range cor.AllViews() {
		views = append(views, v)
	}
	if err := cor.Err(); err != nil {
		t.Fatal(err)
	}
	last := views[len(views)-1]
	if !last.Final || last.Value.SubSLA != 0 || string(last.Value.Result.Value) != "v1" || last.Level.Name() != "loose#1" {
		t.Fatalf("final view %+v", last)
	}
	for i, v := range views {
		if v.Value.Utility != loose.Subs[v.Value.SubSLA].Utility {
			t.Fatalf("view %d: utility %v for subSLA %d", i, v.Value.Utility, v.Value.SubSLA+1)
		}
		if i > 0 && v.Value.SubSLA > views[i-1].Value.SubSLA {
			t.Fatalf("view %d met subSLA %d after %d", i, v.Value.SubSLA+1, views[i-1].Value.SubSLA+1)
		}
	}
	_, err = c.InvokeSLA(ctx, s, impossible, "k").Final(ctx)
	if !errors.Is(err, client.ErrSLANotMet) || !strings.Contains(err.Error(), `"impossible"`) {
		t.Fatalf("InvokeSLA under an impossible SLA: %v", err)
	}
	// A malformed SLA is refused before anything is sent.
	if _, err := c.GetSLA(ctx, s, client.SLA{Name: "empty"}, "k"); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("GetSLA under an empty SLA: %v", err)
	}
}
