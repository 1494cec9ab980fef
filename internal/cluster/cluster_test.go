package cluster

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestStartMoveLeaderRestart(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := Start(Options{Dir: dir, NoSync: true, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Endpoints) != 3 {
		t.Fatalf("endpoints: %v", c.Endpoints)
	}
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.MoveLeader(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if l, _ := c.WaitLeader(ctx); l != 3 {
		t.Fatalf("leader %d after moving it to 3", l)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	// The same directory starts again.
	c, err = Start(Options{Dir: dir, NoSync: true, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestWAN(t *testing.T) {
	c, err := Start(Options{Dir: t.TempDir(), NoSync: true, WAN: "ec2-2016", ClientRegion: "IRL", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	if got := strings.Join(c.Regions, ","); got != "FRK,IRL,VRG" {
		t.Fatalf("regions %s", got)
	}
	if c.RTT(0, 2) != 2*time.Millisecond || c.RTT(2, 1) != 20*time.Millisecond || c.RTT(2, 3) != 83*time.Millisecond {
		t.Fatalf("RTTs: client-IRL %v, IRL-FRK %v, IRL-VRG %v", c.RTT(0, 2), c.RTT(2, 1), c.RTT(2, 3))
	}
	// Clients reach the replicas through the proxies, not directly.
	for i, ep := range c.Endpoints {
		if ep == c.Servers[i].ClientAddr() {
			t.Fatalf("endpoint %d is the replica's own address: no emulated latency", i+1)
		}
	}
}

func TestBadOptions(t *testing.T) {
	for _, o := range []Options{
		{},
		{Dir: t.TempDir(), Replicas: 12},
		{Dir: t.TempDir(), WAN: "nowhere"},
		{Dir: t.TempDir(), WAN: "ec2-2016", ClientRegion: "Mars"},
	} {
		o.Logger = quiet()
		if c, err := Start(o); err == nil {
			c.Stop()
			t.Errorf("options %+v accepted", o)
		}
	}
}
