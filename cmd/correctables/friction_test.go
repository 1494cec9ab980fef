package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/internal/storage"
)

// The command line against a running three-replica cluster: one cluster
// for every case here.
func TestCLIAgainstCluster(t *testing.T) {
	c, eps := startCluster(t, t.TempDir(), 3)
	run := func(t *testing.T, stdin []byte, args ...string) (string, error) {
		t.Helper()
		var in *bytes.Reader
		if stdin != nil {
			in = bytes.NewReader(stdin)
		}
		if in == nil {
			return cli(t, nil, append(args, "--endpoints", eps)...)
		}
		return cli(t, in, append(args, "--endpoints", eps)...)
	}
	must := func(t *testing.T, stdin []byte, args ...string) string {
		t.Helper()
		out, err := run(t, stdin, args...)
		if err != nil {
			t.Fatalf("correctables %s: %v", strings.Join(args, " "), err)
		}
		return out
	}

	t.Run("values from stdin and files", func(t *testing.T) {
		// Over 128 KiB: more than one command-line argument can carry.
		big := make([]byte, 300<<10)
		for i := range big {
			big[i] = byte(rand.IntN(256))
		}
		must(t, big, "put", "big-stdin", "-")
		if got := must(t, nil, "get", "big-stdin", "--raw"); got != string(big) {
			t.Errorf("get --raw after put from stdin: %d bytes, want the %d written", len(got), len(big))
		}
		file := filepath.Join(t.TempDir(), "value")
		if err := os.WriteFile(file, big[:200<<10], 0o600); err != nil {
			t.Fatal(err)
		}
		must(t, nil, "invoke", "put", "big-file", "@"+file)
		if got := must(t, nil, "invoke", "get", "big-file", "--raw", "--strong"); got != string(big[:200<<10]) {
			t.Errorf("get --raw after put from @file: %d bytes, want %d", len(got), 200<<10)
		}
		must(t, nil, "invoke", "enqueue", "q", "@@at")
		if got := must(t, nil, "invoke", "dequeue", "q", "--raw", "--strong"); got != "@at" {
			t.Errorf("@@at enqueued as %q", got)
		}
		if _, err := run(t, []byte("x"), "invoke", "cas", "k", "-", "-"); err == nil || !strings.Contains(err.Error(), "only one value") {
			t.Errorf("two values from stdin: %v", err)
		}
		if _, err := run(t, nil, "put", "k", "@"+filepath.Join(t.TempDir(), "missing")); err == nil || !strings.Contains(err.Error(), "missing") {
			t.Errorf("value from a missing file: %v", err)
		}
	})

	t.Run("errors on one line", func(t *testing.T) {
		long := strings.Repeat("k", 4097)
		_, err := run(t, nil, "put", long, "v")
		if err == nil {
			t.Fatal("put with a 4097-byte key succeeded")
		}
		msg := err.Error()
		if strings.Contains(msg, "\n") || len(msg) > 300 || strings.Contains(msg, strings.Repeat("k", 100)) {
			t.Errorf("error is not one short line: %d bytes: %q", len(msg), msg)
		}
		if !strings.HasPrefix(msg, "server: replica") || strings.Contains(msg, "client:") {
			t.Errorf("a server's refusal reads %q, want it to start with \"server: replica\" and no client label", msg)
		}
		if n := strings.Count(msg, "too large") + strings.Count(msg, "limit"); n > 2 {
			t.Errorf("cause repeated: %q", msg)
		}
		// A state machine refusal names the replica by id.
		must(t, nil, "put", "word", "abc")
		_, err = run(t, nil, "invoke", "incr", "word", "1", "--strong")
		if err == nil || !strings.HasPrefix(err.Error(), "server: replica ") || strings.Contains(err.Error(), "client:") {
			t.Errorf("incr of a non-number: %v", err)
		}
		// Nothing reachable: the client says so, once.
		_, err = cli(t, nil, "get", "k", "--endpoints", "127.0.0.1:1", "--dial-timeout", "2s")
		if err == nil || !strings.HasPrefix(err.Error(), "client: ") || strings.Contains(err.Error(), "\n") {
			t.Errorf("unreachable cluster: %v", err)
		}
	})

	t.Run("negative numbers are arguments", func(t *testing.T) {
		must(t, nil, "invoke", "incr", "n", "-5", "--strong")
		out := must(t, nil, "invoke", "incr", "n", "--strong", "--raw", "-2")
		if out != "-7\n" {
			t.Errorf("incr n -5 then -2: %q, want -7", out)
		}
		must(t, nil, "put", "neg", "-12")
		if out := must(t, nil, "get", "neg", "--raw"); out != "-12" {
			t.Errorf("put neg -12: get says %q", out)
		}
		if _, err := run(t, nil, "invoke", "scan", "p", "-1"); err == nil || !strings.Contains(err.Error(), "non-negative") {
			t.Errorf("scan p -1: %v", err)
		}
	})

	t.Run("quorum level", func(t *testing.T) {
		must(t, nil, "put", "qk", "qv")
		for _, args := range [][]string{{"invoke", "--quorum", "get", "qk"}, {"invoke", "--cpq", "1", "--cpq-quorum", "get", "qk"},
			{"invoke", "--quorum", "put", "qk", "qw"}, {"invoke", "--cpq", "1", "--cpq-quorum", "put", "qk", "qw"}} {
			if out := must(t, nil, args...); !strings.Contains(out, " quorum ") || strings.Count(out, "\n") != 1 {
				t.Errorf("correctables %s: %q, want one view at level quorum", strings.Join(args, " "), out)
			}
		}
		// A quorum write is in a majority's states: a quorum read sees it.
		if out := must(t, nil, "invoke", "--quorum", "get", "qk"); !strings.Contains(out, "qw") {
			t.Errorf("quorum read after quorum writes: %q, want qw", out)
		}
		if _, err := run(t, nil, "invoke", "--quorum", "--strong", "get", "qk"); err == nil || !strings.Contains(err.Error(), "--quorum") {
			t.Errorf("invoke --quorum --strong: %v", err)
		}
	})

	t.Run("all level", func(t *testing.T) {
		for _, args := range [][]string{{"invoke", "--all", "put", "ak", "av"}, {"invoke", "--all", "get", "ak"}, {"invoke", "--cpq", "0", "--cpq-write", "1", "--cpq-all", "put", "ak", "av"}} {
			if out := must(t, nil, args...); !strings.Contains(out, " all ") || strings.Count(out, "\n") != 1 {
				t.Errorf("correctables %s: %q, want one view at level all", strings.Join(args, " "), out)
			}
		}
		// Every replica received it: a weak read of any sees it.
		if out := must(t, nil, "invoke", "--weak", "get", "ak"); !strings.Contains(out, "av") {
			t.Errorf("weak read after a write at all: %q, want av", out)
		}
		for _, bad := range [][]string{{"--all", "--quorum"}, {"--all", "--weak"}, {"--all", "--cpq", "0.5"}, {"--cpq-all", "--cpq-quorum", "--cpq", "1"}} {
			args := append(append([]string{"invoke"}, bad...), "get", "ak")
			if _, err := run(t, nil, args...); err == nil || !strings.Contains(err.Error(), "-all") {
				t.Errorf("correctables %s: %v, want an error naming --all", strings.Join(args, " "), err)
			}
		}
	})

	t.Run("view labels", func(t *testing.T) {
		must(t, nil, "put", "lbl", "x")
		for flag, want := range map[string]string{"--weak": "preliminary", "--strong": "final"} {
			out := must(t, nil, "invoke", "get", "lbl", flag)
			if !strings.HasPrefix(out, want+" ") || strings.Count(out, "\n") != 1 {
				t.Errorf("invoke get %s: %q, want one line labelled %s", flag, out, want)
			}
			out = must(t, nil, "invoke", "get", "lbl", flag, "--json")
			var v struct{ View string }
			if err := json.Unmarshal([]byte(out), &v); err != nil || v.View != want {
				t.Errorf("invoke get %s --json: %q (%v), want view %s", flag, out, err, want)
			}
		}
		out := must(t, nil, "invoke", "get", "lbl")
		if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 ||
			!strings.HasPrefix(lines[0], "preliminary ") || !strings.HasPrefix(lines[1], "final ") {
			t.Errorf("invoke get: %q, want a preliminary then a final line", out)
		}
	})

	t.Run("json per operation kind", func(t *testing.T) {
		for _, tc := range []struct {
			args       []string
			want, omit []string
		}{
			{[]string{"put", "j", "1"}, []string{"replaced"}, []string{"items", "int", "len", "ok", "found"}},
			{[]string{"get", "j"}, []string{"found", "value"}, []string{"items", "int", "len", "ok"}},
			{[]string{"incr", "j", "2"}, []string{"value"}, []string{"items", "found", "len", "ok"}},
			{[]string{"scan", "j"}, []string{"items"}, []string{"found", "int", "len", "ok", "value"}},
			{[]string{"enqueue", "jq", "a"}, []string{"seq", "length"}, []string{"items", "found", "value"}},
			{[]string{"cas", "j", "3", "4"}, []string{"swapped"}, []string{"items", "int", "len"}},
		} {
			out := must(t, nil, append(append([]string{"invoke"}, tc.args...), "--strong", "--json")...)
			var v struct {
				Result map[string]any
			}
			if err := json.Unmarshal([]byte(out), &v); err != nil {
				t.Fatalf("%v --json: %q: %v", tc.args, out, err)
			}
			for _, k := range tc.want {
				if _, ok := v.Result[k]; !ok {
					t.Errorf("%v --json: %q lacks %q", tc.args, out, k)
				}
			}
			for _, k := range tc.omit {
				if _, ok := v.Result[k]; ok {
					t.Errorf("%v --json: %q has %q, which %s does not have", tc.args, out, k, tc.args[0])
				}
			}
		}
	})

	t.Run("empty keys refused", func(t *testing.T) {
		before := must(t, nil, "scan", "", "--keys-only")
		for _, args := range [][]string{{"put", "", "v"}, {"get", ""}, {"invoke", "put", "", "v"}, {"invoke", "incr", ""}} {
			if _, err := run(t, nil, args...); err == nil || !strings.Contains(err.Error(), "empty key") {
				t.Errorf("%q: %v, want an empty key error", args, err)
			}
		}
		// The server refuses it too, from any client.
		cc, err := (&connFlags{dialTimeout: time.Second, commandTimeout: time.Second}).dialEndpoint(c.Endpoints[0])
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		stream, err := api.NewStoreClient(cc).Invoke(ctx, &api.InvokeRequest{
			Op: &api.Op{Kind: api.Kind_KIND_PUT, Value: []byte("v")}, Preliminary: true, Final: true})
		if err == nil {
			_, err = stream.Recv()
		}
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "empty key") {
			t.Errorf("server given an empty key: %v", err)
		}
		if after := must(t, nil, "scan", "", "--keys-only"); after != before {
			t.Errorf("keys changed by refused operations: %q -> %q", before, after)
		}
	})

	t.Run("scan lists a prefix", func(t *testing.T) {
		for _, k := range []string{"dir/a", "dir/b", "dir2/c"} {
			must(t, nil, "put", k, "v-"+k)
		}
		if out := must(t, nil, "scan", "dir/", "--keys-only"); out != "dir/a\ndir/b\n" {
			t.Errorf("scan dir/ --keys-only: %q", out)
		}
		if out := must(t, nil, "scan", "dir/"); out != "dir/a\t\"v-dir/a\"\ndir/b\t\"v-dir/b\"\n" {
			t.Errorf("scan dir/: %q", out)
		}
		if out := must(t, nil, "scan", "dir", "--raw"); out != "dir/a\nv-dir/a\ndir/b\nv-dir/b\ndir2/c\nv-dir2/c\n" {
			t.Errorf("scan dir --raw: %q", out)
		}
	})

	t.Run("status", func(t *testing.T) {
		out := must(t, nil, "status")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 4 || !strings.HasPrefix(lines[0], "ID ") {
			t.Fatalf("status: %q, want a header and three rows", out)
		}
		leaders := 0
		cluster := api.FormatClusterID(c.Servers[0].ClusterID())
		for _, l := range lines[1:] {
			f := strings.Fields(l)
			if len(f) != 9 || f[8] != "ok" || f[2] != cluster || (f[3] != "leader" && f[3] != "follower") {
				t.Errorf("status row %q (cluster %s)", l, cluster)
			}
			if f[3] == "leader" {
				leaders++
			}
		}
		if leaders != 1 {
			t.Errorf("status: %d leaders in %q", leaders, out)
		}
		out = must(t, nil, "status", "--json")
		var row statusRow
		if err := json.Unmarshal([]byte(strings.Split(out, "\n")[0]), &row); err != nil || row.ID == 0 || row.AppliedIndex == 0 || row.Committed == 0 || row.ClusterID != cluster {
			t.Errorf("status --json: %q, %v", out, err)
		}
	})

	// Last: it stops a replica.
	t.Run("status with a replica down", func(t *testing.T) {
		if err := c.Servers[2].Stop(); err != nil {
			t.Fatal(err)
		}
		out, err := run(t, nil, "status", "--dial-timeout", "2s")
		if err == nil || !strings.Contains(err.Error(), "1 of 3 replicas unreachable") {
			t.Errorf("status with one replica stopped: %v", err)
		}
		if !strings.Contains(out, c.Endpoints[2]) || !strings.Contains(out, "unreachable") {
			t.Errorf("status with one replica stopped: %q", out)
		}
	})
}

