package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/internal/loopback"
)

// Bounds of the harness. Generous: a slow machine must not fail the tests,
// and no test asserts a latency.
const (
	startTimeout = 30 * time.Second // a process prints its ready line
	killTimeout  = 10 * time.Second // a killed process is reaped
	quietTimeout = 30 * time.Second // replicas agree once the load stopped
	tick         = "10ms"
)

// proc is one `correctables serve` process. Restarting it reuses its id,
// port, peer list and data directory.
type proc struct {
	id    uint64
	addr  string // clients and peers connect here
	dir   string // data directory
	peers string // the --peers flag: this process's view of the others
	// initial is the --initial-cluster flag: the founders at their own
	// addresses, which the cluster id is computed from (peers may name
	// proxies); empty for a replica that joins.
	initial string
	log     string // stderr of every incarnation, appended
	join    bool   // serve --join: added to a running cluster (member add)
	debug   string // serve --metrics, if set (CORRECTABLES_E2E_PROFILE)

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when the current incarnation was reaped
}

// readyWriter is the process's stdout: it signals the ready line.
type readyWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	ready chan struct{}
	once  sync.Once
}

func (w *readyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), " serving on ") {
		w.once.Do(func() { close(w.ready) })
	}
	return len(p), nil
}

// start runs a new incarnation and waits for its ready line.
func (p *proc) start() error {
	logf, err := os.OpenFile(p.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "=== start %s\n", time.Now().Format(time.RFC3339Nano))
	out := &readyWriter{ready: make(chan struct{})}
	args := []string{"serve", "--id", fmt.Sprint(p.id), "--listen", p.addr, "--data", p.dir, "--peers", p.peers, "--tick", tick}
	if p.join {
		args = append(args, "--join")
	}
	if p.initial != "" {
		args = append(args, "--initial-cluster", p.initial)
	}
	if p.debug != "" {
		args = append(args, "--metrics", p.debug)
	}
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = out, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("replica %d: %w", p.id, err)
	}
	exited := make(chan struct{})
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(logf, "=== exit %s: %v\n", time.Now().Format(time.RFC3339Nano), err)
		logf.Close()
		close(exited)
	}()
	p.mu.Lock()
	p.cmd, p.exited = cmd, exited
	p.mu.Unlock()
	select {
	case <-out.ready:
		return nil
	case <-exited:
		return fmt.Errorf("replica %d exited before it was ready (log %s)", p.id, p.log)
	case <-time.After(startTimeout):
		p.kill()
		return fmt.Errorf("replica %d not ready after %v (log %s)", p.id, startTimeout, p.log)
	}
}

// kill sends SIGKILL to the current incarnation, if it runs, and reaps it.
func (p *proc) kill() error {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-exited:
		return nil
	default:
	}
	_ = cmd.Process.Kill()
	select {
	case <-exited:
		return nil
	case <-time.After(killTimeout):
		return fmt.Errorf("replica %d (pid %d) not reaped %v after SIGKILL", p.id, cmd.Process.Pid, killTimeout)
	}
}

// alive reports whether the current incarnation runs.
func (p *proc) alive() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// cluster is three processes on loopback.
type cluster struct {
	t     *testing.T
	procs []*proc
}

// freePorts returns n distinct free loopback addresses for the replicas to
// bind, below the ephemeral range so that no outgoing connection takes one
// before its replica starts (loopback.FreePorts).
func freePorts(t *testing.T, n int) []string {
	t.Helper()
	ports, err := loopback.FreePorts(n)
	if err != nil {
		t.Fatalf("reserving ports: %v", err)
	}
	var addrs []string
	for _, p := range ports {
		addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", p))
	}
	return addrs
}

