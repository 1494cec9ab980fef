package main

import (
	"testing"
	"time"
)

func TestParseSchedstat(t *testing.T) {
	run, wait, err := parseSchedstat("1500000000 250000000 42\n")
	if err != nil {
		t.Fatal(err)
	}
	if run != 1500*time.Millisecond || wait != 250*time.Millisecond {
		t.Fatalf("run %v wait %v, want 1.5s and 250ms", run, wait)
	}
	for _, bad := range []string{"", "12", "x 1 2", "1 y 2"} {
		if _, _, err := parseSchedstat(bad); err == nil {
			t.Errorf("parseSchedstat(%q): no error", bad)
		}
	}
}

// The process's running time grows with work done on the CPU; whatever
// the machine's load, some of a busy loop's time is spent running.
func TestSampleCPUCountsWork(t *testing.T) {
	before := sampleCPU()
	if !before.ok {
		t.Skip("no /proc/self/task/*/schedstat here")
	}
	x := uint64(1)
	for i := 0; i < 50_000_000; i++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	after := sampleCPU()
	used, waited, ok := before.cores(after)
	if !ok {
		t.Fatal("second sample unavailable")
	}
	if after.run <= before.run || used <= 0 || waited < 0 {
		t.Fatalf("run %v -> %v (used %.3f cores, waited %.3f) after a busy loop (%d)", before.run, after.run, used, waited, x)
	}
	if u, w := cpuCells(0, 0, false); u != "-" || w != "-" {
		t.Fatalf("unknown cells %q %q", u, w)
	}
}
