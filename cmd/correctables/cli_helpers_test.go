package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/internal/cluster"
)

// cli runs the root command with args and stdin, and returns what it wrote
// to stdout and its error.
func cli(t *testing.T, stdin io.Reader, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := executeWithin(t, 2*time.Minute, newRootCmd(), stdin, &out, &errOut, args...)
	return out.String(), err
}

// output runs cmd with args and returns what it wrote (stdout and stderr
// together) and its error.
func output(cmd *cobra.Command, args ...string) (string, error) {
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

// executeWithin runs cmd with args, stdin (if not nil), stdout to out and
// stderr to errOut, and returns its error; it fails the test if cmd does
// not return within d (a command that should have failed but started
// serving instead waits for a signal).
func executeWithin(t testing.TB, d time.Duration, cmd *cobra.Command, stdin io.Reader, out *bytes.Buffer, errOut io.Writer, args ...string) error {
	t.Helper()
	cmd.SetOut(out)
	cmd.SetErr(errOut)
	if stdin != nil {
		cmd.SetIn(stdin)
	}
	cmd.SetArgs(args)
	done := make(chan error, 1)
	go func() { done <- cmd.Execute() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("correctables %s did not return within %v (output: %s)", strings.Join(args, " "), d, out.String())
		return nil
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
