// Package etcdbinding runs the store's operations (client.Op) on an etcd
// cluster through go.etcd.io/etcd/client/v3, with incremental consistency
// (Correctables, OSDI'16, §5): each operation returns a preliminary view,
// the operation simulated on the nearest member's local state with
// serializable reads, and a final view, linearizable.
//
//	level       what it is on etcd
//	Eventual    serializable reads at the nearest member (Config.Nearest):
//	            its applied state, possibly behind the leader, not
//	            monotonic across members; a write is simulated there
//	            (its result predicted), not applied.
//	Strong      linearizable: reads go through etcd's ReadIndex; writes
//	            are etcd transactions (put and delete directly; cas, incr,
//	            append and txn as a read, then a transaction guarded by
//	            the mod revisions read, retried on conflict; the queue's
//	            enqueue and dequeue likewise).
//
// Both views are requested at once; the preliminary one normally arrives
// first and the final one is delivered after it. If the nearest member
// fails but the cluster answers, the preliminary view is skipped and the
// final view still arrives.
//
// Keys live under Config.Prefix + "k/", queues under Config.Prefix + "q/":
// a queue is one key per item, ordered by etcd's create revision (the item's
// sequence number, Result.Int); dequeue reads only the oldest item (a range
// sorted by create revision with limit 1) and the count, never the whole
// queue. A dequeue that lost a race to another retries on one of the eight
// oldest items, so the queue is FIFO for one dequeuer at a time and close
// to FIFO under contention; every item is taken exactly once.
package etcdbinding

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/correctables/correctables/bindings/internal/kvop"
	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/correctable"
)

// Config configures a Binding.
type Config struct {
	// Endpoints are the cluster's client URLs (or host:port). Required.
	Endpoints []string
	// Nearest is the endpoint preliminary views read from; default
	// Endpoints[0].
	Nearest string
	// Prefix starts every key the binding writes; default "correctables/".
	Prefix string
	// RequestTimeout bounds each request to etcd: a cluster that does not
	// answer within it fails the operation with client.ErrUnavailable
	// rather than leave it waiting. Default 5s.
	RequestTimeout time.Duration
	// MaxRetries bounds the attempts of an operation whose guarded
	// transaction lost to a concurrent write; default 64. Past it the
	// operation fails with client.ErrOverloaded.
	MaxRetries int
}

func (c *Config) validate() error {
	if len(c.Endpoints) == 0 {
		return fmt.Errorf("etcdbinding: no endpoints: %w", client.ErrInvalidArgument)
	}
	if c.Nearest == "" {
		c.Nearest = c.Endpoints[0]
	}
	if c.Prefix == "" {
		c.Prefix = "correctables/"
	}
	if c.RequestTimeout < 0 || c.MaxRetries < 0 {
		return fmt.Errorf("etcdbinding: negative RequestTimeout or MaxRetries: %w", client.ErrInvalidArgument)
	}
	kvop.DefaultLimits(&c.RequestTimeout, &c.MaxRetries)
	return nil
}

// Binding is a correctable.Binding of client.Op on etcd. It is safe for
// concurrent use.
type Binding struct {
	cfg  Config
	near *clientv3.Client // Nearest only: serializable reads
	all  *clientv3.Client // every endpoint: linearizable reads, writes
}

var _ correctable.Binding[client.Op, client.Result] = (*Binding)(nil)

