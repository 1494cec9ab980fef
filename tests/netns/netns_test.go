package netns

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/internal/certs"
)

// binary is the `correctables` binary TestMain built ("" if the build
// failed: the tests then fail).
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "correctables-netns-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "netns:", err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "correctables")
	// Built once, without -race (the servers need not be slowed down) and
	// without a time limit: a cold build on a busy machine takes what it
	// takes.
	cmd := exec.Command("go", "build", "-o", binary, "github.com/correctables/correctables/cmd/correctables")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "netns: building the binary:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// Bounds on every wait; they only stop a broken cluster from hanging the
// test.
const (
	ipTimeout      = 10 * time.Second // one ip command
	readyTimeout   = 60 * time.Second // the replicas elect a leader
	commandTimeout = 5 * time.Second  // one CLI command (its --command-timeout)
	stopTimeout    = 10 * time.Second // a replica stops on SIGTERM
	port           = "7101"
)

// skipOrFail skips the test, or fails it when CORRECTABLES_REQUIRE_NETNS=1.
func skipOrFail(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CORRECTABLES_REQUIRE_NETNS") == "1" {
		t.Fatalf("CORRECTABLES_REQUIRE_NETNS=1: "+format, args...)
	}
	t.Skipf("skipping: "+format, args...)
}

// network is three namespaces (one per replica) and a fourth holding the
// bridge they and the host are plugged into.
type network struct {
	t      *testing.T
	id     string // short random name prefix
	subnet string // "10.213.N"
}

func (n *network) ns(i int) string       { return fmt.Sprintf("%s-%d", n.id, i) } // i = 0: the bridge's
func (n *network) addr(i int) string     { return fmt.Sprintf("%s.%d", n.subnet, 10+i) }
func (n *network) hostIf() string        { return n.id + "h" }
func (n *network) endpoint(i int) string { return n.addr(i) + ":" + port }

// ip runs an ip command; it returns the error with the command's output.
func ip(args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), ipTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// newNetwork builds the namespaces, or skips (fails under
// CORRECTABLES_REQUIRE_NETNS=1) if this machine cannot.
func newNetwork(t *testing.T) *network {
	t.Helper()
	if os.Geteuid() != 0 {
		skipOrFail(t, "network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		skipOrFail(t, "no ip command (iproute2)")
	}
	b := make([]byte, 2)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	n := &network{t: t, id: "ct" + hex.EncodeToString(b), subnet: freeSubnet(t)}
	// The first namespace tells whether this machine allows them at all.
	if err := ip("netns", "add", n.ns(0)); err != nil {
		skipOrFail(t, "cannot create a network namespace: %v", err)
	}
	t.Cleanup(func() {
		for i := 0; i <= 3; i++ {
			ip("netns", "del", n.ns(i))
		}
		ip("link", "del", n.hostIf()) // gone with its peer already, normally
	})
	steps := [][]string{
		{"-n", n.ns(0), "link", "set", "lo", "up"},
		{"-n", n.ns(0), "link", "add", "br0", "type", "bridge"},
		{"-n", n.ns(0), "link", "set", "br0", "up"},
		// The host's leg: an address on the replicas' network.
		{"link", "add", n.hostIf(), "type", "veth", "peer", "name", "p0", "netns", n.ns(0)},
		{"addr", "add", n.subnet + ".1/24", "dev", n.hostIf()},
		{"link", "set", n.hostIf(), "up"},
		{"-n", n.ns(0), "link", "set", "p0", "master", "br0"},
		{"-n", n.ns(0), "link", "set", "p0", "up"},
	}
	for i := 1; i <= 3; i++ {
		p := fmt.Sprintf("p%d", i)
		steps = append(steps,
			[]string{"netns", "add", n.ns(i)},
			[]string{"-n", n.ns(i), "link", "set", "lo", "up"},
			[]string{"-n", n.ns(i), "link", "add", "eth0", "type", "veth", "peer", "name", p, "netns", n.ns(0)},
			[]string{"-n", n.ns(i), "addr", "add", n.addr(i) + "/24", "dev", "eth0"},
			[]string{"-n", n.ns(i), "link", "set", "eth0", "up"},
			[]string{"-n", n.ns(0), "link", "set", p, "master", "br0"},
			[]string{"-n", n.ns(0), "link", "set", p, "up"},
		)
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			skipOrFail(t, "cannot build the namespaces' network: %v", err)
		}
	}
	t.Logf("namespaces %s-{1,2,3} at %s.{11,12,13}, host at %s.1", n.id, n.subnet, n.subnet)
	return n
}

