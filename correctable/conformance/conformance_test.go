package conformance_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/correctables/correctables/correctable"
	"github.com/correctables/correctables/correctable/conformance"
	"github.com/correctables/correctables/correctable/correctabletest"
)

func reference(t *testing.T, cfg correctabletest.Config, parallel bool) conformance.Harness[correctabletest.Op[string], string] {
	t.Helper()
	c, err := correctabletest.NewCluster(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b := correctabletest.Sequential[string](c)
	if parallel {
		b = correctabletest.Parallel[string](c)
	}
	return conformance.Harness[correctabletest.Op[string], string]{
		Binding: b,
		Put: func(key, value string) correctabletest.Op[string] {
			return func(kv correctabletest.KV) string { kv.Put(key, value); return value }
		},
		Get:     correctabletest.Get,
		Value:   func(s string) (string, bool) { return s, s != "" },
		MaySkip: parallel,
	}
}

func TestReferenceSequential(t *testing.T) {
	conformance.Run(t, reference(t, correctabletest.Config{WithCache: true}, false))
}

func TestReferenceParallel(t *testing.T) {
	conformance.Run(t, reference(t, correctabletest.Config{WithCache: true, BackupLatency: time.Millisecond, PrimaryLatency: 2 * time.Millisecond}, true))
}

// broken is a binding that breaks the contract in one way, chosen by name.
type broken struct{ how string }

func (b broken) Levels() []correctable.Level {
	return []correctable.Level{correctable.Eventual, correctable.Causal, correctable.Strong}
}

func (b broken) Submit(ctx context.Context, op correctabletest.Op[string], levels []correctable.Level, emit correctable.Emitter[string]) error {
	switch b.how {
	case "no-final":
		return nil
	case "weaker":
		_ = emit(correctable.View[string]{Value: "v", Level: correctable.Causal})
		_ = emit(correctable.View[string]{Value: "v", Level: correctable.Eventual})
		return emit(correctable.View[string]{Value: "v", Level: levels[len(levels)-1]})
	case "hang":
		<-make(chan struct{}) // ignores ctx: never returns
	}
	return nil
}

// TestBrokenBindingsFail runs the suite on bindings that break the contract
// (in a child process, since each must fail) and checks that it reports
// each break.
func TestBrokenBindingsFail(t *testing.T) {
	if how := os.Getenv("CONFORMANCE_BROKEN"); how != "" {
		conformance.Run(t, conformance.Harness[correctabletest.Op[string], string]{
			Binding: broken{how},
			Put:     func(k, v string) correctabletest.Op[string] { return correctabletest.Get(k) },
			Get:     correctabletest.Get,
			Value:   func(s string) (string, bool) { return s, s != "" },
			Timeout: time.Second,
		})
		return
	}
	for how, want := range map[string]string{
		"no-final": "Submit returned nil without the final view",
		"weaker":   "view at eventual after one at causal",
		"hang":     "Submit did not return",
	} {
		t.Run(how, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run", "^TestBrokenBindingsFail$", "-test.v")
			cmd.Env = append(os.Environ(), "CONFORMANCE_BROKEN="+how)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed a binding that breaks the contract (%s):\n%s", how, out)
			}
			if !strings.Contains(string(out), want) {
				t.Fatalf("the suite's report on %s lacks %q:\n%s", how, want, out)
			}
		})
	}
}