// New returns a Binding. It does not wait for the cluster: an unreachable
// cluster fails each operation after Config.RequestTimeout.
func New(cfg Config) (*Binding, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	near, err := clientv3.New(clientv3.Config{Endpoints: []string{cfg.Nearest}, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("etcdbinding: %w: %w", client.ErrInvalidArgument, err)
	}
	all, err := clientv3.New(clientv3.Config{Endpoints: cfg.Endpoints, Logger: zap.NewNop()})
	if err != nil {
		near.Close()
		return nil, fmt.Errorf("etcdbinding: %w: %w", client.ErrInvalidArgument, err)
	}
	return &Binding{cfg: cfg, near: near, all: all}, nil
}

// Close closes the connections; operations in flight fail.
func (b *Binding) Close() error {
	return errors.Join(b.near.Close(), b.all.Close())
}

var levels = []correctable.Level{correctable.Eventual, correctable.Strong}

// Levels returns correctable.Eventual and correctable.Strong.
func (b *Binding) Levels() []correctable.Level { return levels }

var supported = []client.Kind{
	client.KindGet, client.KindPut, client.KindDelete, client.KindCAS, client.KindIncr,
	client.KindAppend, client.KindScan, client.KindEnqueue, client.KindDequeue, client.KindTxn,
}

type outcome struct {
	res client.Result
	rev int64
	err error
}

// Submit runs op at the requested levels; it implements correctable.Binding.
func (b *Binding) Submit(ctx context.Context, op client.Op, levels []correctable.Level, emit correctable.Emitter[client.Result]) error {
	if err := kvop.Check("etcdbinding", op, supported...); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wantPrelim := levels[0] == correctable.Eventual
	wantFinal := levels[len(levels)-1] == correctable.Strong
	prelim := make(chan outcome, 1)
	final := make(chan outcome, 1)
	if wantPrelim {
		go func() { r, rev, err := b.simulate(ctx, op); prelim <- outcome{r, rev, err} }()
	}
	if wantFinal {
		go func() { r, rev, err := b.execute(ctx, op); final <- outcome{r, rev, err} }()
	}
	// Both goroutines end on their own: each sends once on a buffered
	// channel, and cancel (deferred) ends their requests.
	if wantPrelim {
		p := <-prelim
		switch {
		case p.err != nil && !wantFinal:
			return b.mapErr(ctx, op, p.err)
		case p.err == nil:
			if err := emit(correctable.View[client.Result]{Value: p.res, Level: correctable.Eventual, Stamp: p.rev}); err != nil {
				return stopErr(err)
			}
		}
		// A failed preliminary view is skipped: the final one may still come.
	}
	if !wantFinal {
		return nil
	}
	f := <-final
	if f.err != nil {
		return b.mapErr(ctx, op, f.err)
	}
	return stopErr(emit(correctable.View[client.Result]{Value: f.res, Level: correctable.Strong, Stamp: f.rev}))
}

// stopErr: an emitter's ErrClosed means the invocation ended, not a failure.
func stopErr(err error) error {
	if errors.Is(err, correctable.ErrClosed) {
		return nil
	}
	return err
}

// mapErr maps an etcd client error to the client package's sentinels.
func (b *Binding) mapErr(ctx context.Context, op client.Op, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("etcdbinding: %v: %w", op, context.Cause(ctx))
	}
	if errors.Is(err, client.ErrOverloaded) {
		return fmt.Errorf("etcdbinding: %v: %w", op, err)
	}
	code := status.Code(err)
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		code = ee.Code()
	}
	var sentinel error
	switch {
	case errors.Is(err, context.DeadlineExceeded) || code == codes.DeadlineExceeded || code == codes.Unavailable:
		return fmt.Errorf("etcdbinding: %v: no answer from %v within %v: %w: %v", op, b.cfg.Endpoints, b.cfg.RequestTimeout, client.ErrUnavailable, err)
	case code == codes.InvalidArgument || code == codes.OutOfRange || code == codes.FailedPrecondition:
		sentinel = client.ErrInvalidArgument
	case code == codes.ResourceExhausted:
		sentinel = client.ErrOverloaded
	case code == codes.Unimplemented:
		sentinel = client.ErrUnimplemented
	default:
		sentinel = client.ErrServer
	}
	return fmt.Errorf("etcdbinding: %v: %w: %v", op, sentinel, err)
}

func (b *Binding) key(k string) string { return b.cfg.Prefix + "k/" + k }

// queue returns the prefix of a queue's items (the name escaped, so that
// one queue's prefix never covers another's items).
func (b *Binding) queue(q string) string { return b.cfg.Prefix + "q/" + url.PathEscape(q) + "/" }

// request returns the context of one request to etcd.
func (b *Binding) request(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, b.cfg.RequestTimeout)
}

// read reads keys in one transaction: serializable at the nearest member,
// or linearizable. It returns their state, their mod revisions (0 if
// absent) and the store's revision.
func (b *Binding) read(ctx context.Context, keys []string, serializable bool) (map[string]kvop.Entry, map[string]int64, int64, error) {
	cli := b.all
	var opts []clientv3.OpOption
	if serializable {
		cli, opts = b.near, []clientv3.OpOption{clientv3.WithSerializable()}
	}
	ops := make([]clientv3.Op, len(keys))
	for i, k := range keys {
		ops[i] = clientv3.OpGet(b.key(k), opts...)
	}
	rctx, cancel := b.request(ctx)
	defer cancel()
	resp, err := cli.Txn(rctx).Then(ops...).Commit()
	if err != nil {
		return nil, nil, 0, err
	}
	state := make(map[string]kvop.Entry, len(keys))
	revs := make(map[string]int64, len(keys))
	for i, k := range keys {
		state[k] = kvop.Entry{}
		if kvs := resp.Responses[i].GetResponseRange().Kvs; len(kvs) > 0 {
			state[k] = kvop.Entry{Value: kvs[0].Value, Found: true}
			revs[k] = kvs[0].ModRevision
		}
	}
	return state, revs, resp.Header.Revision, nil
}

