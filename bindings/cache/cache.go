// Package cache wraps any binding of the store's operations (client.Op)
// with a bounded client-side cache, the "causal consistency and caching"
// binding of Correctables (OSDI'16) §5.2: a first view from the cache, very
// fast and possibly stale, then the wrapped binding's views.
//
//	level   what it is
//	cache   this process's cache: the value this Binding last read or
//	        wrote for the key (at the wrapped binding's strongest view
//	        seen), possibly stale with respect to other clients' writes
//	...     the wrapped binding's levels, unchanged
//
// The cache is write-through: a write goes to the wrapped binding, and its
// keys are dropped from the cache when it is submitted and, for a put,
// set to the written value once its final view arrives without error. A
// get's strongest view refills the cache. Invoking with only the cache
// level (correctable.InvokeWeak) answers from the cache when it holds the
// key, else from the wrapped binding's weakest level (disconnected
// operation); invoking without it (correctable.InvokeStrong) bypasses the
// cache for reading. A get the cache does not hold, and any write, skip the
// cache view: they have nothing to show there.
package cache

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/correctables/correctables/bindings/internal/kvop"
	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/correctable"
)

// Level is the cache's level: weaker than correctable.Eventual.
var Level = correctable.NewLevel("cache", 50)

// DefaultSize is the number of keys a cache holds by default.
const DefaultSize = 1024

// Binding is a cache in front of another binding. It is safe for concurrent
// use.
type Binding struct {
	inner  correctable.Binding[client.Op, client.Result]
	levels []correctable.Level
	size   int

	mu    sync.Mutex
	order *list.List // of *entry, most recently used first
	keys  map[string]*list.Element
}

type entry struct {
	key   string
	value []byte
}

var _ correctable.Binding[client.Op, client.Result] = (*Binding)(nil)

// New returns a cache of at most size keys (DefaultSize if 0) in front of
// inner, whose weakest level must be stronger than Level.
func New(inner correctable.Binding[client.Op, client.Result], size int) (*Binding, error) {
	if size < 0 {
		return nil, fmt.Errorf("cache: size %d: %w", size, client.ErrInvalidArgument)
	}
	if size == 0 {
		size = DefaultSize
	}
	ls := inner.Levels()
	if len(ls) == 0 || ls[0].Compare(Level) <= 0 {
		return nil, fmt.Errorf("cache: the wrapped binding's levels %v do not all rank above %s: %w", ls, Level, client.ErrInvalidArgument)
	}
	return &Binding{
		inner:  inner,
		levels: append([]correctable.Level{Level}, ls...),
		size:   size,
		order:  list.New(),
		keys:   map[string]*list.Element{},
	}, nil
}

// Levels returns Level, then the wrapped binding's levels.
func (b *Binding) Levels() []correctable.Level { return b.levels }

// Len returns the number of keys cached.
func (b *Binding) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.order.Len()
}

func (b *Binding) lookup(key string) ([]byte, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.keys[key]
	if !ok {
		return nil, false
	}
	b.order.MoveToFront(e)
	return e.Value.(*entry).value, true
}

// store caches value at key (found = false: the key is absent, which is
// cached too), evicting the least recently used key past the bound.
func (b *Binding) store(key string, value []byte, found bool) {
	if !found {
		value = nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if e, ok := b.keys[key]; ok {
		e.Value.(*entry).value = slices.Clone(value)
		b.order.MoveToFront(e)
		return
	}
	b.keys[key] = b.order.PushFront(&entry{key: key, value: slices.Clone(value)})
	if b.order.Len() > b.size {
		last := b.order.Back()
		b.order.Remove(last)
		delete(b.keys, last.Value.(*entry).key)
	}
}

func (b *Binding) drop(keys []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, k := range keys {
		if e, ok := b.keys[k]; ok {
			b.order.Remove(e)
			delete(b.keys, k)
		}
	}
}

// Submit runs op at the requested levels; it implements correctable.Binding.
func (b *Binding) Submit(ctx context.Context, op client.Op, levels []correctable.Level, emit correctable.Emitter[client.Result]) error {
	if op.Kind() == 0 {
		return fmt.Errorf("cache: the zero Op: %w", client.ErrInvalidArgument)
	}
	isGet := op.Kind() == client.KindGet
	if !isGet {
		b.drop(kvop.Keys(op))
	}
	inner := levels
	if levels[0] == Level {
		inner = levels[1:]
		if isGet {
			if v, ok := b.lookup(op.Key()); ok {
				view := correctable.View[client.Result]{Value: client.Result{Found: v != nil, Value: v}, Level: Level}
				if err := emit(view); err != nil || len(inner) == 0 {
					return stopErr(err)
				}
			}
		}
		if len(inner) == 0 {
			// Only the cache was asked for, and it cannot answer: the
			// wrapped binding's weakest level answers, shown at the
			// cache's level.
			inner = b.levels[1:2]
			return b.forward(ctx, op, inner, func(v correctable.View[client.Result]) error {
				v.Level = Level
				return emit(v)
			})
		}
	}
	return b.forward(ctx, op, inner, emit)
}

// forward runs op on the wrapped binding and updates the cache from its
// strongest view.
func (b *Binding) forward(ctx context.Context, op client.Op, levels []correctable.Level, emit correctable.Emitter[client.Result]) error {
	last := levels[len(levels)-1]
	var prev client.Result
	err := b.inner.Submit(ctx, op, levels, func(v correctable.View[client.Result]) error {
		if v.Confirmed {
			v.Value = prev // the wrapped binding's previous view, for the cache
		}
		prev = v.Value
		if v.Level == last && v.Value.Err == nil {
			switch op.Kind() {
			case client.KindGet:
				b.store(op.Key(), v.Value.Value, v.Value.Found)
			case client.KindPut:
				b.store(op.Key(), op.Value(), true)
			}
		}
		return emit(v)
	})
	return stopErr(err)
}

func stopErr(err error) error {
	if errors.Is(err, correctable.ErrClosed) {
		return nil
	}
	return err
}
