package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestUpTour runs the README's first steps as a newcomer would, on the real
// binary: `up`, then `invoke put k v` and `invoke get k` (two views each:
// preliminary, then final or confirmed), then Ctrl-C, `up` again, and the
// value is still there.
func TestUpTour(t *testing.T) {
	dir := t.TempDir()
	// up takes a base port: replica i listens on base+i.
	base := 0
	for p := 20000; p < 60000; p += 100 {
		free := true
		for i := 1; i <= 3; i++ {
			if !portFree(fmt.Sprintf("127.0.0.1:%d", p+i)) {
				free = false
			}
		}
		if free {
			base = p
			break
		}
	}
	if base == 0 {
		t.Skip("no free block of ports for up")
	}
	up := func() (stop func()) {
		cmd := exec.Command(binary, "up", "--data", dir, "--base-port", fmt.Sprint(base))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		ready := make(chan bool, 1)
		go func() {
			sc := bufio.NewScanner(out)
			sent := false
			for sc.Scan() {
				if strings.Contains(sc.Text(), "Ctrl-C stops the cluster") && !sent {
					ready <- true
					sent = true
				}
			}
			if !sent {
				ready <- false
			}
		}()
		select {
		case ok := <-ready:
			if !ok {
				t.Fatal("up exited before it was ready")
			}
		case <-time.After(startTimeout):
			cmd.Process.Kill()
			t.Fatal("up not ready in time")
		}
		return func() {
			// Ctrl-C: a clean stop.
			cmd.Process.Signal(syscall.SIGINT)
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("up after Ctrl-C: %v", err)
				}
			case <-time.After(killTimeout):
				cmd.Process.Kill()
				t.Error("up did not stop after Ctrl-C")
			}
		}
	}
	run := func(args ...string) []string {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, binary, append(args, "--data", dir)...).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		return strings.Split(strings.TrimSpace(string(out)), "\n")
	}
	stop := up()
	lines := run("invoke", "put", "k", "v")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "preliminary") || !strings.HasPrefix(lines[1], "final") {
		t.Fatalf("invoke put: want a preliminary and a final line, got %q", lines)
	}
	lines = run("invoke", "get", "k")
	if len(lines) != 2 || !strings.Contains(lines[0], `value="v"`) ||
		!(strings.Contains(lines[1], "confirmed") || strings.Contains(lines[1], `value="v"`)) {
		t.Fatalf("invoke get: %q", lines)
	}
	stop()
	stop = up()
	defer stop()
	lines = run("get", "k")
	if len(lines) != 1 || !strings.Contains(lines[0], `value="v"`) {
		t.Fatalf("get after restarting up: %q", lines)
	}
	// Bad input: a clear error, a non-zero exit, nothing changed.
	out, err := exec.Command(binary, "invoke", "frobnicate", "k", "--data", dir).CombinedOutput()
	if err == nil || !strings.Contains(string(out), `unknown operation "frobnicate"`) {
		t.Fatalf("unknown operation: err=%v out=%s", err, out)
	}
	out, err = exec.Command(binary, "invoke", "put", strings.Repeat("k", 5000), "v", "--data", dir).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "too large") {
		t.Fatalf("oversized key: err=%v out=%s", err, out)
	}
	lines = run("get", "k")
	if !strings.Contains(lines[0], `value="v"`) {
		t.Fatalf("bad input changed k: %q", lines)
	}
}

func portFree(addr string) bool {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	l.Close()
	return true
}
