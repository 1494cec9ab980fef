// Package redisbinding runs the store's operations (client.Op) on Redis, a
// primary with asynchronously replicated replicas, through
// github.com/redis/go-redis/v9, with incremental consistency (Correctables,
// OSDI'16, §5): a fast preliminary view and a final view that waits for
// more.
//
// What each level means on Redis, honestly: Redis replicates
// asynchronously, so nothing here is linearizable across a failover, and
// the final level is named for what it is rather than called strong.
//
//	level           reads (get)                  writes (everything else)
//	Eventual        a replica (Config.Replicas   the primary applied it and
//	                [0]): its copy, possibly     answered: the result is the
//	                behind the primary           primary's, but a failover
//	                                             before replication loses it
//	Primary         the primary: the latest      as Eventual, and WAIT
//	                state it acknowledged, as    confirmed that
//	                long as it stays primary     Config.WaitReplicas replicas
//	                                             received it (a later
//	                                             failover to one of them
//	                                             keeps it; Redis's WAIT still
//	                                             does not make the write
//	                                             strongly consistent)
//
// A write's final view is a payload-free confirmation of its preliminary
// one (WAIT returns only a count); if fewer than WaitReplicas replicas
// confirm within Config.WaitTimeout, the operation fails with
// client.ErrUnavailable, although the primary applied it. cas, incr,
// append and txn read their keys and write under WATCH (optimistic, retried
// on conflict); queues are Redis lists whose enqueue and dequeue are Lua
// scripts (atomic, reading only the list's head and length). Scan is not
// offered (Redis's SCAN gives no consistent ordered range).
package redisbinding

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/correctables/correctables/bindings/internal/kvop"
	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/correctable"
)

// Primary is the final level of the Redis binding: the primary's state;
// for writes, after WAIT confirmed Config.WaitReplicas replicas. It ranks
// between correctable.BoundedStaleness and correctable.Strong: stronger
// than any replica's view, not linearizable under failover.
var Primary = correctable.NewLevel("redis-primary", 550)

// Config configures a Binding.
type Config struct {
	// Primary is the primary's address (host:port). Required.
	Primary string
	// Replicas are the replicas' addresses; reads' preliminary views come
	// from the first. Without replicas, they come from the primary.
	Replicas []string
	// Prefix starts every Redis key the binding uses; default
	// "correctables:".
	Prefix string
	// WaitReplicas is how many replicas a write's final view waits for;
	// default len(Replicas).
	WaitReplicas int
	// WaitTimeout bounds the wait for them; default 2s.
	WaitTimeout time.Duration
	// RequestTimeout bounds each operation; default 5s. A server that does
	// not answer within it fails the operation with client.ErrUnavailable.
	RequestTimeout time.Duration
	// MaxRetries bounds the attempts of an operation whose WATCH saw a
	// concurrent write; default 64. Past it the operation fails with
	// client.ErrOverloaded.
	MaxRetries int
}

func (c *Config) validate() error {
	if c.Primary == "" {
		return fmt.Errorf("redisbinding: no primary: %w", client.ErrInvalidArgument)
	}
	if c.Prefix == "" {
		c.Prefix = "correctables:"
	}
	if c.WaitReplicas < 0 || c.WaitReplicas > len(c.Replicas) || c.WaitTimeout < 0 || c.RequestTimeout < 0 || c.MaxRetries < 0 {
		return fmt.Errorf("redisbinding: WaitReplicas outside [0, %d], or a negative timeout: %w", len(c.Replicas), client.ErrInvalidArgument)
	}
	if c.WaitReplicas == 0 {
		c.WaitReplicas = len(c.Replicas)
	}
	if c.WaitTimeout == 0 {
		c.WaitTimeout = 2 * time.Second
	}
	kvop.DefaultLimits(&c.RequestTimeout, &c.MaxRetries)
	return nil
}

// Binding is a correctable.Binding of client.Op on Redis. It is safe for
// concurrent use.
type Binding struct {
	cfg     Config
	primary *redis.Client
	replica *redis.Client // the primary's client when there are no replicas
}

var _ correctable.Binding[client.Op, client.Result] = (*Binding)(nil)

// New returns a Binding. It does not wait for the servers.
func New(cfg Config) (*Binding, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	b := &Binding{cfg: cfg, primary: redis.NewClient(&redis.Options{Addr: cfg.Primary, MaxRetries: 1})}
	b.replica = b.primary
	if len(cfg.Replicas) > 0 {
		b.replica = redis.NewClient(&redis.Options{Addr: cfg.Replicas[0], MaxRetries: 1})
	}
	return b, nil
}

