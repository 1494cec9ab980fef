package loadgen

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/correctables/correctables/internal/cluster"
	"github.com/correctables/correctables/internal/loopback"
)

func checkRow(t *testing.T, res *Result, mode Mode) {
	t.Helper()
	if res.Errors != 0 {
		t.Errorf("%s %s: %d errors: %s", res.System, mode, res.Errors, res.ErrorSummary())
	}
	if res.Ops == 0 || res.OpsPerSec() <= 0 {
		t.Fatalf("%s %s: no operations measured", res.System, mode)
	}
	var want uint64 = res.Ops
	switch mode {
	case Weak:
		if res.Prelim.TotalCount() != int64(want) || res.Final.TotalCount() != 0 {
			t.Errorf("%s weak: %d preliminary, %d final views for %d ops", res.System, res.Prelim.TotalCount(), res.Final.TotalCount(), want)
		}
	case Strong:
		if res.Final.TotalCount() != int64(want) || res.Prelim.TotalCount() != 0 {
			t.Errorf("%s strong: %d preliminary, %d final views for %d ops", res.System, res.Prelim.TotalCount(), res.Final.TotalCount(), want)
		}
	case Invoke:
		if res.Final.TotalCount() != int64(want) {
			t.Errorf("%s invoke: %d final views for %d ops", res.System, res.Final.TotalCount(), want)
		}
	}
	if b, ok := res.BytesPerOp(); !ok || b <= 0 {
		t.Errorf("%s %s: bytes per op %v %v", res.System, mode, b, ok)
	}
}

func TestRunCorrectablesInProcess(t *testing.T) {
	dir := t.TempDir()
	c, err := cluster.Start(cluster.Options{Dir: dir, NoSync: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	sys := &Correctables{Endpoints: c.Endpoints}
	const keys = 50
	if err := Load(ctx, sys, keys, 32, 8, 1); err != nil {
		t.Fatal(err)
	}
	kg, _ := NewKeyGen("zipfian", keys)
	for _, mode := range []Mode{Invoke, Strong, Weak} {
		procs := &Procs{PIDs: []int{0}, Note: "whole process"}
		var progress strings.Builder
		res, err := Run(ctx, sys, Config{
			Workload: Workloads["a"], Keys: kg, Dist: "zipfian", ValueSize: 32, Mode: mode,
			Concurrency: 4, Conns: 2, Warmup: 100 * time.Millisecond, Duration: 300 * time.Millisecond,
			Seed: 1, OnStart: procs.Begin, OnEnd: func() {}, Progress: &progress, Label: "test",
		})
		if err != nil {
			t.Fatal(err)
		}
		res.Server = procs.End()
		checkRow(t, res, mode)
		var routed uint64
		for _, n := range res.Routes {
			routed += n
		}
		if routed == 0 || RouteShares(res) == "" {
			t.Errorf("routes: %v", res.Routes)
		}
		if res.Conns != 2 || res.Concurrency != 4 || res.System != "correctables" {
			t.Errorf("result: %+v", res)
		}
		if mode == Invoke {
			if res.Both == 0 || res.Prelim.TotalCount() == 0 {
				t.Errorf("invoke: %d ops with both views, %d preliminary views", res.Both, res.Prelim.TotalCount())
			}
			if r, ok := res.DivergenceRate(); !ok || r < 0 || r > 1 {
				t.Errorf("divergence %v %v", r, ok)
			}
		}
		if cpu, ok := res.CPUPer1kOps(); !ok || cpu < 0 || res.Server.PeakRSS == 0 {
			t.Errorf("server stats: %+v", res.Server)
		}
		t.Logf("%s: %d ops (%.0f/s), prelim p50 %dµs, final p50 %dµs, %d bytes", mode, res.Ops, res.OpsPerSec(),
			res.Prelim.ValueAtQuantile(50), res.Final.ValueAtQuantile(50), res.Bytes.Sent+res.Bytes.Received)
	}
}

func TestRunConfigErrors(t *testing.T) {
	kg := NewUniform(10)
	for _, cfg := range []Config{
		{Keys: kg, Mode: Strong, Concurrency: 0, Conns: 1, Duration: time.Second},
		{Keys: kg, Mode: Strong, Concurrency: 1, Conns: 0, Duration: time.Second},
		{Keys: kg, Mode: "eventual", Concurrency: 1, Conns: 1, Duration: time.Second},
		{Keys: kg, Mode: Strong, Concurrency: 1, Conns: 1, Duration: 0},
		{Mode: Strong, Concurrency: 1, Conns: 1, Duration: time.Second},
	} {
		if _, err := Run(context.Background(), &Correctables{Endpoints: []string{"127.0.0.1:1"}}, cfg); err == nil {
			t.Errorf("config %+v accepted", cfg)
		}
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	ports, err := loopback.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return ports[0]
}

func TestRunEtcd(t *testing.T) {
	clientURL := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	e, err := StartEtcdMember(EtcdMember{Name: "m1", Dir: t.TempDir(), ClientURL: clientURL, PeerURL: peerURL, LogLevel: "fatal"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		t.Fatal(err)
	case <-time.After(30 * time.Second):
		t.Fatal("etcd not ready within 30s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := WaitEtcd(ctx, []string{clientURL}); err != nil {
		t.Fatal(err)
	}
	sys := &Etcd{Endpoints: []string{clientURL}}
	const keys = 50
	if err := Load(ctx, sys, keys, 32, 8, 1); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []Mode{Strong, Weak} {
		res, err := Run(ctx, sys, Config{
			Workload: Workloads["b"], Keys: NewLatest(keys), Dist: "latest", ValueSize: 32, Mode: mode,
			Concurrency: 4, Conns: 2, Warmup: 50 * time.Millisecond, Duration: 300 * time.Millisecond, Seed: 2,
			Progress: io.Discard,
		})
		if err != nil {
			t.Fatal(err)
		}
		checkRow(t, res, mode)
		if res.System != "etcd" || res.Both != 0 {
			t.Errorf("result: %+v", res)
		}
		t.Logf("etcd %s: %d ops (%.0f/s)", mode, res.Ops, res.OpsPerSec())
	}
}
