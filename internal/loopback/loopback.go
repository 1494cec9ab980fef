// Package loopback decides whether an endpoint is on this machine, as the
// client and the command line need for plaintext.
package loopback

import (
	"net"
	"strings"
)

// Is reports whether a host:port endpoint (or a unix socket,
// "unix:...") is on this machine: the only endpoints plaintext is allowed
// to without an explicit opt-in.
func Is(ep string) bool {
	if strings.HasPrefix(ep, "unix:") {
		return true
	}
	host, _, err := net.SplitHostPort(ep)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
