package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/correctable"
)

// abbreviated matches "prelim" as a word of its own or a column prefix
// (prelim p50, prelim_p50_ms, final/prelim), not "preliminary".
var abbreviated = regexp.MustCompile(`(?i)prelim($|[^i])`)

// Every command's help calls the views preliminary and final, spelt out.
func TestHelpSpellsOutViews(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		var b bytes.Buffer
		c.SetOut(&b)
		c.SetErr(&b)
		if err := c.Help(); err != nil {
			t.Fatalf("%s --help: %v", c.CommandPath(), err)
		}
		if m := abbreviated.FindString(b.String()); m != "" {
			t.Errorf("%s --help says %q:\n%s", c.CommandPath(), m, b.String())
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(newRootCmd())
}

// A view is labelled by its level in every output: the weak view is the
// preliminary one, the strong view the final one, whether an invocation asked
// for both or one, with or without a session.
func TestViewLabelsWithSession(t *testing.T) {
	_, eps := startCluster(t, t.TempDir(), 1)
	session := filepath.Join(t.TempDir(), "s.json")
	run := func(args ...string) string {
		t.Helper()
		out, err := cli(t, nil, append(args, "--endpoints", eps, "--session", session)...)
		if err != nil {
			t.Fatalf("correctables %s: %v", strings.Join(args, " "), err)
		}
		return out
	}
	run("invoke", "--strong", "put", "k", "v")
	for flag, want := range map[string]string{"--weak": "preliminary", "--strong": "final"} {
		out := run("invoke", flag, "get", "k")
		if !strings.HasPrefix(out, want+" ") || strings.Count(out, "\n") != 1 {
			t.Errorf("invoke --session %s get: %q, want one line labelled %s", flag, out, want)
		}
		out = run("invoke", flag, "--json", "get", "k")
		var v struct{ View string }
		if err := json.Unmarshal([]byte(out), &v); err != nil || v.View != want {
			t.Errorf("invoke --session %s --json get: %q (%v), want view %q", flag, out, err, want)
		}
	}
	out := run("invoke", "get", "k")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 ||
		!strings.HasPrefix(lines[0], "preliminary ") || !strings.HasPrefix(lines[1], "final ") {
		t.Errorf("invoke --session get: %q, want a preliminary then a final line", out)
	}
}

// printViews prints every view of an invocation, even when both arrived
// before it started: the preliminary view and the final one's confirmation
// can come in one read from the stream, and starting at the latest view
// would print the final line alone (seen once in CI on 'invoke get').
func TestPrintViewsPrintsViewsThatArrivedFirst(t *testing.T) {
	c, r := correctable.New[client.Result]()
	if err := r.Update(correctable.View[client.Result]{Level: correctable.Eventual, Value: client.Result{Value: []byte("v"), Found: true}}); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(correctable.View[client.Result]{Level: correctable.Strong, Confirmed: true}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := printViews(&out, client.Get("k"), c, outputFormat{}, time.Second); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "preliminary ") || !strings.HasPrefix(lines[1], "final ") {
		t.Fatalf("printViews: %q, want a preliminary then a final line", out.String())
	}
}
