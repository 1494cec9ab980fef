package main

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// runCLI runs the root command with args and returns its error; it fails the
// test if the command does not return within d (a command that should have
// failed but started serving instead waits for a signal).
func runCLI(t *testing.T, d time.Duration, args ...string) error {
	t.Helper()
	var out bytes.Buffer
	return executeWithin(t, d, newRootCmd(), nil, &out, &out, args...)
}

func TestReviewCLIBadArgs(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"invoke"}, "arg"},
		{[]string{"invoke", "frob", "k"}, "unknown operation"},
		{[]string{"invoke", "put", "k"}, "put takes 2"},
		{[]string{"invoke", "incr", "k", "x"}, "not an integer"},
		{[]string{"invoke", "scan", "p", "--", "-1"}, "non-negative"},
		{[]string{"invoke", "scan", "p", "many"}, "non-negative"},
		{[]string{"invoke", "get", "k", "--weak", "--strong"}, "exclude each other"},
		{[]string{"invoke", "get", "k", "--endpoints", " , "}, "no address"},
		{[]string{"get"}, "arg"},
		{[]string{"put", "k"}, "arg"},
		{[]string{"up", "--replicas", "0"}, "--replicas"},
		{[]string{"up", "--replicas", "10"}, "--replicas"},
		{[]string{"up", "--base-port", "-1"}, "--base-port"},
		{[]string{"up", "--base-port", "65535"}, "--base-port"},
		{[]string{"up", "--client-region", "FRK"}, "needs --wan"},
		{[]string{"up", "--wan", "nowhere", "--base-port", "0", "--data", dir}, "nowhere"},
		{[]string{"up", "extra"}, "unknown command"},
		{[]string{"serve"}, "--id"},
		{[]string{"serve", "--id", "1"}, "--peers"},
		{[]string{"serve", "--id", "1", "--peers", "1"}, "ID=HOST:PORT"},
		{[]string{"serve", "--id", "1", "--peers", "x=127.0.0.1:1"}, "positive integer"},
		{[]string{"serve", "--id", "1", "--peers", "0=127.0.0.1:1"}, "positive integer"},
		{[]string{"serve", "--id", "1", "--peers", "2=127.0.0.1:1"}, "no address for this replica"},
		{[]string{"serve", "--id", "1", "--peers", "1=127.0.0.1:0", "--tick", "0"}, "--tick"},
		{[]string{"serve", "--id", "1", "--peers", "1=127.0.0.1:0", "--tick", "soon"}, "--tick"},
		{[]string{"bench", "latency-gap", "--ops", "0"}, "--ops"},
		{[]string{"nosuch"}, "unknown command"},
	} {
		err := runCLI(t, 10*time.Second, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("correctables %s: %v, want an error mentioning %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
	// None of the refused serve commands created a data directory.
	if _, err := os.Stat("data"); err == nil {
		t.Errorf("a refused command created ./data")
	}
}

func TestReviewServeBadConfigFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	data := filepath.Join(dir, "data")
	for _, tc := range []struct {
		file, want string
	}{
		{filepath.Join(dir, "missing.json"), "--config"},
		{write("empty.json", ""), "--config"},
		{write("broken.json", `{"id": 1,`), "--config"},
		{write("unknown.json", `{"id": 1, "peers": {"1": "127.0.0.1:0"}, "colour": "blue"}`), "colour"},
		{write("type.json", `{"id": "one", "peers": {"1": "127.0.0.1:0"}}`), "--config"},
		{write("peers-list.json", `{"id": 1, "peers": ["127.0.0.1:0"]}`), "--config"},
		{write("noid.json", `{"peers": {"1": "127.0.0.1:0"}}`), "--id"},
		{write("badpeer.json", `{"id": 1, "peers": {"one": "127.0.0.1:0"}}`), "positive integer"},
		{write("self.json", `{"id": 3, "peers": {"1": "127.0.0.1:0"}}`), "no address for this replica"},
		{write("tick.json", `{"id": 1, "peers": {"1": "127.0.0.1:0"}, "tick": "-1s", "data": "`+data+`"}`), "--tick"},
	} {
		err := runCLI(t, 10*time.Second, "serve", "--config", tc.file)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("serve --config %s: %v, want an error mentioning %q", filepath.Base(tc.file), err, tc.want)
		}
	}
	if _, err := os.Stat(data); err == nil {
		t.Errorf("a refused config created the data directory")
	}
}

// up and serve on a port already in use fail at once with the listen error.
func TestReviewPortInUse(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	port := busy.Addr().(*net.TCPAddr).Port
	dir := t.TempDir()
	err = runCLI(t, 20*time.Second, "up", "--replicas", "1", "--base-port", strconv.Itoa(port-1), "--data", dir)
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("up on a busy port: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, endpointsFile)); err == nil {
		t.Errorf("up on a busy port wrote %s", endpointsFile)
	}
	err = runCLI(t, 20*time.Second, "serve", "--id", "1", "--peers", "1="+busy.Addr().String(), "--data", filepath.Join(dir, "s"))
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("serve on a busy port: %v", err)
	}
	// The store was closed: it opens again.
	err = runCLI(t, 20*time.Second, "serve", "--id", "1", "--peers", "1="+busy.Addr().String(), "--data", filepath.Join(dir, "s"))
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("serve on a busy port, again: %v", err)
	}
}
