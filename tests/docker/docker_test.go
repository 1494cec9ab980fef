package docker

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// Bounds on every wait. The whole test takes well under a minute on two
// cores with a warm build cache; these limits only stop a broken cluster
// from hanging it.
const (
	infoTimeout   = 5 * time.Second  // docker info: is a daemon answering?
	dockerTimeout = 30 * time.Second // one docker command
	readyTimeout  = 30 * time.Second // three fresh replicas elect a leader
	writeTimeout  = 20 * time.Second // a write after a replica is killed
	convergeWait  = 30 * time.Second // a restarted replica catches up
	invokeTimeout = 5 * time.Second  // one client operation (its --command-timeout)
	retryPause    = 250 * time.Millisecond
)

// replicaPort is the port every replica listens on inside its container, for
// clients and peers alike (as in deploy/compose.yaml).
const replicaPort = "7101"

// peers is the same --peers list deploy/compose.yaml gives: replicas reach
// each other by network alias on the private network.
const peers = "1=r1:7101,2=r2:7101,3=r3:7101"

// TestCluster builds the static binary and the image, runs a three-replica
// cluster in containers with TLS (certificates from `correctables cert`;
// the host's client presents a client certificate), and checks from the
// host that a write through one
// replica is read back strongly at another, that the cluster keeps writing
// with a replica killed (SIGKILL: a crash, not a clean stop), and that the
// replica, started again on its volume, converges to the new value.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the Docker cluster test in -short mode")
	}
	requireDocker(t)

	root := repoRoot(t)
	id := uniqueID(t)
	ctxDir := t.TempDir()
	bin := buildBinary(t, root, ctxDir)

	c := &cluster{t: t, id: id, bin: bin}
	c.makeCerts()
	c.buildImage(root, ctxDir)
	c.createNetwork()
	for i := 1; i <= 3; i++ {
		c.startReplica(i)
	}

	// 1. A write through r1, read back by a strong read at r2 alone.
	c.waitReady()
	c.put([]int{1}, "k", "v1")
	if got := c.strongGet(2, "k"); got != "v1" {
		t.Fatalf("strong get k at r2 after put k=v1 at r1 = %q, want v1", got)
	}

	// 2. Kill r3 (it may be the leader: the others must elect a new one)
	// and write through the two that remain.
	c.docker(dockerTimeout, "kill", c.container(3))
	c.put([]int{1, 2}, "k", "v2")
	if got := c.strongGet(1, "k"); got != "v2" {
		t.Fatalf("strong get k at r1 after put k=v2 with r3 down = %q, want v2", got)
	}

	// 3. Start r3 again on the same volume: its own (weak) view must catch
	// up to v2. Its host port may have changed, so read it again.
	c.docker(dockerTimeout, "start", c.container(3))
	c.readPort(3)
	c.waitWeak(3, "k", "v2")
	if got := c.strongGet(3, "k"); got != "v2" {
		t.Fatalf("strong get k at restarted r3 = %q, want v2", got)
	}
}

// requireDocker skips the test unless a docker CLI is installed and its
// daemon answers promptly.
func requireDocker(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("skipping: no docker command on PATH")
	}
	ctx, cancel := context.WithTimeout(context.Background(), infoTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput()
	if err != nil || ctx.Err() != nil {
		t.Skipf("skipping: the Docker daemon does not answer `docker info` within %v: %v: %s",
			infoTimeout, err, bytes.TrimSpace(out))
	}
	t.Logf("docker engine %s", bytes.TrimSpace(out))
}

// repoRoot is the module root: the Dockerfile and the binary's sources are
// there.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"go.mod", "Dockerfile", ".dockerignore"} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Fatalf("not the repository root (%s): %v", root, err)
		}
	}
	return root
}

// uniqueID names this run's image, network, containers and volumes, so that
// concurrent runs (and anything else on the engine) are left alone.
func uniqueID(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "correctables-test-" + hex.EncodeToString(b)
}

