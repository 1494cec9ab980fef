package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/status"

	"github.com/correctables/correctables/client"
)

// Errors print on one line, saying where they came from (client or server,
// and which replica) with the cause once. Keys and values in them are cut
// to maxQuoted bytes: a 4 KiB key is not repeated back.
const maxQuoted = 48

// quoted matches a Go-quoted string.
var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// shorten cuts every quoted string in s longer than maxQuoted and puts the
// text on one line.
func shorten(s string) string {
	s = quoted.ReplaceAllStringFunc(s, func(q string) string {
		if len(q) <= maxQuoted+2 {
			return q
		}
		n := len(q) - 2
		if u, err := strconv.Unquote(q); err == nil {
			n = len(u)
		}
		return q[:maxQuoted+1] + fmt.Sprintf(`..." (%d bytes)`, n)
	})
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}

// quote quotes a key or value for a message, cut to maxQuoted bytes.
func quote(s string) string { return shorten(fmt.Sprintf("%q", s)) }

// serverPrefixes are the package labels a server's message stacks; the
// cause reads without them.
var serverPrefixes = strings.NewReplacer("server: ", "", "replica: ", "", "state: ", "", "invalid operation: ", "")

// serverCause is a server's message without its package labels.
func serverCause(msg string) string { return shorten(serverPrefixes.Replace(msg)) }

// rpcCause is the cause of a failed RPC: the server's message for a gRPC
// status (without its package prefix), else the error.
func rpcCause(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return "no answer in time (--command-timeout)"
	}
	if st, ok := status.FromError(err); ok {
		return fmt.Sprintf("%s (%s)", serverCause(st.Message()), st.Code())
	}
	return shorten(err.Error())
}

// endpointCause matches a line of a client error that names an endpoint,
// and its innermost cause.
var endpointCause = regexp.MustCompile(`([A-Za-z0-9_.\[\]:-]+:[0-9]+): .*: ([^:]+?)"?\)?$`)

// unreachable lists, from a client error, each endpoint tried and its
// innermost cause: "127.0.0.1:1: connection refused; ...".
func unreachable(msg string) string {
	var parts []string
	seen := map[string]bool{}
	for _, line := range strings.Split(msg, "\n") {
		m := endpointCause.FindStringSubmatch(line)
		if m == nil || seen[m[1]] {
			continue
		}
		seen[m[1]] = true
		parts = append(parts, m[1]+": "+strings.TrimSpace(m[2]))
	}
	if len(parts) == 0 {
		return shorten(strings.ReplaceAll(msg, "client: ", ""))
	}
	return shorten(strings.Join(parts, "; "))
}

// dialError is the one line for a client that could not connect within
// timeout, the bound that flag set.
func dialError(eps []string, timeout time.Duration, flag string, err error) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("client: no replica of %s answered within %v (%s)", strings.Join(eps, ","), timeout, flag)
	case errors.Is(err, client.ErrInvalidArgument):
		msg := err.Error()
		if i := strings.LastIndex(msg, "invalid argument: "); i >= 0 {
			msg = msg[i+len("invalid argument: "):]
		}
		msg = strings.ReplaceAll(msg, "(use WithTransportCredentials, or WithInsecure)", "(give TLS flags, or --insecure on a trusted network)")
		return fmt.Errorf("client: %s", shorten(msg))
	}
	return fmt.Errorf("client: no replica reachable (is a cluster running there?): %s", unreachable(err.Error()))
}
