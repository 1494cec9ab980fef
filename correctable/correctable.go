package correctable

import (
	"context"
	"fmt"
	"iter"
	"sync"
	"time"
)

// MaxViews bounds the preliminary views one Correctable holds. A Correctable
// keeps every view it received so that slow iterators and callbacks see them
// all, in order; the bound keeps a runaway producer from growing it forever.
const MaxViews = 1 << 12

// Callbacks are the functions SetCallbacks attaches to a Correctable. Any of
// them may be nil.
type Callbacks[T any] struct {
	// OnUpdate is called with each preliminary view.
	OnUpdate func(View[T])
	// OnFinal is called with the final view.
	OnFinal func(View[T])
	// OnError is called with the error the Correctable failed with.
	OnError func(error)
}

// Correctable is the progressively improving result of one operation. It
// starts updating, receives zero or more preliminary views in order of
// strength, and closes exactly once, with a final view or with an error;
// no view follows the close.
//
// A Correctable is safe for concurrent use. Its zero value is not usable:
// create one with New, or obtain one from Invoke or a combinator.
type Correctable[T any] struct {
	start time.Time
	done  chan struct{} // closed at close

	mu     sync.Mutex
	views  []View[T] // every view received, in order; the final one last
	err    error     // the error the Correctable failed with
	closed bool
	// changed is closed at the next new view or close, for iterators
	// waiting for one; made by the first that waits (nil until then, and
	// again after each view), so a Correctable nobody iterates over costs
	// no channel for it.
	changed chan struct{}
	// subs are the attached callback sets that still have something to
	// deliver; dispatching is true while the dispatcher goroutine runs.
	subs        []*subscriber[T]
	dispatching bool
	// onClose are internal hooks (Invoke's context cancel) run once, at
	// close, outside mu. They must not block.
	onClose []func()
}

// subscriber is one SetCallbacks attachment and its delivery position.
type subscriber[T any] struct {
	cb   Callbacks[T]
	next int // index in views of the next view to deliver
}

// Resolver is the producer side of a Correctable: the binding or combinator
// that created it updates it, closes it or fails it. Its methods are safe for
// concurrent use, never block on consumers, and never run callbacks.
type Resolver[T any] struct {
	c *Correctable[T]
}

// New returns an updating Correctable and the Resolver that drives it. Views'
// Elapsed is measured from this call.
func New[T any]() (*Correctable[T], *Resolver[T]) {
	c := &Correctable[T]{
		start: time.Now(),
		done:  make(chan struct{}),
	}
	return c, &Resolver[T]{c: c}
}

// Correctable returns the Correctable this Resolver drives.
func (r *Resolver[T]) Correctable() *Correctable[T] { return r.c }

// Update delivers a preliminary view. It returns ErrClosed after close,
// ErrWeakerLevel if v is weaker than the previous view, ErrNothingToConfirm if
// v is Confirmed and there is no previous view, and ErrTooManyViews past
// MaxViews; in each case the view is dropped and nothing else changes.
//
// Update ignores v.Final. If v.Confirmed, v.Value is replaced by the previous
// view's value. If v.Elapsed is zero it is set to the time since New.
func (r *Resolver[T]) Update(v View[T]) error {
	v.Final = false
	return r.c.add(v)
}

// Close closes the Correctable with the final view v. It returns the same
// errors as Update (except ErrTooManyViews), leaving the Correctable
// unchanged.
func (r *Resolver[T]) Close(v View[T]) error {
	v.Final = true
	return r.c.add(v)
}

// Fail closes the Correctable with err. It returns ErrClosed after close and
// ErrNilError if err is nil.
func (r *Resolver[T]) Fail(err error) error {
	if err == nil {
		return ErrNilError
	}
	if !r.fail(err) {
		return fmt.Errorf("fail after close: %w", ErrClosed)
	}
	return nil
}

