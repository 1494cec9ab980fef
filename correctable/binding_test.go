package correctable_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/correctables/correctables/correctable"
)

// funcBinding is a Binding made of functions, to misbehave on purpose.
type funcBinding struct {
	levels []correctable.Level
	submit func(ctx context.Context, op int, levels []correctable.Level, emit correctable.Emitter[int]) error
}

func (b funcBinding) Levels() []correctable.Level { return b.levels }
func (b funcBinding) Submit(ctx context.Context, op int, levels []correctable.Level, emit correctable.Emitter[int]) error {
	return b.submit(ctx, op, levels, emit)
}

var twoLevels = []correctable.Level{correctable.Eventual, correctable.Strong}

// echo emits op at every requested level.
func echo(_ context.Context, op int, levels []correctable.Level, emit correctable.Emitter[int]) error {
	for _, l := range levels {
		if err := emit(correctable.View[int]{Value: op, Level: l}); err != nil {
			return err
		}
	}
	return nil
}

func TestInvokeLevels(t *testing.T) {
	ctx := context.Background()
	b := funcBinding{levels: twoLevels, submit: echo}
	for name, tc := range map[string]struct {
		b      funcBinding
		levels []correctable.Level
	}{
		"unknown level":        {b, []correctable.Level{correctable.Causal}},
		"out of order":         {b, []correctable.Level{correctable.Strong, correctable.Eventual}},
		"duplicate":            {b, []correctable.Level{correctable.Strong, correctable.Strong}},
		"binding with none":    {funcBinding{submit: echo}, nil},
		"binding misordered":   {funcBinding{levels: []correctable.Level{correctable.Strong, correctable.Eventual}, submit: echo}, nil},
		"same name other rank": {b, []correctable.Level{correctable.NewLevel("strong", 1)}},
	} {
		t.Run(name, func(t *testing.T) {
			c := correctable.Invoke(ctx, tc.b, 1, tc.levels...)
			if _, err := finalOf(t, c); !errors.Is(err, correctable.ErrInvalidLevels) {
				t.Fatalf("got %v, want ErrInvalidLevels", err)
			}
		})
	}
	var got [][]correctable.Level
	var mu sync.Mutex
	spy := funcBinding{levels: twoLevels, submit: func(ctx context.Context, op int, levels []correctable.Level, emit correctable.Emitter[int]) error {
		mu.Lock()
		got = append(got, levels)
		mu.Unlock()
		return echo(ctx, op, levels, emit)
	}}
	for _, invoke := range []func() *correctable.Correctable[int]{
		func() *correctable.Correctable[int] { return correctable.Invoke(ctx, spy, 1) },
		func() *correctable.Correctable[int] { return correctable.InvokeWeak(ctx, spy, 1) },
		func() *correctable.Correctable[int] { return correctable.InvokeStrong(ctx, spy, 1) },
	} {
		v, err := finalOf(t, invoke())
		if err != nil || !v.Final || v.Value != 1 {
			t.Fatalf("Invoke = %+v, %v", v, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	want := [][]correctable.Level{twoLevels, {correctable.Eventual}, {correctable.Strong}}
	for i := range want {
		if len(got[i]) != len(want[i]) || got[i][0] != want[i][0] {
			t.Errorf("call %d requested %v, want %v", i, got[i], want[i])
		}
	}
}

func TestInvokeEnforcesContract(t *testing.T) {
	ctx := context.Background()
	three := []correctable.Level{cacheLevel, correctable.Eventual, correctable.Strong}
	errs := make(chan []error, 1)
	misbehave := funcBinding{levels: three, submit: func(ctx context.Context, op int, levels []correctable.Level, emit correctable.Emitter[int]) error {
		e := []error{
			emit(correctable.View[int]{Value: 1, Level: correctable.Eventual, Final: true}), // Final is ignored
			emit(correctable.View[int]{Value: 0, Level: cacheLevel}),                        // weaker: dropped
			emit(correctable.View[int]{Value: 9, Level: correctable.Causal}),                // unrequested
			emit(correctable.View[int]{Value: 2, Level: correctable.Strong}),                // final
			emit(correctable.View[int]{Value: 3, Level: correctable.Strong}),                // after close
		}
		<-ctx.Done() // Invoke cancels Submit's context at close
		errs <- e
		return nil
	}}
	c := correctable.Invoke(ctx, misbehave, 0)
	var got []int
	for v := range c.Views() {
		got = append(got, v.Value)
	}
	e := <-errs
	want := []error{nil, correctable.ErrWeakerLevel, correctable.ErrUnrequestedLevel, nil, correctable.ErrClosed}
	for i := range want {
		if want[i] == nil && e[i] != nil || want[i] != nil && !errors.Is(e[i], want[i]) {
			t.Errorf("emit %d returned %v, want %v", i, e[i], want[i])
		}
	}
	if v, _ := c.Latest(); len(got) == 0 || v.Value != 2 || !v.Final {
		t.Fatalf("views %v, final %+v", got, v)
	}

	incomplete := funcBinding{levels: twoLevels, submit: func(_ context.Context, op int, _ []correctable.Level, emit correctable.Emitter[int]) error {
		return emit(correctable.View[int]{Value: op, Level: correctable.Eventual})
	}}
	if _, err := finalOf(t, correctable.Invoke(ctx, incomplete, 1)); !errors.Is(err, correctable.ErrIncomplete) {
		t.Errorf("no final view: %v", err)
	}
	boom := errors.New("boom")
	failing := funcBinding{levels: twoLevels, submit: func(context.Context, int, []correctable.Level, correctable.Emitter[int]) error {
		return boom
	}}
	if _, err := finalOf(t, correctable.Invoke(ctx, failing, 1)); !errors.Is(err, boom) {
		t.Errorf("failing binding: %v", err)
	}
}

func TestInvokeContext(t *testing.T) {
	submitted := make(chan struct{})
	returned := make(chan struct{})
	blocking := funcBinding{levels: twoLevels, submit: func(ctx context.Context, op int, _ []correctable.Level, emit correctable.Emitter[int]) error {
		defer close(returned)
		_ = emit(correctable.View[int]{Value: op, Level: correctable.Eventual})
		close(submitted)
		<-ctx.Done()
		return ctx.Err()
	}}
	ctx, cancel := context.WithCancel(context.Background())
	c := correctable.Invoke(ctx, blocking, 1)
	wait(t, submitted, "submit")
	cancel()
	if _, err := finalOf(t, c); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled invoke: %v", err)
	}
	wait(t, returned, "Submit to return")
	if v, ok := c.Latest(); !ok || v.Value != 1 || v.Final {
		t.Fatalf("latest %+v", v)
	}
}

// startBinding is a funcBinding that is also a Starter.
type startBinding struct {
	funcBinding
	start func(ctx context.Context, op int, levels []correctable.Level, emit correctable.Emitter[int], done func(error)) bool
}

func (b startBinding) Start(ctx context.Context, op int, levels []correctable.Level, emit correctable.Emitter[int], done func(error)) bool {
	return b.start(ctx, op, levels, emit, done)
}

// TestInvokeStarter: a binding that starts an invocation by itself
// (Starter) gets no Submit for it; its views and its done's error reach the
// Correctable as Submit's would (done(nil) without the final view fails it
// with ErrIncomplete, done(err) with err); one that declines (false) gets
// Submit; and the context it was given ends once the Correctable closes.
func TestInvokeStarter(t *testing.T) {
	ctx := context.Background()
	var submits int
	var mu sync.Mutex
	var started context.Context
	b := startBinding{
		funcBinding: funcBinding{levels: twoLevels, submit: func(ctx context.Context, op int, levels []correctable.Level, emit correctable.Emitter[int]) error {
			mu.Lock()
			submits++
			mu.Unlock()
			return echo(ctx, op, levels, emit)
		}},
		start: func(ctx context.Context, op int, levels []correctable.Level, emit correctable.Emitter[int], done func(error)) bool {
			switch op {
			case 1: // declines
				return false
			case 2: // both views, later, from another goroutine
				mu.Lock()
				started = ctx
				mu.Unlock()
				go func() { done(echo(ctx, op, levels, emit)) }()
			case 3: // ends without the final view
				done(nil)
			case 4: // fails
				done(errors.New("starter broke"))
			}
			return true
		},
	}
	if v, err := correctable.Invoke(ctx, b, 1).Final(ctx); err != nil || v.Value != 1 || submits != 1 {
		t.Fatalf("declined: %v, %v, %d submits; want the view of Submit", v, err, submits)
	}
	c := correctable.Invoke(ctx, b, 2)
	v, err := c.Final(ctx)
	if err != nil || v.Value != 2 || !v.Final || submits != 1 {
		t.Fatalf("started: %v, %v, %d submits; want the final view, no Submit", v, err, submits)
	}
	mu.Lock()
	sctx := started
	mu.Unlock()
	<-sctx.Done() // the Correctable closed: its context ends
	if _, err := correctable.Invoke(ctx, b, 3).Final(ctx); !errors.Is(err, correctable.ErrIncomplete) {
		t.Fatalf("done(nil) without the final view: %v, want ErrIncomplete", err)
	}
	if _, err := correctable.Invoke(ctx, b, 4).Final(ctx); err == nil || !strings.Contains(err.Error(), "starter broke") {
		t.Fatalf("done(err): %v, want the starter's error", err)
	}
	if submits != 1 {
		t.Fatalf("%d submits, want only the declined invocation's", submits)
	}
}
