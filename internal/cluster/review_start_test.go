package cluster

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A cluster whose third replica's port is taken fails to start with the
// listen error, and stops the replicas it had started: their ports are free
// again and their stores closed (a retry on other ports reopens them).
func TestReviewStartBusyPortCleansUp(t *testing.T) {
	// Find three consecutive free ports, then occupy the third.
	var base int
	var busy net.Listener
	for try := 0; try < 50 && busy == nil; try++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if p < 3 {
			continue
		}
		ok := true
		for _, q := range []int{p - 2, p - 1} {
			m, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(q))
			if err != nil {
				ok = false
				break
			}
			m.Close()
		}
		if !ok {
			continue
		}
		if busy, err = net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p)); err != nil {
			busy = nil
			continue
		}
		base = p - 3
	}
	if busy == nil {
		t.Skip("no three consecutive free ports")
	}
	defer busy.Close()
	dir := t.TempDir()
	done := make(chan error, 1)
	go func() {
		c, err := Start(Options{Dir: dir, BasePort: base, NoSync: true, Logger: quiet()})
		if err == nil {
			c.Stop()
		}
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Start on a busy port did not return")
	}
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("Start with replica 3's port taken: %v", err)
	}
	for _, q := range []int{base + 1, base + 2} {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(q))
		if err != nil {
			t.Fatalf("port %d still held after the failed Start: %v", q, err)
		}
		l.Close()
	}
	// The stores were closed: the same directory starts on free ports.
	c, err := Start(Options{Dir: dir, NoSync: true, Logger: quiet()})
	if err != nil {
		t.Fatalf("restart in the same directory: %v", err)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
}

// Stopping a cluster twice is harmless.
func TestReviewStopTwice(t *testing.T) {
	c, err := Start(Options{Dir: t.TempDir(), Replicas: 1, NoSync: true, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { c.Stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("second Stop hangs")
	}
}
