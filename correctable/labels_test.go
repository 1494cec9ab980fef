package correctable_test

import (
	"bytes"
	"context"
	"runtime/pprof"
	"strings"
	"testing"

	"github.com/correctables/correctables/correctable"
)

var labelsRelease chan struct{}

// submitBlockingForLabels waits for labelsRelease, then echoes: while it
// waits, a goroutine profile shows the labels of the goroutine running it.
func submitBlockingForLabels(ctx context.Context, op int, levels []correctable.Level, emit correctable.Emitter[int]) error {
	select {
	case <-labelsRelease:
	case <-ctx.Done():
		return ctx.Err()
	}
	return echo(ctx, op, levels, emit)
}

// The goroutine that runs a Submit carries the profiler labels of its
// invocation's context, also when it is a goroutine an earlier invocation,
// under other labels, started and left waiting for work (a CPU profile
// labelled per phase, as bench load's, would otherwise charge one phase's
// client work to the one before).
func TestSubmitCarriesTheInvocationsLabels(t *testing.T) {
	labelsRelease = make(chan struct{})
	ctx := context.Background()
	quick := funcBinding{levels: twoLevels, submit: echo}
	blocking := funcBinding{levels: twoLevels, submit: submitBlockingForLabels}
	pprof.Do(ctx, pprof.Labels("phase", "first"), func(ctx context.Context) {
		if _, err := correctable.Invoke(ctx, quick, 1).Final(ctx); err != nil {
			t.Fatal(err)
		}
	})
	// Right after (within the idle period, the first goroutine is reused).
	var c *correctable.Correctable[int]
	pprof.Do(ctx, pprof.Labels("phase", "second"), func(ctx context.Context) {
		c = correctable.Invoke(ctx, blocking, 2)
	})
	var dump string
	for range 1000 {
		var b bytes.Buffer
		if err := pprof.Lookup("goroutine").WriteTo(&b, 1); err != nil {
			t.Fatal(err)
		}
		if dump = b.String(); strings.Contains(dump, "submitBlockingForLabels") {
			break
		}
	}
	close(labelsRelease)
	if _, err := c.Final(ctx); err != nil {
		t.Fatal(err)
	}
	// debug=1 groups goroutines by stack and labels: find the group in
	// submitBlockingForLabels.
	var group string
	for _, g := range strings.Split(dump, "\n\n") {
		if strings.Contains(g, "submitBlockingForLabels") {
			group = g
		}
	}
	if group == "" {
		t.Fatal("no goroutine running submitBlockingForLabels in the profile")
	}
	if !strings.Contains(group, `"phase":"second"`) {
		t.Errorf("the goroutine running the second invocation's Submit has other labels:\n%s", group)
	}
}
