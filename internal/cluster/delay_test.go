package cluster

import (
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestReplicationDelayOptions(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	if _, err := Start(Options{Dir: t.TempDir(), NoSync: true, Logger: log, ReplicationDelay: map[uint64]time.Duration{4: time.Second}}); err == nil || !strings.Contains(err.Error(), "replica 4 of 3") {
		t.Fatalf("a delay for a replica that does not exist: %v", err)
	}
	if _, err := Start(Options{Dir: t.TempDir(), NoSync: true, Logger: log, ReplicationDelay: map[uint64]time.Duration{2: time.Hour}}); err == nil || !strings.Contains(err.Error(), "replication delay 1h0m0s") {
		t.Fatalf("a delay over the emulated links' limit: %v", err)
	}
	if _, err := Start(Options{Dir: t.TempDir(), NoSync: true, Logger: log, WAN: "pileus-2013", Replicas: 5}); err == nil || !strings.Contains(err.Error(), "give a Placement") {
		t.Fatalf("five replicas on four regions without a placement: %v", err)
	}
	if _, err := Start(Options{Dir: t.TempDir(), NoSync: true, Logger: log, WAN: "pileus-2013", Replicas: 2, Placement: []string{"England", "Mars"}}); err == nil || !strings.Contains(err.Error(), `"Mars"`) {
		t.Fatalf("a placement outside the preset: %v", err)
	}
	c, err := Start(Options{Dir: t.TempDir(), NoSync: true, Logger: log, Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	if err := c.SetReplicationDelay(1, time.Second); err == nil {
		t.Fatal("SetReplicationDelay on a replica started without delayed links")
	}
}