// fail is Fail with a non-nil err, reporting whether the Correctable was
// still open: without building an error for the usual case of a producer
// that fails what its final view already closed.
func (r *Resolver[T]) fail(err error) bool {
	c := r.c
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return false
	}
	c.err = err
	hooks := c.closeLocked()
	c.mu.Unlock()
	runHooks(hooks)
	return true
}

// add appends a view, closing the Correctable if the view is final.
func (c *Correctable[T]) add(v View[T]) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return fmt.Errorf("view at %s: %w", v.Level, ErrClosed)
	}
	if n := len(c.views); n > 0 {
		prev := c.views[n-1]
		if v.Level.Compare(prev.Level) < 0 {
			c.mu.Unlock()
			return fmt.Errorf("%s after %s: %w", v.Level, prev.Level, ErrWeakerLevel)
		}
		if v.Confirmed {
			v.Value = prev.Value
		}
	} else if v.Confirmed {
		c.mu.Unlock()
		return fmt.Errorf("view at %s: %w", v.Level, ErrNothingToConfirm)
	}
	if !v.Final && len(c.views) >= MaxViews {
		c.mu.Unlock()
		return fmt.Errorf("view at %s: %d views: %w", v.Level, MaxViews, ErrTooManyViews)
	}
	if v.Elapsed == 0 {
		v.Elapsed = time.Since(c.start)
	}
	c.views = append(c.views, v)
	var hooks []func()
	if v.Final {
		hooks = c.closeLocked()
	} else {
		if c.changed != nil {
			close(c.changed)
			c.changed = nil
		}
		c.kickLocked()
	}
	c.mu.Unlock()
	runHooks(hooks)
	return nil
}

// closeLocked marks the Correctable closed, wakes every waiter and starts
// delivering the close. It returns the close hooks for the caller to run
// once it released mu.
func (c *Correctable[T]) closeLocked() []func() {
	c.closed = true
	close(c.done)
	if c.changed != nil {
		close(c.changed) // never made again: waiters see closed and stop
	}
	c.kickLocked()
	hooks := c.onClose
	c.onClose = nil
	return hooks
}

func runHooks(hooks []func()) {
	for _, h := range hooks {
		h()
	}
}

// whenClosed registers f to run once at close (immediately if already
// closed). f must not block.
func (c *Correctable[T]) whenClosed(f func()) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		f()
		return
	}
	c.onClose = append(c.onClose, f)
	c.mu.Unlock()
}

// SetCallbacks attaches a set of callbacks. Each attachment is independent,
// like a Promise's then: OnUpdate is called once per preliminary view, then
// OnFinal once with the final view or OnError once with the error, in that
// order. Callbacks of one Correctable are never called concurrently, never
// with a lock held (they may call any method of this or another
// Correctable), and never on the caller's or the producer's goroutine: a
// dispatcher goroutine owned by the Correctable runs them and exits when it
// has nothing left to deliver. A slow callback delays the callbacks after
// it, not the producer.
//
// An attachment made late starts from the latest view: it sees the latest
// preliminary view (if still updating, or if the Correctable failed after
// it), then everything after it, as a Promise attached after resolution
// still observes the resolution.
func (c *Correctable[T]) SetCallbacks(cb Callbacks[T]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.subs = append(c.subs, &subscriber[T]{cb: cb, next: max(len(c.views)-1, 0)})
	c.kickLocked()
}

// kickLocked starts the dispatcher if some subscriber has something to
// deliver and no dispatcher is running.
func (c *Correctable[T]) kickLocked() {
	if c.dispatching {
		return
	}
	for _, s := range c.subs {
		if c.pendingLocked(s) {
			c.dispatching = true
			go c.dispatch()
			return
		}
	}
}

func (c *Correctable[T]) pendingLocked(s *subscriber[T]) bool {
	return s.next < len(c.views) || (c.closed && c.err != nil)
}