// Close closes the connections.
func (b *Binding) Close() error {
	if b.replica != b.primary {
		return errors.Join(b.primary.Close(), b.replica.Close())
	}
	return b.primary.Close()
}

var levels = []correctable.Level{correctable.Eventual, Primary}

// Levels returns correctable.Eventual and Primary.
func (b *Binding) Levels() []correctable.Level { return levels }

var supported = []client.Kind{
	client.KindGet, client.KindPut, client.KindDelete, client.KindCAS, client.KindIncr,
	client.KindAppend, client.KindEnqueue, client.KindDequeue, client.KindTxn,
}

// Submit runs op at the requested levels; it implements correctable.Binding.
func (b *Binding) Submit(ctx context.Context, op client.Op, levels []correctable.Level, emit correctable.Emitter[client.Result]) error {
	if err := kvop.Check("redisbinding", op, supported...); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeoutCause(ctx, b.cfg.RequestTimeout, errTimeout)
	defer cancel()
	wantPrelim := levels[0] == correctable.Eventual
	wantFinal := levels[len(levels)-1] == Primary
	var err error
	if op.Kind() == client.KindGet {
		err = b.get(ctx, op, wantPrelim, wantFinal, emit)
	} else {
		err = b.write(ctx, op, wantPrelim, wantFinal, emit)
	}
	if err != nil && !errors.Is(err, correctable.ErrClosed) {
		return b.mapErr(ctx, op, err)
	}
	return nil
}

var errTimeout = errors.New("request timeout")

func (b *Binding) mapErr(ctx context.Context, op client.Op, err error) error {
	cause := context.Cause(ctx)
	var nerr net.Error
	switch {
	case errors.Is(cause, errTimeout):
		return fmt.Errorf("redisbinding: %v: no answer within %v: %w", op, b.cfg.RequestTimeout, client.ErrUnavailable)
	case ctx.Err() != nil:
		return fmt.Errorf("redisbinding: %v: %w", op, cause)
	case errors.Is(err, client.ErrUnavailable), errors.Is(err, client.ErrOverloaded), errors.Is(err, client.ErrInvalidArgument):
		return fmt.Errorf("redisbinding: %v: %w", op, err)
	case errors.As(err, &nerr), errors.Is(err, redis.ErrClosed):
		return fmt.Errorf("redisbinding: %v: %w: %v", op, client.ErrUnavailable, err)
	}
	return fmt.Errorf("redisbinding: %v: %w: %v", op, client.ErrServer, err)
}

func (b *Binding) key(k string) string   { return b.cfg.Prefix + "k:" + k }
func (b *Binding) queue(q string) string { return b.cfg.Prefix + "q:" + q }
func (b *Binding) seq(q string) string   { return b.cfg.Prefix + "s:" + q }

func getResult(v string, err error) (client.Result, error) {
	if errors.Is(err, redis.Nil) {
		return client.Result{}, nil
	}
	if err != nil {
		return client.Result{}, err
	}
	return client.Result{Found: true, Value: []byte(v)}, nil
}

// get reads from the replica and the primary at once; the replica's view
// is delivered first (or skipped if it failed and the primary's is
// wanted).
func (b *Binding) get(ctx context.Context, op client.Op, wantPrelim, wantFinal bool, emit correctable.Emitter[client.Result]) error {
	type outcome struct {
		res client.Result
		err error
	}
	prelim, final := make(chan outcome, 1), make(chan outcome, 1)
	if wantPrelim {
		go func() { r, err := getResult(b.replica.Get(ctx, b.key(op.Key())).Result()); prelim <- outcome{r, err} }()
	}
	if wantFinal {
		go func() { r, err := getResult(b.primary.Get(ctx, b.key(op.Key())).Result()); final <- outcome{r, err} }()
	}
	if wantPrelim {
		p := <-prelim
		if p.err != nil && !wantFinal {
			return p.err
		}
		if p.err == nil {
			if err := emit(correctable.View[client.Result]{Value: p.res, Level: correctable.Eventual}); err != nil {
				return err
			}
		}
	}
	if !wantFinal {
		return nil
	}
	f := <-final
	if f.err != nil {
		return f.err
	}
	return emit(correctable.View[client.Result]{Value: f.res, Level: Primary})
}

