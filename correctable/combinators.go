package correctable

import (
	"context"
	"fmt"
	"sync"
)

// Map returns a Correctable whose views are c's views with f applied to each
// value; level, finality, elapsed time and stamp are kept. f
// runs on c's callback dispatcher: it must be quick and must not block.
func Map[T, R any](c *Correctable[T], f func(T) R) *Correctable[R] {
	return Then(c, func(v View[T]) (R, error) { return f(v.Value), nil })
}

// Then returns a Correctable whose views are c's views with f applied to
// each; level, finality, elapsed time and stamp are kept. If f
// returns an error, the returned Correctable fails with it (wrapped) and
// later views of c are ignored; if c fails, it fails with the same error. f
// runs on c's callback dispatcher: it must be quick and must not block.
func Then[T, R any](c *Correctable[T], f func(View[T]) (R, error)) *Correctable[R] {
	out, r := New[R]()
	out.start = c.start
	apply := func(v View[T]) {
		val, err := f(v)
		if err != nil {
			_ = r.Fail(fmt.Errorf("correctable: then at %s: %w", v.Level, err))
			return
		}
		w := View[R]{Value: val, Level: v.Level, Final: v.Final, Elapsed: v.Elapsed, Stamp: v.Stamp}
		if v.Final {
			_ = r.Close(w) // ErrClosed if f failed before: ignored
		} else {
			_ = r.Update(w)
		}
	}
	c.SetCallbacks(Callbacks[T]{
		OnUpdate: apply,
		OnFinal:  apply,
		OnError:  func(err error) { _ = r.Fail(err) },
	})
	return out
}

// All returns a Correctable over the values of cs, in order. It has a view as
// soon as every input has one, and a new view whenever an input gets one; the
// view's level is the weakest of the inputs' latest levels, so it is never
// weaker than the one before. It closes with a final view when every input
// closed with one, and fails with the first input error. With no inputs it
// closes at once with an empty final view at level Strong.
func All[T any](cs ...*Correctable[T]) *Correctable[[]T] {
	out, r := New[[]T]()
	if len(cs) == 0 {
		_ = r.Close(View[[]T]{Value: []T{}, Level: Strong})
		return out
	}
	var (
		mu     sync.Mutex
		latest = make([]*View[T], len(cs))
		finals int
	)
	// publish runs with mu held, so that views of different inputs,
	// delivered on different dispatchers, reach out one at a time and in
	// order. Resolver methods never block, so holding mu is safe.
	publish := func() {
		vals := make([]T, len(cs))
		var lvl Level
		for i, v := range latest {
			if v == nil {
				return
			}
			vals[i] = v.Value
			if i == 0 || v.Level.Compare(lvl) < 0 {
				lvl = v.Level
			}
		}
		w := View[[]T]{Value: vals, Level: lvl}
		if finals == len(cs) {
			_ = r.Close(w)
		} else {
			_ = r.Update(w)
		}
	}
	for i, c := range cs {
		on := func(v View[T]) {
			mu.Lock()
			defer mu.Unlock()
			latest[i] = &v
			if v.Final {
				finals++
			}
			publish()
		}
		c.SetCallbacks(Callbacks[T]{
			OnUpdate: on,
			OnFinal:  on,
			OnError: func(err error) {
				_ = r.Fail(fmt.Errorf("correctable: all: input %d: %w", i, err))
			},
		})
	}
	return out
}

// FirstAtLeast returns a Correctable that closes with the first view of c at
// level min or stronger, as its final view. If c closes below min, it fails
// with ErrLevelNotReached; if c fails first, with c's error. It has no
// preliminary views.
func FirstAtLeast[T any](c *Correctable[T], min Level) *Correctable[T] {
	out, r := New[T]()
	out.start = c.start
	on := func(v View[T]) {
		if v.Level.AtLeast(min) {
			v.Final = true
			_ = r.Close(v) // ErrClosed for views after the first: ignored
		} else if v.Final {
			_ = r.Fail(fmt.Errorf("correctable: final view at %s, want at least %s: %w", v.Level, min, ErrLevelNotReached))
		}
	}
	c.SetCallbacks(Callbacks[T]{
		OnUpdate: on,
		OnFinal:  on,
		OnError:  func(err error) { _ = r.Fail(err) },
	})
	return out
}

// WithContext returns a Correctable that mirrors c but fails with ctx's cause
// (wrapped) if ctx ends before c closes: use context.WithTimeout to put a
// deadline on a Correctable. c itself is not changed. No goroutine waits on
// ctx: the watch is a context.AfterFunc, stopped when the result closes.
func WithContext[T any](ctx context.Context, c *Correctable[T]) *Correctable[T] {
	out := Then(c, func(v View[T]) (T, error) { return v.Value, nil })
	r := &Resolver[T]{c: out}
	stop := context.AfterFunc(ctx, func() {
		_ = r.Fail(fmt.Errorf("correctable: %w", context.Cause(ctx)))
	})
	out.whenClosed(func() { stop() })
	return out
}
