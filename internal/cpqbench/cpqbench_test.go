package cpqbench

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/correctables/correctables/internal/cluster"
	"github.com/correctables/correctables/internal/cpqctl"
	"github.com/correctables/correctables/internal/loadgen"
)

// TestRowsOnACluster runs short rows on a real three-replica cluster: at
// p = 1 (strong reads and writes) the trace of the window must score no
// positive Γ (linearizable); weak rows and a controller row run, count
// their operations and fill the timeline.
func TestRowsOnACluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl, err := cluster.Start(cluster.Options{Dir: t.TempDir(), NoSync: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Stop()
	if _, err := cl.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	h, err := Dial(ctx, cl.Endpoints, 100_000)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	const n = 50
	cfg := Config{Keys: loadgen.NewLatest(n), Names: loadgen.KeyNames(n), ReadFraction: 0.8, ValueSize: 128,
		Rate: 100, Warmup: 200 * time.Millisecond, Duration: 1500 * time.Millisecond, Period: 250 * time.Millisecond}
	if err := h.Load(ctx, cfg.Names, cfg.ValueSize, 1); err != nil {
		t.Fatal(err)
	}
	for i, row := range []Row{
		{Label: "strong-strong", ReadP: 1, WriteP: 1},
		{Label: "weak-weak"},
		{Label: "AD 5ms", ReadDelay: 5 * time.Millisecond},
		{Label: "quorum", ReadP: 1, QuorumReads: true},
		{Label: "quorum-quorum", ReadP: 1, WriteP: 1, QuorumReads: true, QuorumWrites: true},
		{Label: "weak-all", WriteP: 1, AllWrites: true},
		{Label: "controller", Controller: &cpqctl.Config{SLA: cpqctl.SLA{Latency: time.Second, Stale: 0.5}, P: 0.5}},
		{Label: "controller quorum", QuorumReads: true, Controller: &cpqctl.Config{SLA: cpqctl.SLA{Latency: time.Second, Stale: 0.5}, P: 0.5}},
	} {
		cfg.Seed = uint64(i+1) * 1000
		res, err := Run(ctx, h, cfg, row)
		if err != nil {
			t.Fatalf("%s: %v", row.Label, err)
		}
		if row.QuorumReads && row.Controller != nil {
			// The controller tunes reads between weak and quorum; every
			// update stays weak (before, updates took the starting p).
			if res.Strong != 0 || res.Quorum > res.Reads || res.Errors != 0 {
				t.Fatalf("controller over weak-quorum reads: %d strong operations, %d quorum reads of %d, %d errors (%s)", res.Strong, res.Quorum, res.Reads, res.Errors, res.FirstError)
			}
			continue
		}
		if row.QuorumWrites {
			// Every operation at the quorum level, none strong.
			if res.Strong != 0 || res.Quorum != res.Ops || res.Errors != 0 {
				t.Fatalf("quorum-quorum: %d strong operations, %d of %d at quorum, %d errors (%s)", res.Strong, res.Quorum, res.Ops, res.Errors, res.FirstError)
			}
			continue
		}
		if row.AllWrites {
			// Every update at all, every read weak.
			if res.Strong != 0 || res.Quorum != 0 || res.All != res.Writes || res.Errors != 0 {
				t.Fatalf("weak-all: %d strong, %d quorum, %d of %d updates at all, %d errors (%s)", res.Strong, res.Quorum, res.All, res.Writes, res.Errors, res.FirstError)
			}
			continue
		}
		if row.QuorumReads {
			// Only what ran is checked: under a stall of the shared
			// machine a short row may finish nothing.
			if res.Strong != 0 || res.Quorum != res.Reads || res.Errors != 0 {
				t.Fatalf("quorum reads, weak writes: %d strong operations, %d quorum reads of %d, %d errors (%s)", res.Strong, res.Quorum, res.Reads, res.Errors, res.FirstError)
			}
			continue
		}
		if res.Ops == 0 || res.Reads == 0 || res.Writes == 0 || res.Values == 0 || res.Errors != 0 {
			t.Fatalf("%s: %d ops (%d reads, %d writes), %d values, %d errors (%s)", row.Label, res.Ops, res.Reads, res.Writes, res.Values, res.Errors, res.FirstError)
		}
		// At least the tick that opened the window and the one that closed
		// it, however the machine stalls.
		if len(res.Timeline) < 2 {
			t.Fatalf("%s: %d timeline points", row.Label, len(res.Timeline))
		}
		switch row.Label {
		case "strong-strong":
			if res.Positive != 0 || res.Gamma != 0 || res.Strong != res.Ops {
				t.Fatalf("strong operations only: %d of %d values positive (max Γ %v), %d of %d ops strong", res.Positive, res.Values, res.Gamma, res.Strong, res.Ops)
			}
		case "weak-weak", "AD 5ms":
			if res.Strong != 0 {
				t.Fatalf("%s: %d strong operations", row.Label, res.Strong)
			}
		}
		if row.Label == "AD 5ms" && P95(res.ReadLat) < 5*time.Millisecond {
			t.Fatalf("AD 5ms: read p95 %v under the delay", P95(res.ReadLat))
		}
	}
	if d := h.Trace.Dropped(); d != 0 {
		t.Fatalf("trace dropped %d records", d)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{Keys: loadgen.NewUniform(2), Names: loadgen.KeyNames(3), Rate: 1, Duration: time.Second},
		{Keys: loadgen.NewUniform(2), Names: loadgen.KeyNames(2), Rate: 0, Duration: time.Second},
		{Keys: loadgen.NewUniform(2), Names: loadgen.KeyNames(2), Rate: 1, Duration: time.Second, ReadFraction: 2},
		{Keys: loadgen.NewUniform(2), Names: loadgen.KeyNames(2), Rate: 1, Duration: time.Second, Period: time.Millisecond},
	} {
		if _, err := Run(context.Background(), &Hosts{}, cfg, Row{}); err == nil {
			t.Errorf("Run with %+v: no error", cfg)
		}
	}
}