// newCluster prepares (does not start) three replicas at addrs. peerAddr
// gives the address replica from uses to reach replica to; nil means the
// replica's own address (no proxy).
func newCluster(t *testing.T, addrs []string, peerAddr func(from, to int) string) *cluster {
	t.Helper()
	dir := t.TempDir()
	if os.Getenv("CORRECTABLES_E2E_KEEP") != "" {
		var err error
		if dir, err = os.MkdirTemp("", "correctables-e2e-"); err != nil {
			t.Fatal(err)
		}
		t.Logf("keeping data and logs in %s", dir)
	}
	c := &cluster{t: t}
	var founders []string
	for j, a := range addrs {
		founders = append(founders, fmt.Sprintf("%d=%s", j+1, a))
	}
	for i, addr := range addrs {
		var peers []string
		for j := range addrs {
			a := addrs[j]
			if j != i && peerAddr != nil {
				a = peerAddr(i, j)
			}
			peers = append(peers, fmt.Sprintf("%d=%s", j+1, a))
		}
		c.procs = append(c.procs, &proc{
			id:      uint64(i + 1),
			addr:    addr,
			dir:     filepath.Join(dir, fmt.Sprintf("r%d", i+1)),
			peers:   strings.Join(peers, ","),
			initial: strings.Join(founders, ","),
			log:     filepath.Join(dir, fmt.Sprintf("r%d.log", i+1)),
		})
	}
	profileCluster(t, c)
	t.Cleanup(func() {
		for _, p := range c.procs {
			if err := p.kill(); err != nil {
				t.Error(err)
			}
		}
		if t.Failed() {
			for _, p := range c.procs {
				t.Logf("replica %d log (%s), last lines:\n%s", p.id, p.log, tail(p.log, 40))
			}
		}
	})
	return c
}

// startAll starts every replica, in parallel: a replica may wait for a quorum
// before it reports ready.
func (c *cluster) startAll() {
	c.t.Helper()
	errs := make([]error, len(c.procs))
	var wg sync.WaitGroup
	for i, p := range c.procs {
		wg.Go(func() { errs[i] = p.start() })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			c.t.Fatal(err)
		}
	}
}

func (c *cluster) proc(id uint64) *proc { return c.procs[id-1] }

func (c *cluster) addrs() []string {
	var out []string
	for _, p := range c.procs {
		out = append(out, p.addr)
	}
	return out
}

// status asks one replica for its Status.
func status(ctx context.Context, addr string) (*api.StatusReply, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return api.NewStoreClient(conn).Status(ctx, &api.StatusRequest{})
}

// leader returns the leader that every running replica agrees on, waiting
// (bounded) for one.
func (c *cluster) leader(ctx context.Context) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, quietTimeout)
	defer cancel()
	var last string
	for {
		var seen []uint64
		ok := true
		for _, p := range c.procs {
			if !p.alive() {
				continue
			}
			st, err := status(ctx, p.addr)
			if err != nil {
				ok, last = false, fmt.Sprintf("replica %d: %v", p.id, err)
				break
			}
			seen = append(seen, st.GetLeader())
		}
		if ok && len(seen) > 0 && seen[0] != 0 && !slices.ContainsFunc(seen, func(l uint64) bool { return l != seen[0] }) &&
			c.proc(seen[0]).alive() {
			return seen[0], nil
		}
		if ok {
			last = fmt.Sprintf("leaders reported: %v", seen)
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("no agreed leader within %v (%s)", quietTimeout, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitQuiet waits until every replica reports the same committed count and
// version vector and no tentative operation, and returns the statuses.
func (c *cluster) waitQuiet(ctx context.Context) ([]*api.StatusReply, error) {
	ctx, cancel := context.WithTimeout(ctx, quietTimeout)
	defer cancel()
	var sts []*api.StatusReply
	var last string
	for {
		sts = sts[:0]
		for _, p := range c.procs {
			st, err := status(ctx, p.addr)
			if err != nil {
				last = fmt.Sprintf("replica %d: %v", p.id, err)
				break
			}
			sts = append(sts, st)
		}
		if len(sts) == len(c.procs) {
			if why := diverged(sts); why == "" {
				return sts, nil
			} else {
				last = why
			}
		}
		select {
		case <-ctx.Done():
			return sts, fmt.Errorf("replicas not quiet within %v: %s", quietTimeout, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// diverged says how the statuses differ, or "" if the replicas agree.
func diverged(sts []*api.StatusReply) string {
	for _, st := range sts {
		if st.GetTentativeOps() != 0 {
			return fmt.Sprintf("replica %d has %d tentative ops", st.GetId(), st.GetTentativeOps())
		}
		a, b := sts[0], st
		if a.GetCommittedOps() != b.GetCommittedOps() {
			return fmt.Sprintf("committed ops: replica %d %d, replica %d %d", a.GetId(), a.GetCommittedOps(), b.GetId(), b.GetCommittedOps())
		}
		if !equalVV(a.GetVv(), b.GetVv()) {
			return fmt.Sprintf("version vectors: replica %d %v, replica %d %v", a.GetId(), a.GetVv(), b.GetId(), b.GetVv())
		}
	}
	return ""
}

func equalVV(a, b map[uint64]uint64) bool {
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	for k, v := range b {
		if a[k] != v {
			return false
		}
	}
	return true
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}