// simulate returns op's result on the nearest member's state, read with
// serializable requests, without changing it.
func (b *Binding) simulate(ctx context.Context, op client.Op) (client.Result, int64, error) {
	switch op.Kind() {
	case client.KindScan:
		return b.scan(ctx, op, true)
	case client.KindEnqueue:
		n, rev, err := b.count(ctx, b.near, op.Key(), true)
		return client.Result{Int: rev + 1, Len: n + 1}, rev, err
	case client.KindDequeue:
		kv, n, rev, err := b.head(ctx, b.near, op.Key(), true)
		if err != nil || kv == nil {
			return client.Result{}, rev, err
		}
		return client.Result{OK: true, Value: kv.Value, Int: kv.CreateRevision, Len: n - 1}, rev, nil
	}
	state, _, rev, err := b.read(ctx, kvop.Keys(op), true)
	if err != nil {
		return client.Result{}, 0, err
	}
	res, _ := kvop.Apply(op, state)
	return res, rev, nil
}

// execute runs op linearizably.
func (b *Binding) execute(ctx context.Context, op client.Op) (client.Result, int64, error) {
	switch op.Kind() {
	case client.KindGet:
		state, _, rev, err := b.read(ctx, []string{op.Key()}, false)
		return client.Result{Found: state[op.Key()].Found, Value: state[op.Key()].Value}, rev, err
	case client.KindScan:
		return b.scan(ctx, op, false)
	case client.KindPut:
		rctx, cancel := b.request(ctx)
		defer cancel()
		resp, err := b.all.Put(rctx, b.key(op.Key()), string(op.Value()), clientv3.WithPrevKV())
		if err != nil {
			return client.Result{}, 0, err
		}
		if resp.PrevKv == nil {
			return client.Result{}, resp.Header.Revision, nil
		}
		return client.Result{Found: true, Value: resp.PrevKv.Value}, resp.Header.Revision, nil
	case client.KindDelete:
		rctx, cancel := b.request(ctx)
		defer cancel()
		resp, err := b.all.Delete(rctx, b.key(op.Key()), clientv3.WithPrevKV())
		if err != nil || len(resp.PrevKvs) == 0 {
			return client.Result{}, revOf(resp), err
		}
		return client.Result{Found: true, Value: resp.PrevKvs[0].Value}, resp.Header.Revision, nil
	case client.KindEnqueue:
		return b.enqueue(ctx, op)
	case client.KindDequeue:
		return b.dequeue(ctx, op)
	}
	return b.readModifyWrite(ctx, op)
}

func revOf(resp *clientv3.DeleteResponse) int64 {
	if resp == nil {
		return 0
	}
	return resp.Header.Revision
}

// readModifyWrite reads op's keys, applies op, and commits its writes in a
// transaction guarded by the mod revisions it read; it retries when a
// concurrent write got there first.
func (b *Binding) readModifyWrite(ctx context.Context, op client.Op) (client.Result, int64, error) {
	keys := kvop.Keys(op)
	for range b.cfg.MaxRetries {
		state, revs, rev, err := b.read(ctx, keys, false)
		if err != nil {
			return client.Result{}, 0, err
		}
		res, writes := kvop.Apply(op, state)
		if len(writes) == 0 {
			return res, rev, nil // the read was linearizable: so is the result
		}
		cmps := make([]clientv3.Cmp, len(keys))
		for i, k := range keys {
			cmps[i] = clientv3.Compare(clientv3.ModRevision(b.key(k)), "=", revs[k])
		}
		puts := make([]clientv3.Op, len(writes))
		for i, w := range writes {
			if w.Delete {
				puts[i] = clientv3.OpDelete(b.key(w.Key))
			} else {
				puts[i] = clientv3.OpPut(b.key(w.Key), string(w.Value))
			}
		}
		rctx, cancel := b.request(ctx)
		resp, err := b.all.Txn(rctx).If(cmps...).Then(puts...).Commit()
		cancel()
		if err != nil {
			return client.Result{}, 0, err
		}
		if resp.Succeeded {
			return res, resp.Header.Revision, nil
		}
	}
	return client.Result{}, 0, fmt.Errorf("%d attempts lost to concurrent writes: %w", b.cfg.MaxRetries, client.ErrOverloaded)
}

func (b *Binding) scan(ctx context.Context, op client.Op, serializable bool) (client.Result, int64, error) {
	limit := op.Limit()
	if limit == 0 {
		limit = kvop.MaxScan
	}
	cli := b.all
	opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithLimit(int64(limit)), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend)}
	if serializable {
		cli, opts = b.near, append(opts, clientv3.WithSerializable())
	}
	rctx, cancel := b.request(ctx)
	defer cancel()
	resp, err := cli.Get(rctx, b.key(op.Key()), opts...)
	if err != nil {
		return client.Result{}, 0, err
	}
	r := client.Result{OK: !resp.More}
	for _, kv := range resp.Kvs {
		r.Items = append(r.Items, client.KV{Key: strings.TrimPrefix(string(kv.Key), b.key("")), Value: kv.Value})
	}
	return r, resp.Header.Revision, nil
}

