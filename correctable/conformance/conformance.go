// Package conformance checks that a correctable.Binding keeps the binding
// contract of Correctables (OSDI'16) §5.1, the way testing/fstest checks a
// file system: a binding's tests call Run with a Harness that says how to
// read and write one key, and Run drives the binding through every
// combination of requested levels, concurrent invocations, cancellation,
// failures and an unreachable server, recording everything the binding
// emits.
//
// Run calls the binding's Submit directly, with an emitter that behaves like
// the one correctable.Invoke passes (it refuses views after the final one,
// cancels Submit's context once the final view is in, and returns
// correctable.ErrClosed once that context is done), so that a view Invoke
// would silently drop is reported here as a violation. It checks:
//
//   - Levels: declared weakest to strongest, without duplicates, the same
//     on every call.
//   - Views: for every non-empty ordered subset of the levels, at most one
//     view per requested level, each stronger than the one before, none at a
//     level that was not requested, no confirmation without a previous view,
//     and the view at the strongest requested level exactly once (the close);
//     every requested level unless Harness.MaySkip.
//   - Return: Submit returns nil once it emitted the final view, an error
//     otherwise, and nothing is emitted after it returned.
//   - Writes: a write's final view is visible to a later read at the
//     strongest level (and at the weakest level, once MaySkip is not set,
//     for the value read there is at most as new, never newer than the final
//     one: Run checks only the strong read).
//   - Concurrency: concurrent invocations on distinct keys each keep the
//     contract (run the tests with -race).
//   - Cancellation: a context cancelled before the call, or while the
//     operation runs (at its first view), ends Submit within Timeout, and the
//     Correctable returned by correctable.Invoke fails with the context's
//     error unless its final view was already in.
//   - Failures: each Harness.Failures operation fails with its error
//     (errors.Is), through Submit and through Invoke.
//   - Down: every operation on Harness.Down fails within Timeout with
//     Harness.DownErr rather than hang.
//   - Goroutines: no goroutine running the binding's package or the suite
//     outlives the invocations, and (unless Harness.ServersInProcess) no
//     goroutine at all that started after the warm-up (go.uber.org/goleak).
package conformance

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/correctables/correctables/correctable"
)

// Harness tells Run how to drive one binding.
type Harness[Op, T any] struct {
	// Binding is the binding under test. Required.
	Binding correctable.Binding[Op, T]
	// Put returns an operation that writes value at key; Get one that
	// reads key. Value returns the value a Get's result holds, and whether
	// the key was set. Required.
	Put   func(key, value string) Op
	Get   func(key string) Op
	Value func(T) (value string, found bool)
	// Prefix starts every key the suite uses; default "conformance/". Use
	// one a run of the suite owns: the suite writes there.
	Prefix string
	// MaySkip allows the binding to skip a weaker requested level (a
	// binding that queries its levels in parallel may emit a strong reply
	// before a weak one and then drop the weak one). Without it, every
	// requested level must have its view.
	MaySkip bool
	// Failures are operations the binding must fail, each with the error
	// it must match (errors.Is): how the binding maps its store's errors.
	Failures []Failure[Op]
	// Down, if set, is the same binding configured for a server that does
	// not run (a closed port). Every operation on it must fail with an
	// error matching DownErr within Timeout.
	Down    correctable.Binding[Op, T]
	DownErr error
	// Timeout bounds every invocation: one still running after it is
	// reported as a hang. Default 30s (generous: the suite runs on busy
	// machines; a binding that hangs hangs for ever).
	Timeout time.Duration
	// IgnoreGoroutines are goroutines the leak check ignores besides those
	// running when Run starts (for example a client's own background
	// goroutines started lazily).
	IgnoreGoroutines []goleak.Option
	// LongLived names functions (as in a stack trace, package path
	// included) of goroutines the binding's client keeps for its lifetime
	// and may start on any invocation, for example a stream per server
	// opened when an operation first goes there: both goroutine checks
	// skip goroutines running one of them.
	LongLived []string
	// ServersInProcess says that the store's servers run in the test's
	// process (an embedded etcd), whose goroutines come and go on their
	// own: the leak check then looks only for goroutines running the
	// binding's package or the suite, not for every new goroutine.
	ServersInProcess bool
}

