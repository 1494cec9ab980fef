package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/internal/cluster"
)

// cli runs the root command with args and stdin, and returns what it wrote
// to stdout and its error.
func cli(t *testing.T, stdin io.Reader, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCmd()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	if stdin != nil {
		cmd.SetIn(stdin)
	}
	cmd.SetArgs(args)
	done := make(chan error, 1)
	go func() { done <- cmd.Execute() }()
	select {
	case err := <-done:
		return out.String(), err
	case <-time.After(2 * time.Minute):
		t.Fatalf("correctables %s did not return (output: %s)", strings.Join(args, " "), out.String())
		return "", nil
	}
}

// startCluster starts an in-process cluster of n replicas on free loopback
// ports, waits for its leader and returns it with its endpoints as the
// --endpoints value.
func startCluster(t *testing.T, dir string, n int) (*cluster.Cluster, string) {
	t.Helper()
	c, err := cluster.Start(cluster.Options{Dir: dir, Replicas: n, NoSync: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	return c, strings.Join(c.Endpoints, ",")
}

func dialCluster(t *testing.T, eps string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, strings.Split(eps, ","))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
