// Package anystore opens the example applications' store.Binding on any of
// the stores the bindings directory supports, chosen by name: our store
// (the client), etcd, ZooKeeper or Redis, optionally behind a client-side
// cache. The applications (ticket selling, ad serving, the timeline) run
// on each unchanged: they see only the correctable.Binding (Correctables
// §5: the binding draws the line between the application and the store).
package anystore

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/correctables/correctables/bindings/cache"
	"github.com/correctables/correctables/bindings/etcdbinding"
	"github.com/correctables/correctables/bindings/redisbinding"
	"github.com/correctables/correctables/bindings/zkbinding"
	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/correctable"
	"github.com/correctables/correctables/examples/store"
)

// Stores are the names Open accepts.
var Stores = []string{"ours", "etcd", "zookeeper", "redis"}

// Config says which store to open.
type Config struct {
	// Store is one of Stores.
	Store string
	// Endpoints: our store's replicas, etcd's members or ZooKeeper's
	// servers (host:port); for Redis the primary first, then its
	// replicas. The first is the nearest: preliminary views come from it.
	Endpoints []string
	// Cache, if positive, puts a client-side cache of that many keys in
	// front of the store.
	Cache int
}

// Open connects to the store and returns the binding of the store's
// operations, and what closes it.
func Open(ctx context.Context, cfg Config) (correctable.Binding[client.Op, client.Result], io.Closer, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, nil, errors.New("anystore: no endpoints")
	}
	var (
		b      correctable.Binding[client.Op, client.Result]
		closer io.Closer
	)
	switch cfg.Store {
	case "ours":
		c, err := client.Dial(ctx, cfg.Endpoints)
		if err != nil {
			return nil, nil, err
		}
		b, closer = c, c
	case "etcd":
		e, err := etcdbinding.New(etcdbinding.Config{Endpoints: cfg.Endpoints})
		if err != nil {
			return nil, nil, err
		}
		b, closer = e, e
	case "zookeeper":
		z, err := zkbinding.New(zkbinding.Config{Servers: cfg.Endpoints})
		if err != nil {
			return nil, nil, err
		}
		b, closer = z, z
	case "redis":
		r, err := redisbinding.New(redisbinding.Config{Primary: cfg.Endpoints[0], Replicas: cfg.Endpoints[1:]})
		if err != nil {
			return nil, nil, err
		}
		b, closer = r, r
	default:
		return nil, nil, fmt.Errorf("anystore: store %q: want one of %v", cfg.Store, Stores)
	}
	if cfg.Cache > 0 {
		cb, err := cache.New(b, cfg.Cache)
		if err != nil {
			closer.Close()
			return nil, nil, err
		}
		b = cb
	}
	return b, closer, nil
}

// Ops adapts a binding of the store's operations to the applications'
// store.Binding.
func Ops(b correctable.Binding[client.Op, client.Result]) store.Binding { return ops{b} }

type ops struct {
	b correctable.Binding[client.Op, client.Result]
}

func (o ops) Levels() []correctable.Level { return o.b.Levels() }

func (o ops) Submit(ctx context.Context, op store.Op, levels []correctable.Level, emit correctable.Emitter[store.Result]) error {
	var cop client.Op
	switch op.Kind {
	case store.KindGet:
		cop = client.Get(op.Key)
	case store.KindPut:
		cop = client.Put(op.Key, op.Value)
	case store.KindEnqueue:
		cop = client.Enqueue(op.Key, op.Value)
	case store.KindDequeue:
		cop = client.Dequeue(op.Key)
	case store.KindAppend:
		cop = client.Append(op.Key, op.Value)
	default:
		return fmt.Errorf("anystore: unknown operation kind %d", op.Kind)
	}
	return o.b.Submit(ctx, cop, levels, func(v correctable.View[client.Result]) error {
		r := v.Value
		return emit(correctable.View[store.Result]{
			Value: store.Result{Found: r.Found, OK: r.OK, Value: r.Value, Left: r.Len, Err: r.Err},
			Level: v.Level, Confirmed: v.Confirmed, Stamp: v.Stamp,
		})
	})
}
