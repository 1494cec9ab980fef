package correctable

import (
	"context"
	"fmt"
	"runtime/pprof"
	"slices"
	"sync"
	"time"
)

// Emitter is the upcall a Binding uses to deliver a view. The binding sets
// Value, Level, and optionally Confirmed (payload-free confirmation of the
// previous view's value) and Stamp; Invoke sets Final (the view at the
// strongest requested level is the final one) and Elapsed, ignoring what the
// binding put there.
//
// Emit returns an error, and drops the view, when the view breaks the
// contract: ErrUnrequestedLevel for a level that was not requested,
// ErrWeakerLevel for a level not stronger than one already emitted, and
// ErrClosed once the Correctable has closed (final view emitted, invocation
// context done). A binding should stop working on the operation once Emit
// returns ErrClosed. Emit is safe for concurrent use and does not block.
type Emitter[T any] func(View[T]) error

// Binding connects Correctables to one storage stack (Correctables §5.1).
// Op is the binding's operation type, T the type of a result.
type Binding[Op, T any] interface {
	// Levels returns the consistency levels the binding offers, ordered
	// weakest to strongest, without duplicates. It is called on every
	// invocation and must not change between calls.
	Levels() []Level

	// Submit executes op, calling emit once for each level in levels (a
	// non-empty subset of Levels, in the same order), weakest first. It
	// may skip a weaker level (for example when the strong reply arrives
	// first) but not the last one, whose view closes the Correctable.
	//
	// Submit is synchronous: it returns once it emitted the last view,
	// failed (its error fails the Correctable), or ctx is done. Invoke
	// calls it on a goroutine of its own and cancels ctx when the
	// Correctable closes, so Submit must return promptly after ctx ends.
	Submit(ctx context.Context, op Op, levels []Level, emit Emitter[T]) error
}

// Starter is an optional interface of a Binding whose invocations can
// often go on without a goroutine of their own: a request queued on a
// connection whose reader emits the reply's view. Invoke calls Start
// first; if it returns true the invocation is under way, and the binding
// calls done exactly once, from any goroutine and perhaps before Start
// returns, with what Submit would have returned (nil once it emitted the
// last view). If it returns false it has done nothing, and Invoke runs
// Submit on a goroutine of its own. Start must not block, and
// everything Submit promises (the views, ctx) holds for it too.
type Starter[Op, T any] interface {
	Start(ctx context.Context, op Op, levels []Level, emit Emitter[T], done func(error)) bool
}

// Invoke executes op through b and returns a Correctable that receives one
// view per requested level, weakest first; with no levels it requests all of
// b.Levels(). Requested levels must be declared by b and ordered weakest to
// strongest; otherwise, or if b declares no levels or declares them out of
// order, the returned Correctable has failed with ErrInvalidLevels.
//
// Invoke never blocks. Unless b starts the invocation by itself (Starter),
// it runs b.Submit on a goroutine of its own, which runs nothing else until
// Submit returns (it may run a later invocation's Submit after, and ends at
// most 20ms after its last one). It enforces the contract whatever b does: views at unrequested or
// weaker levels and views after close are dropped (Emit returns the error to
// the binding); an error from Submit fails the Correctable; if Submit returns
// nil without the final view the Correctable fails with ErrIncomplete; if ctx
// ends first it fails with ctx's cause. When the Correctable closes, the
// context passed to Submit is cancelled.
func Invoke[Op, T any](ctx context.Context, b Binding[Op, T], op Op, levels ...Level) *Correctable[T] {
	c, r := New[T]()
	levels, err := checkLevels(b.Levels(), levels)
	if err != nil {
		_ = r.Fail(fmt.Errorf("invoke: %w", err)) // c is new: cannot fail
		return c
	}
	// Fail on the caller's context ending first; stop watching at close.
	stop := context.AfterFunc(ctx, func() {
		_ = r.Fail(fmt.Errorf("correctable: invoke: %w", context.Cause(ctx)))
	})
	sctx, cancel := context.WithCancel(ctx)
	c.whenClosed(func() { stop(); cancel() })

	e := &emitter[T]{r: r, levels: levels}
	done := func(err error) {
		defer cancel()
		if err != nil {
			_ = r.Fail(fmt.Errorf("correctable: invoke: %w", err)) // ErrClosed if already closed: fine
			return
		}
		r.fail(ErrIncomplete) // false in the normal case, where the final view closed c
	}
	// done is safe to call again: the Correctable closes once.
	if s, ok := b.(Starter[Op, T]); ok && s.Start(sctx, op, levels, e.emit, done) {
		return c
	}
	goSubmit(func() {
		// A reused goroutine carries the profiler labels of the invocation
		// that started it: take this invocation's (those of ctx, set by
		// pprof.Do or pprof.WithLabels; none otherwise).
		pprof.SetGoroutineLabels(ctx)
		done(b.Submit(sctx, op, levels, e.emit))
	})
	return c
}