// buildBinary builds the static binary into ctxDir/bin, where the image's
// build context expects it, and returns its path; the test also runs it as
// the client.
func buildBinary(t *testing.T, root, ctxDir string) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("skipping: no go command on PATH to build the binary")
	}
	bin := filepath.Join(ctxDir, "bin", "correctables")
	// A cold build on two busy cores can take minutes: the build is bound
	// only by the test's own deadline (go test -timeout), with a minute
	// left for the cluster, not by a limit of its own.
	ctx, cancel := context.WithCancel(context.Background())
	if d, ok := t.Deadline(); ok {
		ctx, cancel = context.WithDeadline(context.Background(), d.Add(-time.Minute))
	}
	defer cancel()
	cmd := exec.CommandContext(ctx, gobin, "build", "-o", bin, "./cmd/correctables")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 go build ./cmd/correctables: %v\n%s", err, out)
	}
	t.Logf("built the static binary in %v", time.Since(start).Round(time.Millisecond))
	return bin
}

// cluster is one run's Docker resources and the client that drives them.
// Every resource is removed in t.Cleanup, registered before it is created,
// so a failure anywhere leaves nothing behind.
type cluster struct {
	t     *testing.T
	id    string
	bin   string
	ports [4]string // host address of replica i's published port; [0] unused
	// certs is the certificates directory (`correctables cert`), mounted
	// read-only at /certs in every container.
	certs string
}

// imageUser is the numeric user the image runs as (the Dockerfile's USER).
const imageUser = 65532

// makeCerts creates the cluster's CA, a certificate per replica (naming its
// id, its network alias and 127.0.0.1, where the host reaches its published
// port) and a client certificate, with the binary's cert commands. The
// files are handed to the image's user, which reads them in the containers.
func (c *cluster) makeCerts() {
	c.t.Helper()
	c.certs = c.t.TempDir()
	steps := [][]string{{"cert", "create-ca", "--certs-dir", c.certs}}
	for i := 1; i <= 3; i++ {
		steps = append(steps, []string{"cert", "create-replica", "--certs-dir", c.certs, "--id", fmt.Sprint(i), fmt.Sprintf("r%d", i), "127.0.0.1"})
	}
	steps = append(steps, []string{"cert", "create-client", "--certs-dir", c.certs, "root"})
	for _, s := range steps {
		if out, err := exec.Command(c.bin, s...).CombinedOutput(); err != nil {
			c.t.Fatalf("correctables %s: %v\n%s", strings.Join(s, " "), err, out)
		}
	}
	// The directory is readable by all; the keys by their owner only.
	if err := os.Chmod(c.certs, 0o755); err != nil {
		c.t.Fatal(err)
	}
	entries, err := os.ReadDir(c.certs)
	if err != nil {
		c.t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.Chown(filepath.Join(c.certs, e.Name()), imageUser, imageUser); err != nil {
			c.t.Skipf("skipping: cannot hand the certificates to the image's user %d (needs root): %v", imageUser, err)
		}
	}
}

// tlsFlags are the client's flags: the CA and the client certificate.
func (c *cluster) tlsFlags() []string {
	return []string{"--cacert", filepath.Join(c.certs, "ca.crt"),
		"--cert", filepath.Join(c.certs, "client.root.crt"), "--key", filepath.Join(c.certs, "client.root.key")}
}

func (c *cluster) image() string          { return c.id + ":latest" }
func (c *cluster) network() string        { return c.id }
func (c *cluster) container(i int) string { return fmt.Sprintf("%s-r%d", c.id, i) }
func (c *cluster) volume(i int) string    { return fmt.Sprintf("%s-r%d-data", c.id, i) }
func (c *cluster) endpoints(is []int) string {
	var eps []string
	for _, i := range is {
		eps = append(eps, c.ports[i])
	}
	return strings.Join(eps, ",")
}

