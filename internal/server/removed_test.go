package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/internal/replica"
	"github.com/correctables/correctables/internal/storage"
)

// syncBuffer is a log destination safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// restartRemoved opens the data of replica id under dir again and builds a
// server on it: New must refuse, naming the removal and how it was learnt.
func restartRemoved(t *testing.T, dir string, peers map[uint64]string, id uint64, how string) {
	t.Helper()
	st, err := storage.Open(storage.Options{Dir: filepath.Join(dir, fmt.Sprint(id)), NoSync: true, Logger: reviewQuiet(), AsyncSnapshotReads: true})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{ID: id, Peers: peers, ClientAddr: peers[id], Storage: st, Logger: reviewQuiet()})
	if err == nil {
		s.Stop()
		t.Fatalf("replica %d built a server on the data of a removed replica", id)
	}
	st.Close()
	if !errors.Is(err, ErrRemoved) || !errors.Is(err, replica.ErrRemoved) {
		t.Errorf("restart of removed replica %d: %v, want ErrRemoved", id, err)
	}
	for _, want := range []string{fmt.Sprintf("replica %d was removed from the cluster", id), how, "does not start again", "new id"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("restart of removed replica %d: %q does not say %q", id, err, want)
		}
	}
}

// waitRemoved waits until s stops because it was removed, and checks what
// it says and logs.
func waitRemoved(ctx context.Context, t *testing.T, s *Server, log *syncBuffer, how string) {
	t.Helper()
	select {
	case <-s.Done():
	case <-ctx.Done():
		t.Fatal("the removed replica keeps running")
	}
	if err := s.Err(); !errors.Is(err, ErrRemoved) || !strings.Contains(err.Error(), how) {
		t.Errorf("removed replica stopped with %v, want ErrRemoved saying %q", err, how)
	}
	if lg := log.String(); !strings.Contains(lg, "removed from the cluster: this replica stopped and does not start again") || !strings.Contains(lg, how) {
		t.Errorf("removed replica's log does not say it was removed and stopped (%q):\n%s", how, lg)
	}
}

// A replica removed while it runs applies its removal, stops with a clear
// log line and error, and does not start again on its data directory.
func TestRemovedReplicaStopsAndDoesNotRestart(t *testing.T) {
	var log3 syncBuffer
	pc := startPebbleCluster(t, 3, func(id uint64, c *Config) {
		if id == 3 {
			c.Logger = slog.New(slog.NewTextHandler(&log3, nil))
		}
	})
	dir, peers, servers := pc.dir, pc.peers, pc.servers
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	strongPutUntilFinal(ctx, t, dial(t, peers[1]), time.Second)
	if _, err := dialCluster(t, peers[1]).MemberRemove(ctx, &api.MemberRemoveRequest{Id: 3}); err != nil {
		t.Fatal(err)
	}
	// It learns its removal from its log, or, if the leader stopped
	// sending to it before it learnt the change committed, from a member
	// that refuses its messages.
	select {
	case <-servers[3].Done():
	case <-ctx.Done():
		t.Fatal("the removed replica keeps running")
	}
	how := "it applied the configuration change that removed it"
	if err := servers[3].Err(); err != nil && strings.Contains(err.Error(), "refused its messages") {
		how = "refused its messages"
	}
	waitRemoved(ctx, t, servers[3], &log3, how)
	pc.stop(3)
	restartRemoved(t, dir, peers, 3, how)
	// Twice: the refusal is recorded, not a side effect of the first one.
	restartRemoved(t, dir, peers, 3, how)
	// The others go on.
	strongPutUntilFinal(ctx, t, dial(t, peers[2]), time.Second)
}

// A replica removed while it was down learns it from the first member that
// refuses its messages: it stops, and from then on does not start again,
// although its log does not hold its removal.
func TestReplicaRemovedWhileDownStopsAndDoesNotRestart(t *testing.T) {
	pc := startPebbleCluster(t, 3, nil)
	dir, peers := pc.dir, pc.peers
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	strongPutUntilFinal(ctx, t, dial(t, peers[1]), time.Second)
	pc.stop(3)
	// It cannot drain: the removal goes ahead after the drain's bound and
	// says so.
	l, err := dialCluster(t, peers[1]).MemberRemove(ctx, &api.MemberRemoveRequest{Id: 3, DrainTimeoutMs: 2000})
	if err != nil {
		t.Fatal(err)
	}
	if want := "replica 3 did not confirm its drain within 2s; weak writes it acknowledged and had not gossiped may be lost"; l.GetWarning() != want {
		t.Errorf("member remove of a replica that is down: warning %q, want %q", l.GetWarning(), want)
	}

	// Its log does not hold the removal: it starts, then a member refuses it.
	var log3 syncBuffer
	s3 := startOnPebble(t, dir, peers, 3, true, func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&log3, nil)) })
	defer s3.Stop()
	how := "refused its messages: the cluster's configuration lists it as removed"
	waitRemoved(ctx, t, s3, &log3, how)
	s3.Stop()
	restartRemoved(t, dir, peers, 3, how)
	strongPutUntilFinal(ctx, t, dial(t, peers[2]), time.Second)
}
