package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestInvokeSLABadInput: bad SLAs, session files and bench pileus flags are
// refused with a clear error before anything is sent or started (no
// cluster runs here), and a bad session file is left as it was.
func TestInvokeSLABadInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	noUtility := write("no-utility.json", `{"name": "bad", "subslas": [{"consistency": "strong", "latency": "1s"}]}`)
	truncated := write("truncated.json", `{"name": "bad", "subslas": [`)
	rising := write("rising.json", `{"name": "rising", "subslas": [{"consistency": "eventual", "latency": "1s", "utility": 0.5}, {"consistency": "strong", "latency": "1s", "utility": 1}]}`)
	badSession := write("session.json", "not json")
	ep := []string{"--endpoints", "127.0.0.1:1"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"invoke", "--sla", noUtility, "get", "k"}, `SLA "bad": subSLA 1: no "utility"`},
		{[]string{"invoke", "--sla", truncated, "get", "k"}, "SLA file: unexpected EOF"},
		{[]string{"invoke", "--sla", rising, "get", "k"}, `SLA "rising": subSLA 2: utility 1 above subSLA 1's 0.5`},
		{[]string{"invoke", "--sla", filepath.Join(dir, "missing.json"), "get", "k"}, "neither cart, password, web nor a readable SLA file"},
		{[]string{"invoke", "--sla", "cart", "put", "k", "v"}, "--sla applies to get"},
		{[]string{"invoke", "--sla", "cart", "--weak", "get", "k"}, "give neither --weak nor --strong"},
		{[]string{"invoke", "--pileus", "get", "k"}, "--pileus goes with --sla"},
		{[]string{"invoke", "--session", badSession, "get", "k"}, "not a session file"},
		{[]string{"bench", "pileus", "--ops", "1"}, "--ops 1"},
		{[]string{"bench", "pileus", "--replication-delay", "1m"}, "--replication-delay 1m0s"},
		{[]string{"bench", "pileus", "--sla", "gold"}, `no SLA named "gold"`},
		{[]string{"bench", "pileus", "--monitor-window", "0s"}, "--monitor-window"},
	} {
		err := runCLI(t, 10*time.Second, append(tc.args, ep...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("correctables %s: %v, want an error containing %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
	if b, _ := os.ReadFile(badSession); string(b) != "not json" {
		t.Errorf("the bad session file was changed: %q", b)
	}
}