// docker runs one docker command within timeout and fails the test if it
// fails; it returns the command's standard output.
func (c *cluster) docker(timeout time.Duration, args ...string) string {
	c.t.Helper()
	out, err := runDocker(timeout, args...)
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}

// runDocker runs one docker command within timeout.
func runDocker(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (timed out after %v)", err, timeout)
		}
		return stdout.String(), fmt.Errorf("docker %s: %w\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return stdout.String(), nil
}

// cleanup registers a docker command that removes a resource; a failure to
// remove it is reported but does not fail the test.
func (c *cluster) cleanup(args ...string) {
	c.t.Cleanup(func() {
		if _, err := runDocker(dockerTimeout, args...); err != nil {
			c.t.Logf("cleanup: %v", err)
		}
	})
}

// buildImage builds the repository's Dockerfile in a context holding only
// what it copies: the binary (already in ctxDir/bin) and deploy/rootfs.
//
// If the engine cannot build even a trivial FROM scratch image (a canary),
// the environment is at fault (no storage, no builder) and the test skips;
// once the canary builds, a failure to build ours is a real failure.
func (c *cluster) buildImage(root, ctxDir string) {
	c.t.Helper()
	for _, f := range []string{"Dockerfile", ".dockerignore", "deploy/rootfs/data/README"} {
		copyFile(c.t, filepath.Join(root, f), filepath.Join(ctxDir, f))
	}

	canaryDir := c.t.TempDir()
	canaryDF := "FROM scratch\nCOPY canary /canary\n"
	if err := os.WriteFile(filepath.Join(canaryDir, "Dockerfile"), []byte(canaryDF), 0o644); err != nil {
		c.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(canaryDir, "canary"), []byte("canary\n"), 0o644); err != nil {
		c.t.Fatal(err)
	}
	canary := c.id + "-canary:latest"
	c.cleanup("rmi", "--force", canary)
	if _, err := runDocker(2*dockerTimeout, "build", "--quiet", "--tag", canary, canaryDir); err != nil {
		c.t.Skipf("skipping: this engine cannot build a FROM scratch image: %v", err)
	}

	c.cleanup("rmi", "--force", c.image())
	start := time.Now()
	c.docker(2*dockerTimeout, "build", "--quiet", "--label", "correctables.test="+c.id, "--tag", c.image(), ctxDir)
	c.t.Logf("built image %s in %v", c.image(), time.Since(start).Round(time.Millisecond))
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// createNetwork creates the private bridge network the replicas talk on. An
// engine that cannot create one (say, out of address pools) is an
// environment problem, not ours: skip.
func (c *cluster) createNetwork() {
	c.t.Helper()
	c.cleanup("network", "rm", c.network())
	if _, err := runDocker(dockerTimeout, "network", "create", "--label", "correctables.test="+c.id, c.network()); err != nil {
		c.t.Skipf("skipping: cannot create a docker network: %v", err)
	}
}

// startReplica runs replica i as deploy/compose.yaml does, with its data on
// a named volume, reachable by its peers as ri and from the host on a random
// loopback port.
func (c *cluster) startReplica(i int) {
	c.t.Helper()
	label := "correctables.test=" + c.id
	c.cleanup("volume", "rm", "--force", c.volume(i))
	c.docker(dockerTimeout, "volume", "create", "--label", label, c.volume(i))
	// Registered after the volume's, so it runs first: a volume in use
	// cannot be removed.
	c.cleanup("rm", "--force", "--volumes", c.container(i))
	c.t.Cleanup(func() {
		if c.t.Failed() {
			logs, err := exec.Command("docker", "logs", "--tail", "50", c.container(i)).CombinedOutput()
			c.t.Logf("docker logs %s (err %v):\n%s", c.container(i), err, logs)
		}
	})
	c.docker(dockerTimeout, "run", "--detach",
		"--name", c.container(i),
		"--label", label,
		"--network", c.network(),
		"--network-alias", fmt.Sprintf("r%d", i),
		"--volume", c.volume(i)+":/data",
		"--volume", c.certs+":/certs:ro",
		"--publish", "127.0.0.1::"+replicaPort,
		c.image(),
		"serve", "--id", fmt.Sprint(i), "--listen", "0.0.0.0:"+replicaPort, "--data", "/data", "--peers", peers,
		"--certs-dir", "/certs",
	)
	c.readPort(i)
}

// readPort reads the loopback host address docker gave replica i's port.
func (c *cluster) readPort(i int) {
	c.t.Helper()
	out, err := runDocker(dockerTimeout, "port", c.container(i), replicaPort+"/tcp")
	if err != nil {
		// No port means no running container: say so, the logs say why.
		state, _ := runDocker(dockerTimeout, "inspect", "--format", "{{.State.Status}} (exit code {{.State.ExitCode}})", c.container(i))
		c.t.Fatalf("replica %d: container %s is %s: %v", i, c.container(i), strings.TrimSpace(state), err)
	}
	// One line per host binding; we asked for 127.0.0.1 only.
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if addr := strings.TrimSpace(line); strings.HasPrefix(addr, "127.0.0.1:") {
			c.ports[i] = addr
			c.t.Logf("replica %d: %s on 127.0.0.1 port %s", i, c.container(i), strings.TrimPrefix(addr, "127.0.0.1:"))
			return
		}
	}
	c.t.Fatalf("docker port %s %s/tcp: no 127.0.0.1 binding in %q", c.container(i), replicaPort, out)
}

