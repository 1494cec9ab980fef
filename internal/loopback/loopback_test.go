package loopback

import "testing"

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