// count returns the length of queue q.
func (b *Binding) count(ctx context.Context, cli *clientv3.Client, q string, serializable bool) (int64, int64, error) {
	opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithCountOnly()}
	if serializable {
		opts = append(opts, clientv3.WithSerializable())
	}
	rctx, cancel := b.request(ctx)
	defer cancel()
	resp, err := cli.Get(rctx, b.queue(q), opts...)
	if err != nil {
		return 0, 0, err
	}
	return resp.Count, resp.Header.Revision, nil
}

// head returns what a dequeue of q would take: the oldest item (nil for an
// empty queue) and the queue's length, reading only that item (a range with
// limit 1 still reports the count of the whole range).
func (b *Binding) head(ctx context.Context, cli *clientv3.Client, q string, serializable bool) (*mvccpb.KeyValue, int64, int64, error) {
	return b.oldest(ctx, cli, q, 1, serializable)
}

// oldest is head choosing among the window oldest items at random.
func (b *Binding) oldest(ctx context.Context, cli *clientv3.Client, q string, window int64, serializable bool) (*mvccpb.KeyValue, int64, int64, error) {
	opts := append(clientv3.WithFirstCreate(), clientv3.WithLimit(window))
	if serializable {
		opts = append(opts, clientv3.WithSerializable())
	}
	rctx, cancel := b.request(ctx)
	defer cancel()
	resp, err := cli.Get(rctx, b.queue(q), opts...)
	if err != nil {
		return nil, 0, 0, err
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, resp.Header.Revision, nil
	}
	if len(resp.Kvs) > 1 {
		// A retry: leave the head to the newcomers.
		return resp.Kvs[1+rand.IntN(len(resp.Kvs)-1)], resp.Count, resp.Header.Revision, nil
	}
	return resp.Kvs[0], resp.Count, resp.Header.Revision, nil
}

// maxWindow bounds the items a retried dequeue chooses from.
const maxWindow = 8

func (b *Binding) enqueue(ctx context.Context, op client.Op) (client.Result, int64, error) {
	var id [12]byte
	if _, err := crand.Read(id[:]); err != nil {
		return client.Result{}, 0, err
	}
	k := b.queue(op.Key()) + hex.EncodeToString(id[:])
	rctx, cancel := b.request(ctx)
	defer cancel()
	resp, err := b.all.Txn(rctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, string(op.Value())), clientv3.OpGet(b.queue(op.Key()), clientv3.WithPrefix(), clientv3.WithCountOnly())).Commit()
	if err != nil {
		return client.Result{}, 0, err
	}
	if !resp.Succeeded {
		return client.Result{}, 0, fmt.Errorf("enqueue: item key %s already exists: %w", k, client.ErrServer)
	}
	n := resp.Responses[1].GetResponseRange().Count
	return client.Result{Int: resp.Header.Revision, Len: n}, resp.Header.Revision, nil
}

// dequeue takes the oldest item: it reads it (linearizably), then deletes it
// in a transaction guarded by its mod revision, retrying when another
// dequeue took it first. A retry takes one of the few items after the head
// (up to maxWindow), at random, so that concurrent dequeues stop colliding on the
// head: alone, a dequeue is FIFO; under contention, close to it, and each
// item is still taken exactly once.
func (b *Binding) dequeue(ctx context.Context, op client.Op) (client.Result, int64, error) {
	for attempt := range b.cfg.MaxRetries {
		window := int64(1)
		if attempt > 0 {
			window = maxWindow
		}
		kv, _, rev, err := b.oldest(ctx, b.all, op.Key(), window, false)
		if err != nil || kv == nil {
			return client.Result{}, rev, err
		}
		k := string(kv.Key)
		rctx, cancel := b.request(ctx)
		tr, err := b.all.Txn(rctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", kv.ModRevision)).
			Then(clientv3.OpDelete(k), clientv3.OpGet(b.queue(op.Key()), clientv3.WithPrefix(), clientv3.WithCountOnly())).Commit()
		cancel()
		if err != nil {
			return client.Result{}, 0, err
		}
		if tr.Succeeded {
			n := tr.Responses[1].GetResponseRange().Count
			return client.Result{OK: true, Value: kv.Value, Int: kv.CreateRevision, Len: n}, tr.Header.Revision, nil
		}
	}
	return client.Result{}, 0, fmt.Errorf("dequeue: %d attempts lost to concurrent dequeues: %w", b.cfg.MaxRetries, client.ErrOverloaded)
}