// view is one line of `correctables invoke --json`.
type view struct {
	Level     string `json:"level"`
	Final     bool   `json:"final"`
	Confirmed bool   `json:"confirmed"`
	Replica   uint64 `json:"replica"`
	Result    struct {
		Found bool   `json:"found"`
		Value string `json:"value"`
		Error string `json:"error"`
	} `json:"result"`
}

// invoke runs the binary as a client against the replicas is and returns
// the views it printed. An error is the client's (exit status and stderr)
// or an operation's error result.
func (c *cluster) invoke(is []int, args ...string) ([]view, error) {
	ctx, cancel := context.WithTimeout(context.Background(), invokeTimeout+5*time.Second)
	defer cancel()
	argv := append(append([]string{"invoke", "--json", "--command-timeout", invokeTimeout.String(), "--endpoints", c.endpoints(is)}, c.tlsFlags()...), args...)
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, c.bin, argv...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("correctables %s: %w: %s", strings.Join(argv, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	var views []view
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		var v view
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			return nil, fmt.Errorf("correctables %s: output line %q: %w", strings.Join(argv, " "), sc.Text(), err)
		}
		if v.Result.Error != "" {
			return nil, fmt.Errorf("correctables %s: %s view: %s", strings.Join(argv, " "), v.Level, v.Result.Error)
		}
		views = append(views, v)
	}
	if len(views) == 0 {
		return nil, fmt.Errorf("correctables %s: printed no view", strings.Join(argv, " "))
	}
	return views, nil
}

// finalView is the last view, which must be the final one.
func finalView(vs []view) (view, error) {
	last := vs[len(vs)-1]
	if !last.Final {
		return view{}, fmt.Errorf("the last view (%s) is not final", last.Level)
	}
	return last, nil
}

// retry runs op until it succeeds or timeout passes, and returns the last
// error on timeout.
func retry(timeout time.Duration, op func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := op()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("still failing after %v: %w", timeout, err)
		}
		time.Sleep(retryPause)
	}
}

// waitReady waits until a strong write through each replica completes: the
// replicas are up, reachable from the host, and have a leader.
func (c *cluster) waitReady() {
	c.t.Helper()
	start := time.Now()
	for i := 1; i <= 3; i++ {
		err := retry(readyTimeout, func() error {
			vs, err := c.invoke([]int{i}, "--strong", "put", "ready", fmt.Sprint(i))
			if err != nil {
				return err
			}
			_, err = finalView(vs)
			return err
		})
		if err != nil {
			c.t.Fatalf("cluster not ready through replica %d: %v", i, err)
		}
	}
	c.t.Logf("cluster ready in %v", time.Since(start).Round(time.Millisecond))
}

