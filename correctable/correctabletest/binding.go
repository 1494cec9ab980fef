package correctabletest

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/correctables/correctables/correctable"
)

// Binding is the reference primary-backup binding of a Cluster, for results
// of type T. It implements correctable.Binding[Op[T], T].
//
// When a reply equals the previous one (reflect.DeepEqual), the binding
// emits a payload-free confirmation (View.Confirmed), as a store with
// server-side support would (Correctables §5.2).
type Binding[T any] struct {
	c        *Cluster
	parallel bool
}

var _ correctable.Binding[Op[int], int] = (*Binding[int])(nil)

// Sequential returns the binding that queries the requested replicas one
// after the other, weakest first (Correctables Listing 7). With zero
// latencies its views arrive in a fixed order, by construction.
func Sequential[T any](c *Cluster) *Binding[T] { return &Binding[T]{c: c} }

// Parallel returns the binding that queries the requested replicas at once
// and emits replies as they arrive; a reply weaker than one already emitted
// is skipped.
func Parallel[T any](c *Cluster) *Binding[T] { return &Binding[T]{c: c, parallel: true} }

// Levels returns [Cache,] Eventual, Strong: the cache (if configured), the
// backup and the primary.
func (b *Binding[T]) Levels() []correctable.Level { return b.c.levels() }

// reply is one replica's answer.
type reply[T any] struct {
	level correctable.Level
	value T
	stamp uint64
	err   error
}

// Submit executes op at the replicas serving levels.
func (b *Binding[T]) Submit(ctx context.Context, op Op[T], levels []correctable.Level, emit correctable.Emitter[T]) error {
	replicas := make([]Replica, len(levels))
	for i, l := range levels {
		r, err := replicaAt(l)
		if err != nil {
			return err
		}
		replicas[i] = r
	}
	var (
		last     T
		haveLast bool
	)
	send := func(rep reply[T]) error {
		v := correctable.View[T]{Value: rep.value, Level: rep.level, Stamp: rep.stamp}
		if haveLast && reflect.DeepEqual(last, rep.value) {
			var zero T
			v.Value, v.Confirmed = zero, true
		}
		if err := emit(v); err != nil {
			return err
		}
		last, haveLast = rep.value, true
		return nil
	}
	if !b.parallel {
		for _, r := range replicas {
			rep := query(ctx, b.c, r, op)
			if rep.err != nil {
				return rep.err
			}
			if err := send(rep); err != nil {
				return stopErr(err)
			}
		}
		return nil
	}
	return b.submitParallel(ctx, op, replicas, send)
}

// submitParallel queries every replica at once. It owns one goroutine per
// replica and returns only after all of them have.
func (b *Binding[T]) submitParallel(ctx context.Context, op Op[T], replicas []Replica, send func(reply[T]) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	replies := make(chan reply[T], len(replicas)) // never blocks a sender
	for _, r := range replicas {
		go func() { replies <- query(ctx, b.c, r, op) }()
	}
	final := replicas[len(replicas)-1].Level()
	var (
		strongest correctable.Level
		err       error
		done      bool // final view emitted, or failed: drain the rest
	)
	for range replicas {
		rep := <-replies
		if done {
			continue
		}
		switch {
		case rep.err != nil:
			err = rep.err
		case !strongest.IsZero() && rep.level.Compare(strongest) <= 0:
			// A weaker reply after a stronger one carries nothing new.
		default:
			strongest = rep.level
			err = send(rep)
		}
		if err != nil || rep.level == final {
			done = true
			cancel()
		}
	}
	return stopErr(err)
}

// stopErr maps an emit error to Submit's result: ErrClosed means the
// invocation ended (final view or context), not a failure of the binding.
func stopErr(err error) error {
	if errors.Is(err, correctable.ErrClosed) {
		return nil
	}
	return err
}

// query waits for r's latency and executes op there.
func query[T any](ctx context.Context, c *Cluster, r Replica, op Op[T]) reply[T] {
	if err := c.wait(ctx, r); err != nil {
		return reply[T]{level: r.Level(), err: fmt.Errorf("correctabletest: query %s: %w", r, err)}
	}
	v, stamp := exec(c, r, op)
	return reply[T]{level: r.Level(), value: v, stamp: stamp}
}