// dispatch delivers callbacks one at a time until none is pending. At most
// one dispatch goroutine runs per Correctable (c.dispatching), which is what
// serializes callbacks.
func (c *Correctable[T]) dispatch() {
	for {
		c.mu.Lock()
		// Serve the subscriber furthest behind, so that all attachments
		// progress together; ties go to the earliest attachment.
		pick := -1
		for i, s := range c.subs {
			if c.pendingLocked(s) && (pick < 0 || s.next < c.subs[pick].next) {
				pick = i
			}
		}
		if pick < 0 {
			c.dispatching = false
			c.mu.Unlock()
			return
		}
		s := c.subs[pick]
		var call func()
		if s.next < len(c.views) {
			v := c.views[s.next]
			s.next++
			switch {
			case v.Final:
				c.subs = append(c.subs[:pick], c.subs[pick+1:]...)
				if f := s.cb.OnFinal; f != nil {
					call = func() { f(v) }
				}
			case s.cb.OnUpdate != nil:
				f := s.cb.OnUpdate
				call = func() { f(v) }
			}
		} else {
			err := c.err
			c.subs = append(c.subs[:pick], c.subs[pick+1:]...)
			if f := s.cb.OnError; f != nil {
				call = func() { f(err) }
			}
		}
		c.mu.Unlock()
		if call != nil {
			call()
		}
	}
}

// Final blocks until the Correctable closes or ctx is done. It returns the
// final view, or the error the Correctable failed with, or ctx's error
// (wrapped) if ctx ends first; in the last case the Correctable is left
// unchanged.
func (c *Correctable[T]) Final(ctx context.Context) (View[T], error) {
	select {
	case <-c.done:
	case <-ctx.Done():
		// Prefer a close that raced with the deadline.
		select {
		case <-c.done:
		default:
			return View[T]{}, fmt.Errorf("correctable: waiting for the final view: %w", context.Cause(ctx))
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return View[T]{}, c.err
	}
	return c.views[len(c.views)-1], nil
}

// Views returns an iterator over the views: it yields every view in order
// and ends after the final view, or after the last preliminary view when the
// Correctable fails (check Err). An iteration that starts late starts from
// the latest view. Iterating blocks while the Correctable is updating; it
// ends only at close or when the loop breaks.
func (c *Correctable[T]) Views() iter.Seq[View[T]] { return c.iterate(true) }

// AllViews is Views for a consumer that must see every view, whenever it
// starts: it yields the views delivered before the iteration started too,
// from the first. A command that prints an invocation's views, or a
// benchmark that times the preliminary view, uses it, since both views may
// arrive before the loop begins.
func (c *Correctable[T]) AllViews() iter.Seq[View[T]] { return c.iterate(false) }

func (c *Correctable[T]) iterate(fromLatest bool) iter.Seq[View[T]] {
	return func(yield func(View[T]) bool) {
		c.mu.Lock()
		i := 0
		if fromLatest {
			i = max(len(c.views)-1, 0)
		}
		c.mu.Unlock()
		for {
			c.mu.Lock()
			if i < len(c.views) {
				v := c.views[i]
				c.mu.Unlock()
				i++
				if !yield(v) || v.Final {
					return
				}
				continue
			}
			if c.closed {
				c.mu.Unlock()
				return
			}
			if c.changed == nil {
				c.changed = make(chan struct{})
			}
			changed := c.changed
			c.mu.Unlock()
			<-changed
		}
	}
}

// Latest returns the latest view, and false if there is none yet.
func (c *Correctable[T]) Latest() (View[T], bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.views) == 0 {
		return View[T]{}, false
	}
	return c.views[len(c.views)-1], true
}

// Done returns a channel closed when the Correctable closes.
func (c *Correctable[T]) Done() <-chan struct{} { return c.done }

// Err returns the error the Correctable failed with, or nil if it is
// updating or closed with a final view.
func (c *Correctable[T]) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// State returns the Correctable's state.
func (c *Correctable[T]) State() State {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case !c.closed:
		return StateUpdating
	case c.err != nil:
		return StateError
	default:
		return StateFinal
	}
}