// Friction points that need no cluster.
func TestCLIWithoutCluster(t *testing.T) {
	out, err := cli(t, nil, "version")
	if err != nil || !strings.HasPrefix(out, "correctables ") || !strings.Contains(out, runtime.Version()) {
		t.Errorf("version: %q, %v", out, err)
	}
	out, err = cli(t, nil, "--version")
	if err != nil || !strings.Contains(out, runtime.Version()) {
		t.Errorf("--version: %q, %v", out, err)
	}
	if _, err := cli(t, nil, "invoke", "cas", "k", "v"); err == nil || !strings.Contains(err.Error(), "cas takes 3 arguments, got 2") {
		t.Errorf("cas with two arguments: %v", err)
	}
	if _, err := cli(t, nil, "invoke", "incr"); err == nil || !strings.Contains(err.Error(), "incr takes 1 or 2 arguments") {
		t.Errorf("incr without a key: %v", err)
	}
	if times(1) != "once" || times(2) != "twice" || times(3) != "3 times" {
		t.Errorf("times: %s, %s, %s", times(1), times(2), times(3))
	}
	for _, c := range []string{"get", "put", "invoke", "scan", "status", "snapshot save"} {
		out, err := cli(t, nil, append(strings.Fields(c), "--help")...)
		if err != nil || !strings.Contains(out, "--data DIR") || strings.Contains(out, "--data up") || !strings.Contains(out, "--endpoints") {
			t.Errorf("%s --help: %v: %q", c, err, out)
		}
	}
}

// A second up on a data directory in use says another replica holds it,
// naming the directory and the lock file, and does not start.
func TestUpOnDirectoryInUse(t *testing.T) {
	dir := t.TempDir()
	st, err := storage.Open(storage.Options{Dir: filepath.Join(dir, "r1")})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_, err = cli(t, nil, "up", "--replicas", "1", "--base-port", "0", "--data", dir)
	if err == nil || !strings.Contains(err.Error(), "in use by another running replica") ||
		!strings.Contains(err.Error(), filepath.Join(dir, "r1", "LOCK")) {
		t.Errorf("up on a directory in use: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, endpointsFile)); err == nil {
		t.Errorf("a refused up wrote %s", endpointsFile)
	}
}
