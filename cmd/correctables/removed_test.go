package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/correctables/correctables/internal/server"
)

// A replica removed with `member remove` stops; `serve` on its data
// directory then fails at once with one line that names the removal and
// says what to do instead.
func TestServeRemovedReplicaRefuses(t *testing.T) {
	dir := t.TempDir()
	c, eps := startCluster(t, dir, 3)
	if _, err := cli(t, nil, "put", "k", "v", "--endpoints", eps); err != nil {
		t.Fatal(err)
	}
	if out, err := cli(t, nil, "member", "remove", "3", "--endpoints", eps); err != nil || !strings.Contains(out, "removed replica 3") {
		t.Fatalf("member remove 3: %v\n%s", err, out)
	}
	s3 := c.Servers[2]
	select {
	case <-s3.Done():
		if !errors.Is(s3.Err(), server.ErrRemoved) {
			t.Fatalf("replica 3 stopped with %v, want server.ErrRemoved", s3.Err())
		}
	case <-time.After(time.Minute):
		t.Fatal("replica 3 still runs after its removal")
	}
	s3.Stop() // releases its data directory

	data := filepath.Join(dir, "r3")
	eplist := strings.Split(eps, ",")
	peers := fmt.Sprintf("1=%s,2=%s,3=%s", eplist[0], eplist[1], eplist[2])
	for range 2 {
		out, err := cli(t, nil, "serve", "--id", "3", "--data", data, "--peers", peers)
		if err == nil {
			t.Fatalf("serve on removed replica 3's data directory started:\n%s", out)
		}
		msg := err.Error()
		for _, want := range []string{"replica 3 was removed from the cluster", "does not start again", data, "new id"} {
			if !strings.Contains(msg, want) {
				t.Errorf("serve on a removed replica's data: %q does not say %q", msg, want)
			}
		}
		if strings.Contains(msg, "\n") || strings.Contains(out, "serving") {
			t.Errorf("serve on a removed replica's data: error %q, output %q: want one line and no serving", msg, out)
		}
	}
	// The cluster goes on without it.
	if out, err := cli(t, nil, "get", "k", "--raw", "--endpoints", strings.Join(eplist[:2], ",")); err != nil || out != "v" {
		t.Errorf("get k after the removal: %q, %v", out, err)
	}
}
