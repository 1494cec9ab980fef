// Package store is the small storage interface the example applications
// (ad serving, a timeline, ticket selling; Correctables §4.2, §4.3, §6.3)
// are written against: a correctable.Binding over four operations on
// byte-string keys and queues. The applications take the binding as a
// parameter and never see which store is behind it; Client adapts this
// repository's client, and a binding to any other store that can read,
// write, enqueue and dequeue fits the same way.
package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/correctable"
)

// Kind is an operation's kind.
type Kind int

// The operations.
const (
	KindGet     Kind = iota + 1 // read Key
	KindPut                     // write Value at Key
	KindEnqueue                 // append Value to the queue Key
	KindDequeue                 // take the head of the queue Key
	KindAppend                  // append Value to the value at Key
)

// Op is one operation.
type Op struct {
	Kind  Kind
	Key   string
	Value []byte
}

// Get reads key.
func Get(key string) Op { return Op{Kind: KindGet, Key: key} }

// Put writes value at key.
func Put(key string, value []byte) Op { return Op{Kind: KindPut, Key: key, Value: value} }

// Enqueue appends item to queue.
func Enqueue(queue string, item []byte) Op { return Op{Kind: KindEnqueue, Key: queue, Value: item} }

// Dequeue takes the item at the head of queue.
func Dequeue(queue string) Op { return Op{Kind: KindDequeue, Key: queue} }

// Append appends value to the value at key (a missing key counts as empty).
func Append(key string, value []byte) Op { return Op{Kind: KindAppend, Key: key, Value: value} }

// Result is an operation's result in one view.
type Result struct {
	// Found: a get found the key. OK: a dequeue took an item (false on an
	// empty queue).
	Found, OK bool
	// Value: the value read, or the item dequeued.
	Value []byte
	// Left: the queue's length after an enqueue or dequeue.
	Left int64
	// Err: the operation ran and failed at the store (a key too large,
	// say); it may differ between views.
	Err error
}

// Equal reports whether two results are the same.
func (r Result) Equal(o Result) bool {
	return r.Found == o.Found && r.OK == o.OK && r.Left == o.Left && bytes.Equal(r.Value, o.Value) &&
		(r.Err == nil) == (o.Err == nil)
}

// Binding is what the applications run on.
type Binding = correctable.Binding[Op, Result]

// Client adapts a client of this repository's store: the preliminary view
// (correctable.Eventual) is the contacted replica's tentative result, the
// final one (correctable.Strong) the result after consensus.
func Client(c *client.Client) Binding { return clientBinding{c} }

type clientBinding struct{ c *client.Client }

func (b clientBinding) Levels() []correctable.Level { return b.c.Levels() }

func (b clientBinding) Submit(ctx context.Context, op Op, levels []correctable.Level, emit correctable.Emitter[Result]) error {
	var cop client.Op
	switch op.Kind {
	case KindGet:
		cop = client.Get(op.Key)
	case KindPut:
		cop = client.Put(op.Key, op.Value)
	case KindEnqueue:
		cop = client.Enqueue(op.Key, op.Value)
	case KindDequeue:
		cop = client.Dequeue(op.Key)
	case KindAppend:
		cop = client.Append(op.Key, op.Value)
	default:
		return fmt.Errorf("store: unknown operation kind %d", op.Kind)
	}
	return b.c.Submit(ctx, cop, levels, func(v correctable.View[client.Result]) error {
		r := v.Value
		return emit(correctable.View[Result]{
			Value: Result{Found: r.Found, OK: r.OK, Value: r.Value, Left: r.Len, Err: r.Err},
			Level: v.Level, Final: v.Final, Confirmed: v.Confirmed, Stamp: v.Stamp,
		})
	})
}

// Read invokes a get at the levels given (all by default).
func Read(ctx context.Context, b Binding, key string, levels ...correctable.Level) *correctable.Correctable[Result] {
	return correctable.Invoke(ctx, b, Get(key), levels...)
}

// Final invokes op at the binding's strongest level only and waits for
// its view; a result with Err set is returned as that error.
func Final(ctx context.Context, b Binding, op Op) (Result, error) {
	v, err := correctable.InvokeStrong(ctx, b, op).Final(ctx)
	if err == nil && v.Value.Err != nil {
		err = v.Value.Err
	}
	return v.Value, err
}

// LoadAll runs ops with final views only, concurrency at a time, and
// returns the first error; progress, if set, is called after every 1,000
// operations and at the end.
func LoadAll(ctx context.Context, b Binding, ops []Op, concurrency int, progress func(done, total int)) error {
	if concurrency < 1 {
		concurrency = 1
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		next atomic.Int64
		done atomic.Int64
		wg   sync.WaitGroup
	)
	for range concurrency {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(ops) || ctx.Err() != nil {
					return
				}
				if _, err := Final(ctx, b, ops[i]); err != nil {
					cancel(fmt.Errorf("store: loading: %w", err))
					return
				}
				if n := done.Add(1); progress != nil && (n%1000 == 0 || int(n) == len(ops)) {
					progress(int(n), len(ops))
				}
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return err
	}
	return nil
}

// Speculation counts what speculating on reads (ReadSpeculate) did. It is
// safe for concurrent use.
type Speculation struct {
	runs, reruns, aborted atomic.Uint64
}

// Counts returns the counts so far: runs, times the speculative function
// ran on a view; reruns, reads whose final view contradicted the
// preliminary one, so the function ran again on it; aborted, runs that had
// completed when contradicted, whose result was thrown away (the others
// were cancelled midway).
func (s *Speculation) Counts() (runs, reruns, aborted uint64) {
	return s.runs.Load(), s.reruns.Load(), s.aborted.Load()
}

// ReadSpeculate reads key (Read, every level) and runs f speculatively on
// its views (correctable.SpeculateFunc, views compared with Result.Equal):
// on the preliminary view, and again on the final one when it differs. The
// Correctable returned closes with f's result on the final view. counts
// counts the runs.
func ReadSpeculate[T any](ctx context.Context, b Binding, key string, counts *Speculation, f func(context.Context, Result) (T, error)) *correctable.Correctable[T] {
	var runs atomic.Int32
	return correctable.SpeculateFunc(Read(ctx, b, key), func(x, y Result) bool { return x.Equal(y) },
		func(ctx context.Context, r Result) (T, error) {
			counts.runs.Add(1)
			if runs.Add(1) == 2 {
				counts.reruns.Add(1)
			}
			return f(ctx, r)
		},
		func(T) { counts.aborted.Add(1) })
}

// GetAll reads keys in parallel, each with a final read (Final of a Get),
// and returns their values in order. A missing key is the error missing(i)
// returns for keys[i]; the errors of all the reads are joined.
func GetAll(ctx context.Context, b Binding, keys []string, missing func(i int) error) ([][]byte, error) {
	values := make([][]byte, len(keys))
	errs := make([]error, len(keys))
	var wg sync.WaitGroup
	for i, key := range keys {
		wg.Go(func() {
			r, err := Final(ctx, b, Get(key))
			switch {
			case err != nil:
				errs[i] = err
			case !r.Found:
				errs[i] = missing(i)
			default:
				values[i] = r.Value
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return values, nil
}
