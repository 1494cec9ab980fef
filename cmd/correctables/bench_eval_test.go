package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runEval runs the root command with args and returns its output and error.
func runEval(args ...string) (string, error) { return output(newRootCmd(), args...) }

func TestEvalBadArgs(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "fig6", "--rates", "fast"}, "--rates"},
		{[]string{"bench", "fig6", "--workloads", "z"}, "unknown workload"},
		{[]string{"bench", "fig6", "--step", "1ns"}, "--step"},
		{[]string{"bench", "fig7", "--rates", "10,20"}, "one rate"},
		{[]string{"bench", "fig7", "--dists", "pareto"}, "--dists"},
		{[]string{"bench", "fig8", "--keys", "0"}, "--keys"},
		{[]string{"bench", "queue", "--sizes", "-1"}, "--sizes"},
		{[]string{"bench", "queue", "--threads", "0"}, "--threads"},
		{[]string{"bench", "app", "chess"}, "unknown application"},
		{[]string{"bench", "app"}, "arg"},
		{[]string{"bench", "app", "tickets", "--stock", "0"}, "--stock"},
		{[]string{"bench", "app", "ads", "--concurrency", "x"}, "--concurrency"},
		{[]string{"bench", "app", "tickets", "--runs", "1", "--stock", "3", "--leader", "Mars"}, "no replica in region"},
		{[]string{"bench", "report", "--out", dir}, "no figures"},
	} {
		_, err := runEval(tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("correctables %s: %v, want an error mentioning %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("refused commands wrote %d files", len(entries))
	}
}

// TestEvalSmallRuns runs fig7 and the ticket sale briefly on the emulated
// WAN and checks they write their CSV and figures and the report finds them.
func TestEvalSmallRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("starts clusters on an emulated WAN")
	}
	dir := t.TempDir()
	out, err := runEval("bench", "fig7", "--no-sync", "--keys", "20", "--value-size", "10", "--rates", "20",
		"--step", "500ms", "--workloads", "a", "--dists", "latest", "--out", dir)
	if err != nil {
		t.Fatalf("fig7: %v\n%s", err, out)
	}
	out, err = runEval("bench", "app", "tickets", "--no-sync", "--runs", "1", "--stock", "8", "--threshold", "3",
		"--retailers", "2", "--out", dir)
	if err != nil {
		t.Fatalf("tickets: %v\n%s", err, out)
	}
	if !strings.Contains(out, "every ticket sold exactly once") {
		t.Fatalf("tickets output lacks the verdict:\n%s", out)
	}
	for _, f := range []string{"fig7.csv", "fig7.svg", "fig7.png", "fig12.csv", "fig12.svg", "fig12.png"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	csv, _ := os.ReadFile(filepath.Join(dir, "fig7.csv"))
	if lines := strings.Count(string(csv), "\n"); lines != 2 {
		t.Errorf("fig7.csv has %d lines, want a header and one row:\n%s", lines, csv)
	}
	if out, err = runEval("bench", "report", "--out", dir); err != nil || !strings.Contains(out, "2 figures") {
		t.Fatalf("report: %v\n%s", err, out)
	}
}
