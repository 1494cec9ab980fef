package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/internal/loadgen"
	"github.com/correctables/correctables/internal/loopback"
)

// child is a server process the bench started: in a process group of its
// own (Ctrl-C reaches only the bench, which stops it), killed if the bench
// dies (Pdeathsig), its output in a log file.
type child struct {
	name string
	cmd  *exec.Cmd
	log  string

	done chan struct{} // closed when the process has exited
	err  error         // its exit status, set before done closes
}

// children is the set of processes of one system.
type children struct {
	mu    sync.Mutex
	procs []*child
}

// start runs the current binary with args as a child named name, logging
// to logPath. ctx ending sends the process group SIGTERM, then SIGKILL
// after five seconds.
func (cs *children) start(ctx context.Context, name, logPath string, args ...string) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding this binary: %w", err)
	}
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		lf.Close()
		close(c.done)
	}()
	cs.mu.Lock()
	cs.procs = append(cs.procs, c)
	cs.mu.Unlock()
	return c, nil
}

// pids returns the children's process ids.
func (cs *children) pids() []int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	var out []int
	for _, c := range cs.procs {
		out = append(out, c.cmd.Process.Pid)
	}
	return out
}

// exited describes the children that have exited ("" if none has).
func (cs *children) exited() string {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	var out []string
	for _, c := range cs.procs {
		select {
		case <-c.done:
			out = append(out, fmt.Sprintf("%s exited (%v); log %s: %s", c.name, c.err, c.log, tail(c.log, 5)))
		default:
		}
	}
	return strings.Join(out, "\n")
}

// stop sends every child's process group SIGTERM and waits for them, with
// SIGKILL for those still there after five seconds.
func (cs *children) stop() {
	cs.mu.Lock()
	procs := cs.procs
	cs.mu.Unlock()
	for _, c := range procs {
		syscall.Kill(-c.cmd.Process.Pid, syscall.SIGTERM)
	}
	deadline := time.After(5 * time.Second)
	for _, c := range procs {
		select {
		case <-c.done:
		case <-deadline:
			syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
			<-c.done
		}
	}
}

// logProblems counts the warning and error lines in the children's logs
// (slog's level=WARN/ERROR, zap's "level":"warn"/"error") and returns the
// count with the first few.
func (cs *children) logProblems() (n int, first []string) {
	cs.mu.Lock()
	procs := cs.procs
	cs.mu.Unlock()
	for _, c := range procs {
		f, err := os.Open(c.log)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			l := sc.Text()
			if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") ||
				strings.Contains(l, `"level":"warn"`) || strings.Contains(l, `"level":"error"`) ||
				strings.HasPrefix(l, "panic:") || strings.HasPrefix(l, "fatal error:") {
				n++
				if len(first) < 5 {
					if len(l) > 400 {
						l = l[:400] + "..."
					}
					first = append(first, c.name+": "+l)
				}
			}
		}
		f.Close()
	}
	return n, first
}

// tail returns the last n lines of a file, joined with " | ".
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// freePorts returns n distinct free loopback ports, below the ephemeral
// range (loopback.FreePorts).
func freePorts(n int) ([]int, error) { return loopback.FreePorts(n) }

// startServeProcs starts a three-replica cluster of `serve` processes of this
// binary on loopback, data under dir, and waits until every replica knows
// the same leader.
func startServeProcs(ctx context.Context, cs *children, dir string) ([]string, error) {
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	var eps, peers []string
	for i, p := range ports {
		eps = append(eps, "127.0.0.1:"+strconv.Itoa(p))
		peers = append(peers, fmt.Sprintf("%d=%s", i+1, eps[i]))
	}
	for i := range ports {
		id := strconv.Itoa(i + 1)
		data := filepath.Join(dir, "r"+id)
		if _, err := cs.start(ctx, "replica "+id, data+".log", "serve", "--id", id, "--listen", eps[i],
			"--data", data, "--peers", strings.Join(peers, ",")); err != nil {
			return nil, err
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := waitCorrectablesLeader(wctx, eps, cs); err != nil {
		return nil, err
	}
	return eps, nil
}

// waitCorrectablesLeader waits until every endpoint answers Status with the
// same, non-zero leader.
func waitCorrectablesLeader(ctx context.Context, eps []string, cs *children) error {
	var conns []*grpc.ClientConn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for _, ep := range eps {
		c, err := grpc.NewClient(ep, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		conns = append(conns, c)
	}
	var last error
	for {
		var lead uint64
		agree := true
		for i, c := range conns {
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			rep, err := api.NewStoreClient(c).Status(sctx, &api.StatusRequest{})
			cancel()
			if err != nil {
				agree, last = false, fmt.Errorf("%s: %w", eps[i], err)
				break
			}
			if rep.GetLeader() == 0 || (lead != 0 && rep.GetLeader() != lead) {
				agree, last = false, fmt.Errorf("%s: leader %d", eps[i], rep.GetLeader())
			}
			lead = rep.GetLeader()
		}
		if agree {
			return nil
		}
		if cs != nil {
			if ex := cs.exited(); ex != "" {
				return errors.New(ex)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no leader on %v: %w (last: %v)", eps, ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// startEtcdProcs starts a three-member etcd cluster, one `bench etcd-member`
// process of this binary per member, on loopback, data under dir, and waits
// until a linearizable read succeeds.
func startEtcdProcs(ctx context.Context, cs *children, dir string, autoCompaction time.Duration) ([]string, error) {
	ports, err := freePorts(6)
	if err != nil {
		return nil, err
	}
	var clientURLs, peerURLs, initial []string
	for i := range 3 {
		clientURLs = append(clientURLs, fmt.Sprintf("http://127.0.0.1:%d", ports[2*i]))
		peerURLs = append(peerURLs, fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]))
		initial = append(initial, fmt.Sprintf("etcd%d=%s", i+1, peerURLs[i]))
	}
	for i := range 3 {
		name := fmt.Sprintf("etcd%d", i+1)
		data := filepath.Join(dir, name)
		if _, err := cs.start(ctx, name, data+".log", "bench", "etcd-member", "--name", name, "--data-dir", data,
			"--client-url", clientURLs[i], "--peer-url", peerURLs[i], "--initial-cluster", strings.Join(initial, ","),
			"--auto-compaction", autoCompaction.String()); err != nil {
			return nil, err
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- loadgen.WaitEtcd(wctx, clientURLs) }()
	for {
		select {
		case err := <-errc:
			if err != nil {
				if ex := cs.exited(); ex != "" {
					return nil, fmt.Errorf("%w\n%s", err, ex)
				}
				return nil, err
			}
			return clientURLs, nil
		case <-time.After(200 * time.Millisecond):
			if ex := cs.exited(); ex != "" {
				cancel()
				<-errc
				return nil, errors.New(ex)
			}
		}
	}
}
