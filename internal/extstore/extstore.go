// Package extstore starts the stores other than ours that the bindings run
// on, for tests, examples and measurements: a three-member etcd cluster in
// this process (go.etcd.io/etcd/server/v3/embed), a three-server ZooKeeper
// ensemble and a Redis primary with two replicas, both from Debian's
// packages (zookeeper, redis-server), as child processes on loopback ports
// with their data in a directory of the caller's. Stop stops them and
// removes nothing (the caller owns the directory; tests use t.TempDir).
package extstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/correctables/correctables/internal/loopback"
)

// ErrNotInstalled is returned when a store's programs are not on this
// machine.
var ErrNotInstalled = errors.New("not installed")

// Require handles a failure to start a store in a test: outside CI (CI
// unset or not "true") the test is skipped with the reason, so that a
// developer without the Debian packages still runs the rest; in CI
// (CI=true, as .ci/run sets) it fails.
func Require(t testing.TB, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s could not be started (CI=true, so this fails rather than skips): %v", what, err)
	}
	t.Skipf("%s could not be started, skipping (set CI=true to make this a failure; apt-get install zookeeper redis-server): %v", what, err)
}

// Main runs a test binary's tests, m, around servers they share, and exits
// with their code: start starts the servers within timeout in a fresh
// temporary directory (named after pattern, as os.MkdirTemp takes it),
// sets *servers and *startErr to what it returns, and after the tests the
// servers are stopped and the directory removed. A failed start does not
// stop the tests: those that need the servers report *startErr through
// Require.
func Main[S interface{ Stop() error }](m *testing.M, pattern string, timeout time.Duration, start func(ctx context.Context, dir string) (S, error), servers *S, startErr *error) {
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	*servers, *startErr = start(ctx, dir)
	cancel()
	code := m.Run()
	if *startErr == nil {
		(*servers).Stop()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// group is the servers of a store run as child processes.
type group struct {
	procs []*process
}

// Stop stops every server.
func (g *group) Stop() error {
	var errs []error
	for _, p := range g.procs {
		errs = append(errs, p.stop())
	}
	g.procs = nil
	return errors.Join(errs...)
}

// exited returns the error of the first server found to have ended (see
// process.exited), or nil while all run.
func (g *group) exited() error {
	for _, p := range g.procs {
		if err := p.exited(); err != nil {
			return err
		}
	}
	return nil
}

// freePorts returns n distinct free TCP ports on 127.0.0.1, below the
// ephemeral range so that no outgoing connection takes one before the
// process started right after binds it (loopback.FreePorts).
func freePorts(n int) ([]int, error) {
	ports, err := loopback.FreePorts(n)
	if err != nil {
		return nil, fmt.Errorf("extstore: %w", err)
	}
	return ports, nil
}

// retry starts servers up to three times, each in a fresh sub-directory of
// dir: the free ports they are given may be taken by another process
// before they bind them.
func retry[S any](ctx context.Context, dir string, start func(dir string) (S, error)) (S, error) {
	var (
		s   S
		err error
	)
	for attempt := range 3 {
		s, err = start(filepath.Join(dir, fmt.Sprintf("try%d", attempt+1)))
		if err == nil || errors.Is(err, ErrNotInstalled) || ctx.Err() != nil {
			return s, err
		}
	}
	return s, err
}
