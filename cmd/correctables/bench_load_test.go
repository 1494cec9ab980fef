package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestBenchLoadBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--workload", "e"}, "unknown workload"},
		{[]string{"--keys-dist", "pareto"}, "unknown key distribution"},
		{[]string{"--keys", "0"}, "--keys"},
		{[]string{"--value-size", "-1"}, "--value-size"},
		{[]string{"--mode", "eventual"}, "unknown mode"},
		{[]string{"--modes", "strong,bogus"}, "unknown mode"},
		{[]string{"--concurrency", "0"}, "concurrency 0"},
		{[]string{"--concurrency", "16,x"}, "not an integer"},
		{[]string{"--conns", "0"}, "--conns"},
		{[]string{"--duration", "0s"}, "--duration"},
		{[]string{"--warmup", "-1s"}, "--warmup"},
		{[]string{"--peer", "redis"}, "--peer"},
		{[]string{"--etcd-auto-compaction", "10s"}, "needs --peer etcd"},
		{[]string{"--peer", "etcd", "--etcd-auto-compaction", "10ms"}, "at least 1s"},
		{[]string{"--endpoints", "127.0.0.1:1", "--in-process"}, "exclude each other"},
		{[]string{"--endpoints", " , "}, "no address"},
		{[]string{"--server-pids", "1"}, "goes with --endpoints"},
		{[]string{"--endpoints", "127.0.0.1:1", "--server-pids", "x"}, "not a process id"},
		{[]string{"extra"}, "unknown command"},
	} {
		err := runCLI(t, 10*time.Second, append([]string{"bench", "load"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("bench load %s: error %v, want one mentioning %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}

// TestBenchLoadInProcess runs a short bench against a cluster in this
// process (the three-process default needs the real binary) and checks the
// table and the CSV.
func TestBenchLoadInProcess(t *testing.T) {
	csv := filepath.Join(t.TempDir(), "rows.csv")
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	cmd := newRootCmd()
	var out, progress bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&progress)
	cmd.SetArgs([]string{"bench", "load", "--in-process", "--workload", "a", "--keys", "20", "--keys-dist", "hotspot",
		"--modes", "invoke,weak", "--concurrency", "2", "--conns", "1", "--warmup", "0s", "--duration", "300ms", "--csv", csv})
	if err := cmd.Execute(); err != nil {
		t.Fatalf("bench load: %v\n%s\n%s", err, progress.String(), out.String())
	}
	for _, want := range []string{"correctables  invoke", "correctables    weak", "in-process: CPU and RSS of the whole bench process",
		"preliminary p50", "or preliminary (weak)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if !strings.Contains(progress.String(), "preliminary p50/p99") {
		t.Errorf("progress lacks the preliminary view's latencies:\n%s", progress.String())
	}
	b, err := os.ReadFile(csv)
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"output": out.String(), "progress": progress.String(), "CSV": string(b)} {
		if m := abbreviated.FindString(text); m != "" {
			t.Errorf("%s says %q, not preliminary:\n%s", name, m, text)
		}
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "system,mode,") || !strings.HasPrefix(lines[1], "correctables,invoke,a,hotspot,2,1,") {
		t.Errorf("CSV:\n%s", b)
	}
	// The temporary data directory is gone.
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Errorf("left in TMPDIR: %v", ents)
	}
}