// put writes key=value through the replicas is, asking for both views,
// retrying until it succeeds (a replica may just have been killed and a new
// leader not yet elected; rewriting the same value is harmless).
func (c *cluster) put(is []int, key, value string) {
	c.t.Helper()
	start := time.Now()
	err := retry(writeTimeout, func() error {
		vs, err := c.invoke(is, "put", key, value)
		if err != nil {
			return err
		}
		if _, err := finalView(vs); err != nil {
			return err
		}
		if len(vs) != 2 || vs[0].Final {
			return fmt.Errorf("put printed %d views, want a preliminary then a final one: %+v", len(vs), vs)
		}
		return nil
	})
	if err != nil {
		c.t.Fatalf("put %s=%s through %s: %v", key, value, c.endpoints(is), err)
	}
	c.t.Logf("put %s=%s through replicas %v in %v", key, value, is, time.Since(start).Round(time.Millisecond))
}

// strongGet reads key with a strong read at replica i alone and returns the
// value of the final view.
func (c *cluster) strongGet(i int, key string) string {
	c.t.Helper()
	vs, err := c.invoke([]int{i}, "--strong", "get", key)
	if err != nil {
		c.t.Fatal(err)
	}
	v, err := finalView(vs)
	if err != nil {
		c.t.Fatal(err)
	}
	if v.Level != "strong" {
		c.t.Fatalf("strong get %s at replica %d: final view level %q, want strong", key, i, v.Level)
	}
	if !v.Result.Found {
		return ""
	}
	return v.Result.Value
}

// waitWeak waits until a weak read of key at replica i alone returns want:
// the replica's own state has caught up.
func (c *cluster) waitWeak(i int, key, want string) {
	c.t.Helper()
	start := time.Now()
	err := retry(convergeWait, func() error {
		vs, err := c.invoke([]int{i}, "--weak", "get", key)
		if err != nil {
			return err
		}
		v := vs[len(vs)-1]
		if v.Replica != 0 && v.Replica != uint64(i) {
			return fmt.Errorf("weak get at replica %d answered by replica %d", i, v.Replica)
		}
		if got := v.Result.Value; !v.Result.Found || got != want {
			return fmt.Errorf("weak get %s at replica %d = %q (found %v), want %q", key, i, got, v.Result.Found, want)
		}
		return nil
	})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Logf("replica %d converged to %s=%s in %v", i, key, want, time.Since(start).Round(time.Millisecond))
}

// TestComposeFile checks that deploy/compose.yaml is valid for whichever
// compose tool is installed (the docker compose plugin, or docker-compose
// 1.x). TestCluster runs the same services with docker run, so that it
// controls each container; this keeps the file from rotting.
func TestComposeFile(t *testing.T) {
	root := repoRoot(t)
	file := filepath.Join(root, "deploy", "compose.yaml")
	var argv []string
	if out, err := exec.Command("docker", "compose", "version").CombinedOutput(); err == nil {
		argv = []string{"docker", "compose"}
		t.Logf("%s", bytes.TrimSpace(out))
	} else if out, err := exec.Command("docker-compose", "version", "--short").CombinedOutput(); err == nil {
		argv = []string{"docker-compose"}
		t.Logf("docker-compose %s", bytes.TrimSpace(out))
	} else {
		t.Skip("skipping: neither `docker compose` nor docker-compose is installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
	defer cancel()
	argv = append(argv, "--project-name", "correctables-compose-check", "--file", file, "config", "--services")
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	got := strings.Fields(string(out))
	slices.Sort(got)
	if want := []string{"r1", "r2", "r3"}; !slices.Equal(got, want) {
		t.Fatalf("%s: services %v, want %v", strings.Join(argv, " "), got, want)
	}
}
