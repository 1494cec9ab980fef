package correctable

import (
	"context"
	"fmt"
)

// Speculate runs f on the views of c and returns a Correctable that closes
// with f's result on the final value (Correctables §4.2, Listing 3), as early
// as the final view allows:
//
//   - f runs on every view whose value differs (==) from the value of the
//     view before it; its context is cancelled when a newer, different view
//     supersedes its input, or when c fails.
//   - When the final view confirms the value of the latest run (equal value,
//     or Confirmed), the result closes with that run's result as soon as it
//     is ready: no re-run.
//   - Otherwise f runs again on the final value, and the result closes with
//     that run's result.
//   - Every superseded run that returned a result without error is passed
//     to abort (if non-nil), once, to undo its side effects. The result
//     closes only after every superseded run has returned and been aborted.
//   - An error from the run whose result would be delivered fails the
//     result (wrapped); errors of superseded runs are dropped. If c fails,
//     the result fails with c's error.
//
// So a result is delivered only if it was computed from the final view's
// value. The final view of the result has the level and stamp of c's final
// view. The result has no preliminary views. abort runs on the goroutine
// that owns the speculation, one call at a time.
//
// The speculation is owned by one goroutine that ends when the result closes
// and every run has returned; runs end when f returns, so f must honour its
// context.
func Speculate[T comparable, R any](c *Correctable[T], f func(context.Context, T) (R, error), abort func(R)) *Correctable[R] {
	return SpeculateFunc(c, func(a, b T) bool { return a == b }, f, abort)
}

// SpeculateFunc is Speculate for values that are not comparable with ==:
// equal reports whether two values are the same.
func SpeculateFunc[T, R any](c *Correctable[T], equal func(a, b T) bool, f func(context.Context, T) (R, error), abort func(R)) *Correctable[R] {
	out, r := New[R]()
	out.start = c.start
	s := &speculation[T, R]{
		equal:   equal,
		f:       f,
		abort:   abort,
		r:       r,
		events:  make(chan specEvent[T]),
		results: make(chan *specRun[T, R]),
	}
	// Input events come from c's dispatcher: it blocks in the send until
	// the speculation goroutine takes the event, which it always does
	// until c closed, so views are handled in order and none is lost.
	send := func(ev specEvent[T]) { s.events <- ev }
	c.SetCallbacks(Callbacks[T]{
		OnUpdate: func(v View[T]) { send(specEvent[T]{view: v}) },
		OnFinal:  func(v View[T]) { send(specEvent[T]{view: v}) },
		OnError:  func(err error) { send(specEvent[T]{err: err}) },
	})
	go s.loop()
	return out
}

// specEvent is a view of the input, or its error.
type specEvent[T any] struct {
	view View[T]
	err  error
}

// specRun is one execution of f.
type specRun[T, R any] struct {
	input  T
	cancel context.CancelFunc
	stale  bool // superseded: its result is aborted, never delivered
	done   bool
	val    R
	err    error
}

// speculation is the state of one Speculate call, owned by loop.
type speculation[T, R any] struct {
	equal func(a, b T) bool
	f     func(context.Context, T) (R, error)
	abort func(R)
	r     *Resolver[R]

	events  chan specEvent[T]
	results chan *specRun[T, R]

	cur     *specRun[T, R] // the run on the latest distinct input
	running int            // runs started and not yet returned
	final   *View[T]       // c's final view, once seen
	inErr   error          // c's error, once seen
	closed  bool           // c closed (final or error)
	out     bool           // the result closed
}

func (s *speculation[T, R]) loop() {
	for !(s.out && s.closed && s.running == 0) {
		events := s.events
		if s.closed {
			events = nil // nothing more will come
		}
		select {
		case ev := <-events:
			s.onEvent(ev)
		case run := <-s.results:
			s.running--
			run.done = true
			if run.stale {
				s.abortRun(run)
			}
		}
		s.tryClose()
	}
}

func (s *speculation[T, R]) onEvent(ev specEvent[T]) {
	if ev.err != nil {
		s.closed = true
		s.inErr = ev.err
		s.supersede()
		return
	}
	v := ev.view
	same := s.cur != nil && (v.Confirmed || s.equal(s.cur.input, v.Value))
	if v.Final {
		s.closed = true
		s.final = &v
	}
	if !same {
		s.supersede()
		s.start(v.Value)
	}
}

// start runs f on input in a goroutine that ends when f returns.
func (s *speculation[T, R]) start(input T) {
	ctx, cancel := context.WithCancel(context.Background())
	run := &specRun[T, R]{input: input, cancel: cancel}
	s.cur = run
	s.running++
	go func() {
		run.val, run.err = s.f(ctx, input)
		cancel()
		s.results <- run // loop receives until every run returned
	}()
}

// supersede marks the current run stale and cancels it.
func (s *speculation[T, R]) supersede() {
	run := s.cur
	if run == nil {
		return
	}
	s.cur = nil
	run.stale = true
	run.cancel()
	if run.done {
		s.abortRun(run)
	}
}

func (s *speculation[T, R]) abortRun(run *specRun[T, R]) {
	if run.err == nil && s.abort != nil {
		s.abort(run.val)
	}
}

// tryClose closes the result once the outcome is known and no superseded
// run is outstanding (the current run, if any, is counted in running too).
func (s *speculation[T, R]) tryClose() {
	if s.out || !s.closed || s.running > 0 {
		return
	}
	s.out = true
	switch {
	case s.inErr != nil:
		_ = s.r.Fail(s.inErr)
	case s.cur.err != nil:
		_ = s.r.Fail(fmt.Errorf("correctable: speculate: %w", s.cur.err))
	default:
		_ = s.r.Close(View[R]{Value: s.cur.val, Level: s.final.Level, Stamp: s.final.Stamp})
	}
}