// Failure is an operation the binding must fail with Err.
type Failure[Op any] struct {
	Name string
	Op   Op
	Err  error
}

func (h *Harness[Op, T]) validate() error {
	if h.Binding == nil || h.Put == nil || h.Get == nil || h.Value == nil {
		return errors.New("conformance: Harness needs Binding, Put, Get and Value")
	}
	if h.Down != nil && h.DownErr == nil {
		return errors.New("conformance: Harness.Down needs DownErr")
	}
	if h.Prefix == "" {
		h.Prefix = "conformance/"
	}
	if h.Timeout <= 0 {
		h.Timeout = 30 * time.Second
	}
	return nil
}

// Run runs the suite as subtests of t.
func Run[Op, T any](t *testing.T, h Harness[Op, T]) {
	t.Helper()
	if err := h.validate(); err != nil {
		t.Fatal(err)
	}
	s := &suite[Op, T]{h: h}
	// Warm up: a client may start goroutines (connections, keep-alives) on
	// first use; those belong to the client, not to an invocation (and so
	// do those of Harness.LongLived, which it may start later).
	for range 3 {
		s.submit(t, context.Background(), h.Get(h.Prefix+"warmup"), h.Binding.Levels())
	}
	leak := append([]goleak.Option{goleak.IgnoreCurrent()}, h.IgnoreGoroutines...)
	for _, f := range h.LongLived {
		leak = append(leak, goleak.IgnoreAnyFunction(f))
	}
	before := map[string]bool{}
	for _, g := range goroutines() {
		before[goroutineID(g)] = true
	}

	t.Run("Levels", s.testLevels)
	t.Run("Views", s.testViews)
	t.Run("WriteThenStrongRead", s.testWrites)
	t.Run("Concurrent", s.testConcurrent)
	t.Run("CancelBefore", s.testCancelBefore)
	t.Run("CancelDuring", s.testCancelDuring)
	t.Run("Failures", s.testFailures)
	t.Run("Down", s.testDown)
	t.Run("Goroutines", func(t *testing.T) {
		if err := lingering(h.Binding, before, h.LongLived); err != nil {
			t.Error(err)
		}
		if h.ServersInProcess {
			return
		}
		if err := goleak.Find(leak...); err != nil {
			t.Errorf("goroutines outlived the suite's invocations: %v", err)
		}
	})
}

// goroutines returns the stacks of every goroutine, this one first.
func goroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Split(string(buf[:n]), "\n\n")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// goroutineID returns the "goroutine N" that starts a stack.
func goroutineID(stack string) string {
	id, _, _ := strings.Cut(stack, " [")
	return id
}

