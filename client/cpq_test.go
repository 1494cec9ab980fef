package client_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/correctable"
	"github.com/correctables/correctables/internal/gamma"
)

func TestCPQDraws(t *testing.T) {
	const n = 20_000
	p, err := client.NewCPQ(client.CPQConfig{ReadP: 0.3, WriteP: 0.8, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	var reads, writes int
	for range n {
		if s, _ := p.Choose(client.Get("k")); s {
			reads++
		}
		if s, _ := p.Choose(client.Put("k", nil)); s {
			writes++
		}
	}
	// Binomial(20,000, p): the standard deviation is under 0.0033.
	if f := float64(reads) / n; math.Abs(f-0.3) > 0.02 {
		t.Errorf("reads strong %.3f of the time, want 0.3", f)
	}
	if f := float64(writes) / n; math.Abs(f-0.8) > 0.02 {
		t.Errorf("writes strong %.3f of the time, want 0.8", f)
	}
}

func TestCPQReplaysWithItsSeed(t *testing.T) {
	draw := func(seed uint64) []bool {
		p, err := client.NewCPQ(client.CPQConfig{ReadP: 0.5, WriteP: 0.5, Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		out := make([]bool, 200)
		for i := range out {
			out[i], _ = p.Choose(client.Get("k"))
		}
		return out
	}
	a, b, c := draw(1), draw(1), draw(2)
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatal("the same seed drew different levels")
	}
	if fmt.Sprint(a) == fmt.Sprint(c) {
		t.Fatal("seeds 1 and 2 drew the same 200 levels")
	}
}

func TestTraceRecorderBounds(t *testing.T) {
	if r := client.NewTraceRecorder(0); r.Len() != 0 || r.Records(0) != nil || r.Records(-1) != nil {
		t.Fatal("an empty recorder returned records")
	}
}

func TestCPQBounds(t *testing.T) {
	for _, cfg := range []client.CPQConfig{
		{ReadP: -0.1}, {WriteP: 1.01}, {ReadP: math.NaN()}, {ReadDelay: -time.Millisecond},
		{ReadDelay: client.MaxReadDelay + 1},
	} {
		if _, err := client.NewCPQ(cfg); !errors.Is(err, client.ErrInvalidArgument) {
			t.Errorf("NewCPQ(%+v): %v, want ErrInvalidArgument", cfg, err)
		}
	}
	p, err := client.NewCPQ(client.CPQConfig{ReadP: 0.2, WriteP: 0.4, ReadDelay: client.MaxReadDelay})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.SetP(0.5, 2); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("SetP(0.5, 2): %v", err)
	}
	if r, w := p.P(); r != 0.2 || w != 0.4 {
		t.Fatalf("a refused SetP changed p to %v, %v", r, w)
	}
	if err := p.SetReadDelay(-1); !errors.Is(err, client.ErrInvalidArgument) || p.ReadDelay() != client.MaxReadDelay {
		t.Fatalf("SetReadDelay(-1): %v, delay now %v", err, p.ReadDelay())
	}
	// p = 1 and p = 0 are the two levels, whatever the draw.
	if err := p.SetP(1, 0); err != nil {
		t.Fatal(err)
	}
	for range 100 {
		if s, _ := p.Choose(client.Get("k")); !s {
			t.Fatal("a read at p = 1 drew the weak level")
		}
		if s, d := p.Choose(client.Put("k", nil)); s || d != 0 {
			t.Fatalf("a write at p = 0 drew strong %v, delay %v (delays are for reads)", s, d)
		}
	}
}

// TestCPQOnClusterE2E runs CPQ on a real three-replica cluster with one
// client per replica, all recording one trace: at p = 1 every operation is
// strong and the trace must be linearizable (Γ = 0); weak reads with an
// artificial delay take at least the delay, and their trace interval starts
// before it.
func TestCPQOnClusterE2E(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := startedCluster(ctx, t)
	rec := client.NewTraceRecorder(10_000)
	var clients []*client.Client
	for _, ep := range cl.Endpoints {
		c, err := client.Dial(ctx, []string{ep}, client.WithTraceRecorder(rec))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
	}
	strong, err := client.NewCPQ(client.CPQConfig{ReadP: 1, WriteP: 1, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for i, c := range clients {
		wg.Go(func() {
			for j := range 40 {
				key := fmt.Sprintf("k%d", j%3)
				op := client.Get(key)
				if j%3 == i {
					op = client.Put(key, fmt.Appendf(nil, "c%d-%d", i, j))
				}
				v, err := c.InvokeCPQ(ctx, op, strong).Final(ctx)
				if err != nil {
					errs <- err
					return
				}
				if v.Level != correctable.Strong {
					errs <- fmt.Errorf("a view at %v with p = 1", v.Level)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	ops := gamma.FromRecords(rec.Records(0))
	if len(ops) != 120 || rec.Dropped() != 0 {
		t.Fatalf("%d records (%d dropped), want 120", len(ops), rec.Dropped())
	}
	if got := rec.Records(100); len(got) != 20 || got[0] != rec.Records(0)[100] {
		t.Fatalf("Records(100) returned %d records", len(got))
	}
	rep, err := gamma.Score(ops, gamma.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Gamma != 0 || rep.Writes == 0 || rep.Reads == 0 || rep.Unmatched != 0 {
		t.Fatalf("strong operations only: %+v, want Γ = 0 and no unmatched read", rep)
	}

	// Artificial delay before a weak read.
	const delay = 30 * time.Millisecond
	ad, err := client.NewCPQ(client.CPQConfig{ReadDelay: delay, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	n := rec.Len()
	v, err := clients[0].InvokeCPQ(ctx, client.Get("k0"), ad).Final(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v.Level != correctable.Eventual || v.Elapsed < delay {
		t.Fatalf("delayed weak read: level %v after %v, want eventual after at least %v", v.Level, v.Elapsed, delay)
	}
	got := rec.Records(n)
	if len(got) != 1 || got[0].Strong || time.Duration(got[0].Finish-got[0].Start) < delay {
		t.Fatalf("delayed weak read recorded as %+v", got)
	}

	// A full recorder drops and counts.
	small := client.NewTraceRecorder(1)
	c, err := client.Dial(ctx, cl.Endpoints[:1], client.WithTraceRecorder(small))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 3 {
		if _, err := c.InvokeWeak(ctx, client.Get("k0")).Final(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if small.Len() != 1 || small.Dropped() != 2 {
		t.Fatalf("a recorder of capacity 1 holds %d records and dropped %d after 3 reads", small.Len(), small.Dropped())
	}
}
