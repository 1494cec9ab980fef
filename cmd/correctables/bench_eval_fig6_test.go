package main

import (
	"encoding/csv"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// A small fig6 run: every row says where the leader was after its step (a
// region of the preset; the run places it in --leader before each step)
// and the CPU the process used and waited, as numbers, or "-" where the
// kernel keeps no schedstat.
func TestFig6RowsGiveLeaderAndCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster on an emulated WAN")
	}
	dir := t.TempDir()
	out, err := runEval("bench", "fig6", "--no-sync", "--keys", "20", "--value-size", "10", "--rates", "20",
		"--step", "500ms", "--workloads", "c", "--leader", "VRG", "--out", dir)
	if err != nil {
		t.Fatalf("fig6: %v\n%s", err, out)
	}
	f, err := os.Open(filepath.Join(dir, "fig6.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1+3*3 {
		t.Fatalf("fig6.csv has %d lines, want a header and 3 modes x 3 regions", len(rows))
	}
	col := func(name string) int {
		i := slices.Index(rows[0], name)
		if i < 0 {
			t.Fatalf("fig6.csv header %v lacks %s", rows[0], name)
		}
		return i
	}
	lead, used, waited := col("leader_after"), col("process_cpu_cores"), col("cpu_wait_cores")
	for _, r := range rows[1:] {
		if !slices.Contains([]string{"FRK", "IRL", "VRG"}, r[lead]) {
			t.Errorf("row %v: leader after %q, want a region of the preset", r, r[lead])
		}
		for _, c := range []string{r[used], r[waited]} {
			if c == "-" {
				continue
			}
			if v, err := strconv.ParseFloat(c, 64); err != nil || v < 0 {
				t.Errorf("row %v: CPU cell %q is not a number of cores", r, c)
			}
		}
	}
}