// lingering waits up to 10s for every goroutine started since before and
// running code of the binding's package, or of this suite, to end, and
// describes those left.
func lingering(b any, before map[string]bool, longLived []string) error {
	t := reflect.TypeOf(b)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	pkgs := []string{reflect.TypeOf(suite[int, int]{}).PkgPath() + ".", t.PkgPath() + "."}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var left []string
		for i, g := range goroutines() {
			if i == 0 || before[goroutineID(g)] || strings.Contains(g, "testing.(*T).Run(") {
				continue // this goroutine, older ones, and the tests waiting for this one
			}
			if slices.ContainsFunc(longLived, func(f string) bool { return strings.Contains(g, f+"(") }) {
				continue // the client's, for its lifetime
			}
			for _, p := range pkgs {
				if strings.Contains(g, p) {
					left = append(left, g)
					break
				}
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d goroutines of %v outlived the suite's invocations:\n%s", len(left), pkgs, strings.Join(left, "\n\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type suite[Op, T any] struct {
	h Harness[Op, T]
}

// record is what one Submit call did.
type record[T any] struct {
	levels []correctable.Level
	views  []correctable.View[T]
	err    error // Submit's result
	hung   bool  // Submit did not return within Timeout
	// violations of the contract seen by the emitter.
	violations []string
}

// check reports r's violations, and those visible only at the end.
func (r *record[T]) check(t *testing.T, mayskip bool) {
	t.Helper()
	if r.hung {
		t.Errorf("levels %v: Submit did not return", r.levels)
		return
	}
	for _, v := range r.violations {
		t.Errorf("levels %v: %s", r.levels, v)
	}
	final := r.levels[len(r.levels)-1]
	closed := len(r.views) > 0 && r.views[len(r.views)-1].Level == final
	switch {
	case r.err == nil && !closed:
		t.Errorf("levels %v: Submit returned nil without the final view (views %v)", r.levels, viewLevels(r.views))
	case r.err != nil && closed:
		t.Errorf("levels %v: Submit returned %v after the final view (a second close)", r.levels, r.err)
	}
	if r.err == nil && !mayskip && len(r.views) != len(r.levels) {
		t.Errorf("levels %v: views at %v; want one per requested level", r.levels, viewLevels(r.views))
	}
}

func viewLevels[T any](vs []correctable.View[T]) []correctable.Level {
	ls := make([]correctable.Level, len(vs))
	for i, v := range vs {
		ls[i] = v.Level
	}
	return ls
}

// submit calls Submit the way correctable.Invoke does and records what the
// binding does. onView, if set, runs after each accepted view.
func (s *suite[Op, T]) submit(t *testing.T, ctx context.Context, op Op, levels []correctable.Level, onView ...func(correctable.View[T])) *record[T] {
	t.Helper()
	r := &record[T]{levels: levels}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		next     int // index of the weakest level still acceptable
		closed   bool
		returned bool
	)
	emit := func(v correctable.View[T]) error {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case returned:
			r.violations = append(r.violations, fmt.Sprintf("view at %s after Submit returned", v.Level))
			return correctable.ErrClosed
		case closed:
			r.violations = append(r.violations, fmt.Sprintf("view at %s after the final view", v.Level))
			return correctable.ErrClosed
		case sctx.Err() != nil:
			return fmt.Errorf("conformance: %w", correctable.ErrClosed) // allowed: the invocation ended
		}
		i := slices.Index(levels, v.Level)
		switch {
		case i < 0:
			r.violations = append(r.violations, fmt.Sprintf("view at %s, not requested", v.Level))
			return correctable.ErrUnrequestedLevel
		case i < next:
			r.violations = append(r.violations, fmt.Sprintf("view at %s after one at %s (weaker or repeated)", v.Level, levels[next-1]))
			return correctable.ErrWeakerLevel
		case v.Confirmed && len(r.views) == 0:
			r.violations = append(r.violations, fmt.Sprintf("confirmation at %s without a previous view", v.Level))
			return correctable.ErrNothingToConfirm
		}
		if v.Confirmed {
			v.Value = r.views[len(r.views)-1].Value
		}
		r.views = append(r.views, v)
		next = i + 1
		for _, f := range onView {
			f(v)
		}
		if next == len(levels) {
			closed = true
			cancel() // as Invoke does when the Correctable closes
		}
		return nil
	}
	done := make(chan error, 1)
	go func() { done <- s.h.Binding.Submit(sctx, op, slices.Clone(levels), emit) }()
	timer := time.NewTimer(s.h.Timeout)
	defer timer.Stop()
	select {
	case r.err = <-done:
	case <-timer.C:
		r.hung = true
		cancel()
		return r // the goroutine is reported by the leak check if it never ends
	}
	mu.Lock()
	returned = true
	mu.Unlock()
	return r
}

// subsets returns every non-empty ordered subset of ls (at most 63).
func subsets(ls []correctable.Level) [][]correctable.Level {
	n := min(len(ls), 6)
	var out [][]correctable.Level
	for m := 1; m < 1<<n; m++ {
		var sub []correctable.Level
		for i := range n {
			if m&(1<<i) != 0 {
				sub = append(sub, ls[i])
			}
		}
		out = append(out, sub)
	}
	return out
}

func (s *suite[Op, T]) strongest() []correctable.Level {
	ls := s.h.Binding.Levels()
	return ls[len(ls)-1:]
}

func (s *suite[Op, T]) testLevels(t *testing.T) {
	ls := s.h.Binding.Levels()
	if len(ls) == 0 {
		t.Fatal("Levels() is empty")
	}
	for i := 1; i < len(ls); i++ {
		if ls[i].Compare(ls[i-1]) <= 0 {
			t.Errorf("Levels() = %v: %s after %s, not weakest to strongest", ls, ls[i], ls[i-1])
		}
	}
	for _, l := range ls {
		if l.IsZero() {
			t.Errorf("Levels() = %v holds the zero Level", ls)
		}
	}
	if again := s.h.Binding.Levels(); !slices.Equal(ls, again) {
		t.Errorf("Levels() changed between calls: %v, then %v", ls, again)
	}
}

