package main

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/correctables/correctables/internal/server"
)

// TestMemberCLI lists, adds (a learner), replaces (joint consensus),
// removes, and refuses bad changes with one clear line each, on an
// in-process cluster.
func TestMemberCLI(t *testing.T) {
	c, eps := startCluster(t, t.TempDir(), 3)
	out, err := cli(t, nil, "member", "list", "--endpoints", eps)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ID  ROLE", "1   voter", "2   voter", "3   voter", "(leader)"} {
		if !strings.Contains(out, want) {
			t.Errorf("member list output lacks %q:\n%s", want, out)
		}
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	out, err = cli(t, nil, "member", "add", "--endpoints", eps, "--peer-addr", addr, "--learner")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"added replica 4 (learner) at " + addr, "4   learner", "serve --join --id 4"} {
		if !strings.Contains(out, want) {
			t.Errorf("member add output lacks %q:\n%s", want, out)
		}
	}

	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"member", "remove", "9"}, "replica 9 is not a member"},
		{[]string{"member", "promote", "2"}, "replica 2 is not a learner"},
		{[]string{"member", "add", "--id", "2", "--peer-addr", addr}, "replica 2 is already a member"},
		{[]string{"member", "add"}, "--peer-addr HOST:PORT is required"},
		{[]string{"member", "remove", "x"}, `replica id "x" is not a positive integer`},
	} {
		out, err := cli(t, nil, append(bad.args, "--endpoints", eps)...)
		if err == nil || !strings.Contains(err.Error(), bad.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("correctables %s: %v (output %q), want one line with %q", strings.Join(bad.args, " "), err, out, bad.want)
		}
	}

	// Replace 3 by 5 in one joint-consensus change (5 is not started: the
	// old configuration {1,2,3} and the new {1,2,5} both have a quorum
	// without it); 3 stops.
	out, err = cli(t, nil, "member", "replace", "3", "--peer-addr", "127.0.0.1:1", "--endpoints", eps)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"replaced replica 3 by replica 5 (voter)", "5   voter", "removed (never reused): 3"} {
		if !strings.Contains(out, want) {
			t.Errorf("member replace output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "joint configuration") {
		t.Errorf("member replace returned while joint:\n%s", out)
	}
	s3 := c.Servers[2]
	select {
	case <-s3.Done():
		if !errors.Is(s3.Err(), server.ErrRemoved) {
			t.Errorf("replica 3 stopped with %v, want server.ErrRemoved", s3.Err())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("replica 3 still runs after its removal")
	}

	if strings.Contains(out, "warning:") {
		t.Errorf("member replace of a running replica warns:\n%s", out)
	}

	// Remove 5 (never started) and the learner 4: neither can drain; the
	// removal goes ahead after --drain-timeout and says so.
	for _, id := range []string{"5", "4"} {
		out, err = cli(t, nil, "member", "remove", id, "--drain-timeout", "1s", "--endpoints", eps)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "removed replica "+id) {
			t.Errorf("member remove output:\n%s", out)
		}
		if want := "warning: replica " + id + " did not confirm its drain within 1s; weak writes it acknowledged and had not gossiped may be lost"; !strings.Contains(out, want) {
			t.Errorf("member remove output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(out, "removed (never reused): 3, 4, 5") {
		t.Errorf("member remove output:\n%s", out)
	}
	_, err = cli(t, nil, "member", "add", "--id", "3", "--peer-addr", addr, "--endpoints", eps)
	if err == nil || !strings.Contains(err.Error(), "a removed id is never reused") {
		t.Errorf("re-adding 3: %v", err)
	}
}
