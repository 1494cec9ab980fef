package correctabletest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/correctables/correctables/correctable"
)

// Cache is the level of the client-side cache: weaker than Eventual.
var Cache = correctable.NewLevel("cache", 50)

// MaxLag bounds a replica's lag, and so the writes a Cluster retains.
const MaxLag = 1024

// ErrInvalidConfig is returned by NewCluster and SetLag for bad input.
var ErrInvalidConfig = errors.New("correctabletest: invalid configuration")

// Replica names one replica of a Cluster.
type Replica int

// The replicas, weakest first.
const (
	CacheReplica Replica = iota
	BackupReplica
	PrimaryReplica
)

// String returns the replica's name.
func (r Replica) String() string {
	switch r {
	case CacheReplica:
		return "cache"
	case BackupReplica:
		return "backup"
	case PrimaryReplica:
		return "primary"
	default:
		return fmt.Sprintf("replica(%d)", int(r))
	}
}

// Level returns the consistency level of r's replies.
func (r Replica) Level() correctable.Level {
	switch r {
	case CacheReplica:
		return Cache
	case BackupReplica:
		return correctable.Eventual
	default:
		return correctable.Strong
	}
}

// Config configures a Cluster.
type Config struct {
	// WithCache adds a client-side cache replica, offered at level Cache.
	WithCache bool
	// CacheLatency, BackupLatency and PrimaryLatency are the round-trip
	// times of a request to each replica. Zero means no wait. Negative
	// values are invalid.
	CacheLatency, BackupLatency, PrimaryLatency time.Duration
	// Wait, if set, is called instead of sleeping for a replica's latency
	// before the replica executes a request. It must return promptly with
	// ctx's error once ctx ends. Tests use it to order replies.
	Wait func(ctx context.Context, r Replica) error
}

func (cfg Config) validate() error {
	for _, l := range []struct {
		name string
		d    time.Duration
	}{{"CacheLatency", cfg.CacheLatency}, {"BackupLatency", cfg.BackupLatency}, {"PrimaryLatency", cfg.PrimaryLatency}} {
		if l.d < 0 {
			return fmt.Errorf("%s %v is negative: %w", l.name, l.d, ErrInvalidConfig)
		}
	}
	return nil
}

// KV is the key-value state an operation runs on.
type KV interface {
	// Get returns the value of key, and whether it is set.
	Get(key string) (string, bool)
	// Put sets key to value.
	Put(key, value string)
	// Delete removes key.
	Delete(key string)
}

// Op is an operation: a deterministic function over a replica's state,
// returning a result of type T. It must not keep kv after it returns.
type Op[T any] func(kv KV) T

// Get returns the operation that reads key ("" if unset).
func Get(key string) Op[string] {
	return func(kv KV) string {
		v, _ := kv.Get(key)
		return v
	}
}

// write is one Put (or Delete, when del) in the primary's log.
type write struct {
	key, value string
	del        bool
}

// Cluster is a primary, a backup and optionally a cache, in memory. It is
// safe for concurrent use.
type Cluster struct {
	cfg Config

	mu   sync.Mutex
	base map[string]string // state before the retained log
	log  []write           // the latest writes, at most MaxLag
	lag  [3]int            // per Replica: latest writes not applied
	// folded counts the writes folded into base; with the applied part of
	// log it makes a replica's stamp (writes applied).
	folded uint64
}

// NewCluster returns an empty Cluster with every replica in sync.
func NewCluster(cfg Config) (*Cluster, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Cluster{cfg: cfg, base: map[string]string{}}, nil
}

// SetLag makes r miss the n latest writes (and keep missing them as new
// writes arrive) until SetLag(r, 0). The primary cannot lag; n is at most
// MaxLag.
func (c *Cluster) SetLag(r Replica, n int) error {
	if r != CacheReplica && r != BackupReplica {
		return fmt.Errorf("lag of %s: %w", r, ErrInvalidConfig)
	}
	if n < 0 || n > MaxLag {
		return fmt.Errorf("lag %d outside [0, %d]: %w", n, MaxLag, ErrInvalidConfig)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lag[r] = n
	return nil
}

// Put writes key=value at the primary, as a strong write would.
func (c *Cluster) Put(key, value string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.appendLocked(write{key: key, value: value})
}

func (c *Cluster) appendLocked(w write) {
	c.log = append(c.log, w)
	if len(c.log) > MaxLag {
		c.log[0].apply(c.base)
		c.log = c.log[1:]
		c.folded++
	}
}

func (w write) apply(m map[string]string) {
	if w.del {
		delete(m, w.key)
	} else {
		m[w.key] = w.value
	}
}

// exec runs op at replica r: on a scratch copy of r's state at a weak
// replica, applied at the primary. It returns the result and the number of
// writes r has applied (the view's stamp).
func exec[T any](c *Cluster, r Replica, op Op[T]) (T, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	applied := len(c.log) - min(c.lag[r], len(c.log))
	kv := &overlay{state: maps.Clone(c.base)}
	for _, w := range c.log[:applied] {
		w.apply(kv.state)
	}
	res := op(kv)
	if r == PrimaryReplica {
		for _, w := range kv.writes {
			c.appendLocked(w)
		}
		applied += len(kv.writes)
	}
	return res, c.folded + uint64(applied)
}

// overlay is the KV an operation runs on; it records writes.
type overlay struct {
	state  map[string]string
	writes []write
}

func (o *overlay) Get(key string) (string, bool) { v, ok := o.state[key]; return v, ok }
func (o *overlay) Put(key, value string) {
	o.state[key] = value
	o.writes = append(o.writes, write{key: key, value: value})
}
func (o *overlay) Delete(key string) {
	delete(o.state, key)
	o.writes = append(o.writes, write{key: key, del: true})
}

// wait holds a request to r for r's latency, or calls Config.Wait.
func (c *Cluster) wait(ctx context.Context, r Replica) error {
	if c.cfg.Wait != nil {
		return c.cfg.Wait(ctx, r)
	}
	d := [...]time.Duration{c.cfg.CacheLatency, c.cfg.BackupLatency, c.cfg.PrimaryLatency}[r]
	if d == 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// levels returns the levels the cluster offers, weakest first.
func (c *Cluster) levels() []correctable.Level {
	if c.cfg.WithCache {
		return []correctable.Level{Cache, correctable.Eventual, correctable.Strong}
	}
	return []correctable.Level{correctable.Eventual, correctable.Strong}
}

// replicaAt returns the replica serving level l.
func replicaAt(l correctable.Level) (Replica, error) {
	switch l {
	case Cache:
		return CacheReplica, nil
	case correctable.Eventual:
		return BackupReplica, nil
	case correctable.Strong:
		return PrimaryReplica, nil
	}
	return 0, fmt.Errorf("correctabletest: no replica serves level %s", l)
}