// write puts value at key at the strongest level and fails t unless it
// closed with a final view.
func (s *suite[Op, T]) write(t *testing.T, key, value string, levels []correctable.Level) {
	t.Helper()
	r := s.submit(t, context.Background(), s.h.Put(key, value), levels)
	r.check(t, s.h.MaySkip)
	if r.err != nil {
		t.Fatalf("put %s at %v: %v", key, levels, r.err)
	}
}

// read returns the value at key read at levels' final view.
func (s *suite[Op, T]) read(t *testing.T, key string, levels []correctable.Level) (string, bool) {
	t.Helper()
	r := s.submit(t, context.Background(), s.h.Get(key), levels)
	r.check(t, s.h.MaySkip)
	if r.err != nil || len(r.views) == 0 {
		t.Fatalf("get %s at %v: %v", key, levels, r.err)
	}
	return s.h.Value(r.views[len(r.views)-1].Value)
}

func (s *suite[Op, T]) testViews(t *testing.T) {
	key := s.h.Prefix + "views"
	s.write(t, key, "v", s.strongest())
	for _, levels := range subsets(s.h.Binding.Levels()) {
		r := s.submit(t, context.Background(), s.h.Get(key), levels)
		r.check(t, s.h.MaySkip)
		if r.err != nil {
			t.Errorf("get at %v: %v", levels, r.err)
			continue
		}
		if got, found := s.h.Value(r.views[len(r.views)-1].Value); levels[len(levels)-1] == s.strongest()[0] && (!found || got != "v") {
			t.Errorf("get at %v: final view %q (found %v); want %q", levels, got, found, "v")
		}
	}
}

func (s *suite[Op, T]) testWrites(t *testing.T) {
	all := s.h.Binding.Levels()
	for i, levels := range [][]correctable.Level{all, s.strongest()} {
		key := fmt.Sprintf("%swrite/%d", s.h.Prefix, i)
		for j := range 3 {
			want := fmt.Sprintf("value-%d", j)
			s.write(t, key, want, levels)
			if got, found := s.read(t, key, s.strongest()); !found || got != want {
				t.Errorf("put %q at %v, then strong get: %q (found %v)", want, levels, got, found)
			}
		}
	}
	// Through Invoke too: the Correctable's final view, then a strong read.
	key := s.h.Prefix + "write/invoke"
	ctx, cancel := context.WithTimeout(context.Background(), s.h.Timeout)
	defer cancel()
	if _, err := correctable.Invoke(ctx, s.h.Binding, s.h.Put(key, "via-invoke")).Final(ctx); err != nil {
		t.Fatalf("Invoke put: %v", err)
	}
	v, err := correctable.InvokeStrong(ctx, s.h.Binding, s.h.Get(key)).Final(ctx)
	if err != nil {
		t.Fatalf("InvokeStrong get: %v", err)
	}
	if got, found := s.h.Value(v.Value); !found || got != "via-invoke" || !v.Final {
		t.Errorf("InvokeStrong get after Invoke put: %q (found %v, final %v)", got, found, v.Final)
	}
}

func (s *suite[Op, T]) testConcurrent(t *testing.T) {
	const workers, rounds = 4, 3
	all := s.h.Binding.Levels()
	var wg sync.WaitGroup
	recs := make([][]*record[T], workers)
	for w := range workers {
		wg.Go(func() {
			key := fmt.Sprintf("%sconcurrent/%d", s.h.Prefix, w)
			for i := range rounds {
				recs[w] = append(recs[w],
					s.submit(t, context.Background(), s.h.Put(key, fmt.Sprint(i)), all),
					s.submit(t, context.Background(), s.h.Get(key), all))
			}
		})
	}
	wg.Wait()
	for w := range workers {
		for i, r := range recs[w] {
			r.check(t, s.h.MaySkip)
			if r.err != nil {
				t.Errorf("worker %d op %d: %v", w, i, r.err)
			}
		}
		if got, found := s.read(t, fmt.Sprintf("%sconcurrent/%d", s.h.Prefix, w), s.strongest()); !found || got != fmt.Sprint(rounds-1) {
			t.Errorf("worker %d: strong read %q (found %v) after its last put of %d", w, got, found, rounds-1)
		}
	}
}

