package loopback

import (
	"net"
	"strconv"
	"testing"
)

func TestIs(t *testing.T) {
	for ep, want := range map[string]bool{
		"127.0.0.1:7101": true, "[::1]:7101": true, "localhost:7101": true, "unix:/tmp/s": true,
		"10.0.0.1:7101": false, "example.com:7101": false, "127.0.0.1": false, "": false,
	} {
		if got := Is(ep); got != want {
			t.Errorf("Is(%q) = %v, want %v", ep, got, want)
		}
	}
}

func TestFreePortsAreDistinctBindableAndBelowTheEphemeralRange(t *testing.T) {
	ports, err := FreePorts(20)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Errorf("port %d twice", p)
		}
		seen[p] = true
		if p < 10000 || p >= ephemeralLow() {
			t.Errorf("port %d outside [10000, %d)", p, ephemeralLow())
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Errorf("port %d: %v", p, err)
			continue
		}
		l.Close()
	}
}