// submitIdle is how long a goroutine that ran a Submit waits for the next
// one before it ends.
const submitIdle = 20 * time.Millisecond

// idleSubmitters hands a Submit to a goroutine waiting after its previous
// one; unbuffered, so a send succeeds only if such a goroutine is there.
var idleSubmitters = make(chan func())

// goSubmit runs f on a goroutine of its own: one that ran an earlier Submit
// and is waiting for the next, or a new one. A network binding's Submit
// runs deep (an RPC client's call path), and a new goroutine starts with a
// small stack that each invocation would grow again by copying; a reused
// goroutine keeps the stack it grew. Goroutines end after one to two
// submitIdle periods without work, so none outlive a burst of invocations
// by long.
func goSubmit(f func()) {
	select {
	case idleSubmitters <- f:
	default:
		go submitter(f)
	}
}

// submitter runs f, then the Submits handed to it while it waits. Its idle
// timer is not reset after every Submit (a timer-heap update per
// invocation): when it fires, a goroutine that ran a Submit since the last
// firing waits one more period, so an idle one ends after between one and
// two periods.
func submitter(f func()) {
	idle := time.NewTimer(submitIdle)
	for {
		f()
		f = nil // let the invocation's closure be collected while waiting
		worked := true
	wait:
		select {
		case f = <-idleSubmitters:
		case <-idle.C:
			if !worked {
				return
			}
			worked = false
			idle.Reset(submitIdle)
			goto wait
		}
	}
}

// InvokeWeak executes op at b's weakest level only: the Correctable receives
// a single, final view (Correctables §3.2).
func InvokeWeak[Op, T any](ctx context.Context, b Binding[Op, T], op Op) *Correctable[T] {
	ls := b.Levels()
	if len(ls) == 0 {
		return Invoke(ctx, b, op) // fails with ErrInvalidLevels
	}
	return Invoke(ctx, b, op, ls[0])
}

// InvokeStrong executes op at b's strongest level only: the Correctable
// receives a single, final view (Correctables §3.2).
func InvokeStrong[Op, T any](ctx context.Context, b Binding[Op, T], op Op) *Correctable[T] {
	ls := b.Levels()
	if len(ls) == 0 {
		return Invoke(ctx, b, op)
	}
	return Invoke(ctx, b, op, ls[len(ls)-1])
}

// checkLevels validates a binding's declared levels and the requested ones,
// and returns the levels to request (a copy the binding cannot alias).
func checkLevels(declared, requested []Level) ([]Level, error) {
	if len(declared) == 0 {
		return nil, fmt.Errorf("binding declares no levels: %w", ErrInvalidLevels)
	}
	for i := 1; i < len(declared); i++ {
		if declared[i].Compare(declared[i-1]) <= 0 {
			return nil, fmt.Errorf("binding declares %s after %s, not weakest to strongest: %w",
				declared[i], declared[i-1], ErrInvalidLevels)
		}
	}
	if len(requested) == 0 {
		return slices.Clone(declared), nil
	}
	for i, l := range requested {
		if !slices.Contains(declared, l) {
			return nil, fmt.Errorf("level %s not offered by the binding (it offers %v): %w", l, declared, ErrInvalidLevels)
		}
		if i > 0 && l.Compare(requested[i-1]) <= 0 {
			return nil, fmt.Errorf("requested %s after %s, not weakest to strongest: %w", l, requested[i-1], ErrInvalidLevels)
		}
	}
	return slices.Clone(requested), nil
}

// emitter enforces the binding side of the contract for one invocation.
type emitter[T any] struct {
	r      *Resolver[T]
	levels []Level

	mu   sync.Mutex
	next int // index in levels of the weakest level still acceptable
}

func (e *emitter[T]) emit(v View[T]) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	i := slices.Index(e.levels, v.Level)
	switch {
	case e.next == len(e.levels):
		return fmt.Errorf("emit at %s after the final view: %w", v.Level, ErrClosed)
	case i < 0:
		return fmt.Errorf("emit at %s (requested %v): %w", v.Level, e.levels, ErrUnrequestedLevel)
	case i < e.next:
		return fmt.Errorf("emit at %s after %s: %w", v.Level, e.levels[e.next-1], ErrWeakerLevel)
	}
	v.Elapsed = 0 // measured by the Correctable
	if i == len(e.levels)-1 {
		if err := e.r.Close(v); err != nil {
			return err
		}
	} else if err := e.r.Update(v); err != nil {
		return err
	}
	e.next = i + 1
	return nil
}