// write runs op on one connection to the primary, delivers the primary's
// result, then waits on that connection for the replicas (WAIT counts the
// connection's own writes).
func (b *Binding) write(ctx context.Context, op client.Op, wantPrelim, wantFinal bool, emit correctable.Emitter[client.Result]) error {
	confirm := func(c waiter, res client.Result) error {
		if wantPrelim {
			if err := emit(correctable.View[client.Result]{Value: res, Level: correctable.Eventual}); err != nil {
				return err
			}
		}
		if !wantFinal {
			return nil
		}
		if b.cfg.WaitReplicas > 0 {
			n, err := c.Wait(ctx, b.cfg.WaitReplicas, b.cfg.WaitTimeout).Result()
			if err != nil {
				return err
			}
			if int(n) < b.cfg.WaitReplicas {
				return fmt.Errorf("applied at the primary, but %d of the %d replicas asked for confirmed it within %v: %w",
					n, b.cfg.WaitReplicas, b.cfg.WaitTimeout, client.ErrUnavailable)
			}
		}
		return emit(correctable.View[client.Result]{Value: res, Level: Primary, Confirmed: wantPrelim})
	}
	switch op.Kind() {
	case client.KindPut, client.KindDelete, client.KindEnqueue, client.KindDequeue:
		conn := b.primary.Conn()
		defer conn.Close()
		res, err := b.single(ctx, conn, op)
		if err != nil {
			return err
		}
		return confirm(conn, res)
	}
	keys := kvop.Keys(op)
	rkeys := make([]string, len(keys))
	for i, k := range keys {
		rkeys[i] = b.key(k)
	}
	for range b.cfg.MaxRetries {
		err := b.primary.Watch(ctx, func(tx *redis.Tx) error {
			state := make(map[string]kvop.Entry, len(keys))
			for i, k := range keys {
				r, err := getResult(tx.Get(ctx, rkeys[i]).Result())
				if err != nil {
					return err
				}
				state[k] = kvop.Entry{Value: r.Value, Found: r.Found}
			}
			res, writes := kvop.Apply(op, state)
			if len(writes) > 0 {
				_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
					for _, w := range writes {
						if w.Delete {
							p.Del(ctx, b.key(w.Key))
						} else {
							p.Set(ctx, b.key(w.Key), w.Value, 0)
						}
					}
					return nil
				})
				if err != nil {
					return err
				}
			}
			return confirm(tx, res)
		}, rkeys...)
		if !errors.Is(err, redis.TxFailedErr) {
			return err
		}
	}
	return fmt.Errorf("%d attempts lost to concurrent writes: %w", b.cfg.MaxRetries, client.ErrOverloaded)
}

// waiter is a connection that can WAIT for its own writes (a redis.Conn or
// a redis.Tx).
type waiter interface {
	Wait(ctx context.Context, numReplicas int, timeout time.Duration) *redis.IntCmd
}

// The queue scripts: an item is stored as "seq:item", seq from a counter.
var (
	enqueueScript = redis.NewScript(`
local s = redis.call('INCR', KEYS[1])
local n = redis.call('RPUSH', KEYS[2], s .. ':' .. ARGV[1])
return {s, n}`)
	dequeueScript = redis.NewScript(`
local v = redis.call('LPOP', KEYS[1])
if not v then return {} end
return {v, redis.call('LLEN', KEYS[1])}`)
)

// single runs a write that is one command (or one script) on conn.
func (b *Binding) single(ctx context.Context, conn *redis.Conn, op client.Op) (client.Result, error) {
	switch op.Kind() {
	case client.KindPut:
		return getResult(conn.SetArgs(ctx, b.key(op.Key()), op.Value(), redis.SetArgs{Get: true}).Result())
	case client.KindDelete:
		return getResult(conn.GetDel(ctx, b.key(op.Key())).Result())
	case client.KindEnqueue:
		v, err := enqueueScript.Run(ctx, conn, []string{b.seq(op.Key()), b.queue(op.Key())}, op.Value()).Int64Slice()
		if err != nil {
			return client.Result{}, err
		}
		return client.Result{Int: v[0], Len: v[1]}, nil
	case client.KindDequeue:
		v, err := dequeueScript.Run(ctx, conn, []string{b.queue(op.Key())}).Slice()
		if err != nil || len(v) == 0 {
			return client.Result{}, err
		}
		item, _ := v[0].(string)
		n, _ := v[1].(int64)
		seqStr, value, ok := bytes.Cut([]byte(item), []byte(":"))
		seq, perr := strconv.ParseInt(string(seqStr), 10, 64)
		if !ok || perr != nil {
			return client.Result{}, fmt.Errorf("queue %q holds %q, not seq:item: %w", op.Key(), item, client.ErrServer)
		}
		return client.Result{OK: true, Value: value, Int: seq, Len: n}, nil
	}
	return client.Result{}, fmt.Errorf("%v: %w", op, client.ErrUnimplemented)
}
