package main

import (
	"net"
	"strings"
	"testing"
)

// A dial that gives up names the bound that ended it: the command's
// timeout when that was the sooner (it used to say --dial-timeout's 5s
// after a --command-timeout of 1 ms had ended it at once).
func TestDialErrorNamesTheBoundThatEndedIt(t *testing.T) {
	// A listener that accepts and never speaks gRPC: the dial waits.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	ep := ln.Addr().String()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--command-timeout", "200ms", "--dial-timeout", "1m"}, "within 200ms (--command-timeout)"},
		{[]string{"--command-timeout", "1m", "--dial-timeout", "200ms"}, "no answer within the dial timeout"},
	} {
		_, err := cli(t, nil, append([]string{"get", "k", "--endpoints", ep}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("get with %v against a silent endpoint: %v; want an error saying %q", tc.args, err, tc.want)
		}
	}
}