// freeSubnet picks a /24 in 10.213.0.0/16 that no address of the host's
// is in (another run of this test may be using one).
func freeSubnet(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("ip", "-o", "addr").CombinedOutput()
	if err != nil {
		skipOrFail(t, "ip -o addr: %v: %s", err, out)
	}
	for range 100 {
		third, err := rand.Int(rand.Reader, big.NewInt(250))
		if err != nil {
			t.Fatal(err)
		}
		subnet := fmt.Sprintf("10.213.%d", third.Int64()+2)
		if !strings.Contains(string(out), " "+subnet+".") {
			return subnet
		}
	}
	t.Fatal("no free /24 in 10.213.0.0/16")
	return ""
}

// replica is one serve process in its namespace.
type replica struct {
	cmd  *exec.Cmd
	log  string
	stop func() // SIGTERM, then SIGKILL after stopTimeout; idempotent
}

// startReplica runs replica i in its namespace with the certificates in
// certsDir, logging to <dir>/<name>.log.
func (n *network) startReplica(dir, certsDir string, i int, name string) *replica {
	t := n.t
	t.Helper()
	var peers []string
	for j := 1; j <= 3; j++ {
		peers = append(peers, fmt.Sprintf("%d=%s", j, n.endpoint(j)))
	}
	r := &replica{log: filepath.Join(dir, name+".log")}
	logf, err := os.Create(r.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	r.cmd = exec.Command("ip", "netns", "exec", n.ns(i), binary, "serve",
		"--id", fmt.Sprint(i), "--listen", n.endpoint(i), "--data", filepath.Join(dir, fmt.Sprintf("r%d", i)),
		"--certs-dir", certsDir, "--peers", strings.Join(peers, ","))
	r.cmd.Stdout, r.cmd.Stderr = logf, logf
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	r.stop = func() {
		once.Do(func() {
			// ip netns exec execs the binary: the pid is the replica's.
			r.cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { r.cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(stopTimeout):
				r.cmd.Process.Kill()
				<-done
			}
		})
	}
	t.Cleanup(func() {
		r.stop()
		if t.Failed() {
			b, _ := os.ReadFile(r.log)
			t.Logf("%s log:\n%s", name, tail(b, 30))
		}
	})
	return r
}

// waitLog waits until r's log has a line with all of words.
func (r *replica) waitLog(t *testing.T, timeout time.Duration, words ...string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		b, _ := os.ReadFile(r.log)
		for _, line := range strings.Split(string(b), "\n") {
			all := true
			for _, w := range words {
				all = all && strings.Contains(line, w)
			}
			if all {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no line with %q within %v", r.log, words, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func tail(b []byte, lines int) string {
	ls := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(ls[max(0, len(ls)-lines):], "\n")
}

// cli runs the binary in the host namespace and returns its output.
func cli(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout+5*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("correctables %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(errOut.Bytes()))
	}
	return out.String(), nil
}

// TestTLSAcrossNamespaces: three replicas, each in its own network
// namespace, run with TLS; the CLI in the host namespace writes through one
// and reads strongly at another with a client certificate, and is refused
// in plaintext; peer streams from the host with a certificate for another
// replica id, a client certificate or none are refused, the same stream
// with the right certificate accepted.
func TestTLSAcrossNamespaces(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the network namespace test in -short mode")
	}
	n := newNetwork(t)
	dir := t.TempDir()
	certsDir := filepath.Join(dir, "certs")
	steps := [][]string{{"cert", "create-ca", "--certs-dir", certsDir}}
	for i := 1; i <= 3; i++ {
		steps = append(steps, []string{"cert", "create-replica", "--certs-dir", certsDir, "--id", fmt.Sprint(i), n.addr(i)})
	}
	steps = append(steps, []string{"cert", "create-client", "--certs-dir", certsDir, "root"})
	for _, s := range steps {
		if _, err := cli(s...); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	var reps [4]*replica
	for i := 1; i <= 3; i++ {
		reps[i] = n.startReplica(dir, certsDir, i, fmt.Sprintf("r%d", i))
	}
	eps := func(is ...int) string {
		var l []string
		for _, i := range is {
			l = append(l, n.endpoint(i))
		}
		return strings.Join(l, ",")
	}
	tlsFlags := []string{"--cacert", filepath.Join(certsDir, certs.CACert),
		"--cert", filepath.Join(certsDir, "client.root.crt"), "--key", filepath.Join(certsDir, "client.root.key"),
		"--command-timeout", commandTimeout.String(), "--dial-timeout", commandTimeout.String()}

	// Ready: a strong write through replica 1 gets its final view (the
	// replicas found each other over TLS and elected a leader).
	deadline := time.Now().Add(readyTimeout)
	for {
		out, err := cli(append(append([]string{"--endpoints", eps(1)}, tlsFlags...), "invoke", "--strong", "put", "k", "across-namespaces")...)
		if err == nil && strings.Contains(out, "final") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no strong write through replica 1 within %v: %v\n%s", readyTimeout, err, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("cluster ready and written in %v", time.Since(start).Round(time.Millisecond))

	out, err := cli(append(append([]string{"--endpoints", eps(3)}, tlsFlags...), "invoke", "--strong", "get", "k")...)
	if err != nil || !strings.Contains(out, "across-namespaces") {
		t.Fatalf("strong get at replica 3 over TLS: %v\n%s", err, out)
	}
	if _, err := cli("--endpoints", eps(1, 2, 3), "--insecure", "--dial-timeout", "2s", "invoke", "get", "k"); err == nil {
		t.Fatal("a plaintext client was served by replicas on TLS")
	}
	if _, err := cli("--endpoints", eps(1, 2, 3), "invoke", "get", "k"); err == nil || !strings.Contains(err.Error(), "plaintext refused") {
		t.Fatalf("plaintext to replicas off loopback without --insecure: %v, want a refusal", err)
	}

	// Peer streams from the host to replica 1, over the network.
	ca, err := certs.LoadCAs(filepath.Join(certsDir, certs.CACert))
	if err != nil {
		t.Fatal(err)
	}
	peerStream := func(certName string, from uint64) error {
		cfg, err := certs.ClientConfig("", "", "")
		if err != nil {
			t.Fatal(err)
		}
		cfg.RootCAs = certs.Pool(ca)
		cfg.ServerName = n.addr(1)
		if certName != "" {
			pair, err := certs.LoadPair(filepath.Join(certsDir, certName+".crt"), filepath.Join(certsDir, certName+".key"))
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = append(cfg.Certificates, pair)
		}
		conn, err := grpc.NewClient(n.endpoint(1), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
		defer cancel()
		st, err := api.NewPeerClient(conn).Stream(ctx)
		if err != nil {
			return err
		}
		// No message in the envelope: an accepted stream changes nothing.
		if err := st.Send(&api.PeerEnvelope{From: from}); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		_, err = st.CloseAndRecv()
		return err
	}
	if err := peerStream("replica.2", 2); err != nil {
		t.Fatalf("replica 2's certificate speaking for replica 2: %v", err)
	}
	for _, tt := range []struct {
		name, cert string
		want       string
	}{
		{"certificate for another replica id", "replica.2", "names replicas [2]"},
		{"client certificate", "client.root", "names no replica"},
		{"no certificate", "", "presented no certificate"},
	} {
		err := peerStream(tt.cert, 3)
		if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("peer stream claiming replica 3 with %s: %v, want Unauthenticated mentioning %q", tt.name, err, tt.want)
		}
	}

	// The cluster still serves after the refusals.
	out, err = cli(append(append([]string{"--endpoints", eps(2)}, tlsFlags...), "invoke", "--strong", "get", "k")...)
	if err != nil || !strings.Contains(out, "across-namespaces") {
		t.Fatalf("strong get at replica 2 after the refused peers: %v\n%s", err, out)
	}

	// Replica 3 restarted with a certificate for its own id from another
	// CA: the others refuse it and it refuses them (each logs it), and
	// replicas 1 and 2 go on committing without it.
	rogueDir := filepath.Join(dir, "rogue")
	for _, s := range [][]string{
		{"cert", "create-ca", "--certs-dir", rogueDir},
		{"cert", "create-replica", "--certs-dir", rogueDir, "--id", "3", n.addr(3)},
	} {
		if _, err := cli(s...); err != nil {
			t.Fatal(err)
		}
	}
	reps[3].stop()
	rogue := n.startReplica(dir, rogueDir, 3, "r3-other-ca")
	rogue.waitLog(t, readyTimeout, "peer authentication failed", "peer=1")
	reps[1].waitLog(t, readyTimeout, "peer authentication failed", "peer=3")
	out, err = cli(append(append([]string{"--endpoints", eps(1)}, tlsFlags...), "invoke", "--strong", "put", "k", "without-3")...)
	if err != nil || !strings.Contains(out, "final") {
		t.Fatalf("strong put through replica 1 with replica 3 refused: %v\n%s", err, out)
	}
}
