package cluster

import (
	"strings"
	"testing"
	"time"
)

// TestJitterReachesLinks: Options.Jitter is set on every link between two
// distinct regions, from every source region, and on no link within a
// region; without it every link has fixed delays.
func TestJitterReachesLinks(t *testing.T) {
	placement := []string{"England", "England", "US-West"}
	for _, jitter := range []time.Duration{0, 7 * time.Millisecond} {
		c, err := Start(Options{Dir: t.TempDir(), NoSync: true, Logger: quiet(), WAN: "pileus-2013",
			Replicas: len(placement), Placement: placement, Jitter: jitter})
		if err != nil {
			t.Fatal(err)
		}
		links := 0
		for _, from := range c.Net.Topology().Regions() {
			for i, region := range placement {
				p, err := c.Net.Proxy(from, name(i))
				if err != nil {
					t.Fatal(err)
				}
				want := jitter
				if from == region {
					want = 0
				}
				if got := p.Jitter(); got != want {
					t.Errorf("jitter %v: link %s -> %s (in %s) has jitter %v, want %v", jitter, from, name(i), region, got, want)
				}
				links++
			}
		}
		if links != 4*len(placement) {
			t.Errorf("checked %d links, want %d", links, 4*len(placement))
		}
		if err := c.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range []Options{
		{Dir: t.TempDir(), NoSync: true, Logger: quiet(), Jitter: time.Millisecond},
		{Dir: t.TempDir(), NoSync: true, Logger: quiet(), WAN: "ec2-2016", Jitter: -time.Millisecond},
	} {
		if c, err := Start(o); err == nil || !strings.Contains(err.Error(), "jitter") {
			if c != nil {
				c.Stop()
			}
			t.Errorf("Start with jitter %v and WAN %q: %v, want an error", o.Jitter, o.WAN, err)
		}
	}
}