func (s *suite[Op, T]) testCancelBefore(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, levels := range subsets(s.h.Binding.Levels()) {
		r := s.submit(t, ctx, s.h.Get(s.h.Prefix+"cancel"), levels)
		if r.hung {
			t.Errorf("levels %v: Submit with a cancelled context did not return", levels)
		}
		for _, v := range r.violations {
			t.Errorf("levels %v: %s", levels, v)
		}
	}
	// Invoke fails the Correctable on the context at once, unless the
	// binding was faster still.
	c := correctable.Invoke(ctx, s.h.Binding, s.h.Get(s.h.Prefix+"cancel"))
	if err := s.wait(c); err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("Invoke with a cancelled context: %v; want context.Canceled", err)
	}
}

// wait returns the error c failed with (nil if it closed with a final
// view), or a hang error after Timeout.
func (s *suite[Op, T]) wait(c *correctable.Correctable[T]) error {
	select {
	case <-c.Done():
		_, err := c.Final(context.Background())
		return err
	case <-time.After(s.h.Timeout):
		return fmt.Errorf("no close within %v (a hang)", s.h.Timeout)
	}
}

func (s *suite[Op, T]) testCancelDuring(t *testing.T) {
	all := s.h.Binding.Levels()
	if len(all) < 2 {
		t.Skip("one level: no view before the final one to cancel at")
	}
	key := s.h.Prefix + "cancel-during"
	s.write(t, key, "v", s.strongest())
	// At the first view, through Submit: it must return promptly.
	ctx, cancel := context.WithCancel(context.Background())
	r := s.submit(t, ctx, s.h.Get(key), all, func(correctable.View[T]) { cancel() })
	cancel()
	if r.hung {
		t.Fatalf("Submit did not return after its context was cancelled at the first view")
	}
	for _, v := range r.violations {
		t.Error(v)
	}
	// Through Invoke: the Correctable closes, with the final view if it
	// was already in, else with context.Canceled.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	c := correctable.Invoke(ctx, s.h.Binding, s.h.Get(key))
	c.SetCallbacks(correctable.Callbacks[T]{OnUpdate: func(correctable.View[T]) { cancel() }})
	if err := s.wait(c); err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("Invoke cancelled at its first view: %v; want a final view or context.Canceled", err)
	}
}

func (s *suite[Op, T]) testFailures(t *testing.T) {
	if len(s.h.Failures) == 0 {
		t.Skip("the harness lists no failing operations")
	}
	for _, f := range s.h.Failures {
		t.Run(f.Name, func(t *testing.T) {
			r := s.submit(t, context.Background(), f.Op, s.h.Binding.Levels())
			r.check(t, true)
			if !errors.Is(r.err, f.Err) {
				t.Errorf("Submit: %v; want an error matching %v", r.err, f.Err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), s.h.Timeout)
			defer cancel()
			if _, err := correctable.Invoke(ctx, s.h.Binding, f.Op).Final(ctx); !errors.Is(err, f.Err) {
				t.Errorf("Invoke: %v; want an error matching %v", err, f.Err)
			}
		})
	}
}

func (s *suite[Op, T]) testDown(t *testing.T) {
	if s.h.Down == nil {
		t.Skip("the harness has no binding to a server that is down")
	}
	down := &suite[Op, T]{h: s.h}
	down.h.Binding = s.h.Down
	for _, op := range []Op{s.h.Get(s.h.Prefix + "down"), s.h.Put(s.h.Prefix+"down", "v")} {
		r := down.submit(t, context.Background(), op, s.h.Down.Levels())
		if r.hung {
			t.Fatalf("Submit on a binding whose server is down did not return within %v", s.h.Timeout)
		}
		r.check(t, true)
		if !errors.Is(r.err, s.h.DownErr) {
			t.Errorf("Submit on a binding whose server is down: %v; want an error matching %v", r.err, s.h.DownErr)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*s.h.Timeout)
	defer cancel()
	if _, err := correctable.Invoke(ctx, s.h.Down, s.h.Get(s.h.Prefix+"down")).Final(ctx); !errors.Is(err, s.h.DownErr) {
		t.Errorf("Invoke on a binding whose server is down: %v; want an error matching %v", err, s.h.DownErr)
	}
}
