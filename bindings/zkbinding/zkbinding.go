// Package zkbinding runs the store's operations (client.Op) on a
// ZooKeeper ensemble through github.com/go-zookeeper/zk, with incremental
// consistency (Correctables, OSDI'16, §5.2 and §6.2.2): a preliminary view
// from the server the session is connected to, and a final view after
// ZooKeeper's coordination.
//
//	level          what it is on ZooKeeper
//	ReadMyWrites   the connected server's state, read without sync: it may
//	               lag the leader, but within the Binding's one session it
//	               includes the session's own writes and never goes back
//	               (ZooKeeper's session guarantees); a write is simulated
//	               there (its result predicted), not applied.
//	Strong         reads after sync (the connected server first catches up
//	               with the leader); writes are ZooKeeper writes, ordered by
//	               Zab: multi-operations guarded by the versions read, retried
//	               on conflict.
//
// Keys are znodes under Config.Root + "/kv"; values are their data. Queues
// follow the paper's ZooKeeper queue: an item is a sequential znode under
// the queue's znode, whose data holds the sequence number of the head. A
// dequeue reads the queue znode (its data and Stat, a constant size) and
// the head item, then removes the item and advances the head in one multi;
// it lists the queue's children only when the head item is missing (a gap
// in the sequence numbers), never otherwise, so its cost does not grow with
// the queue (Figure 10's problem with the standard dequeue recipe, which
// reads the whole children list). Scan is not offered (ZooKeeper has no
// ordered range read).
//
// go-zookeeper calls take no context: a call runs on a goroutine of the
// Binding and the invocation stops waiting for it when its context ends or
// Config.RequestTimeout passes; the call itself ends when the server
// answers or the session gives up on the server.
package zkbinding

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/correctables/correctables/bindings/internal/kvop"
	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/correctable"
)

// Config configures a Binding.
type Config struct {
	// Servers are the ensemble's client addresses (host:port). Required.
	Servers []string
	// Root is the znode under which the binding keeps its keys and queues;
	// default "/correctables". It is created if missing.
	Root string
	// SessionTimeout is ZooKeeper's session timeout; default 10s.
	SessionTimeout time.Duration
	// RequestTimeout bounds each operation: an ensemble that does not
	// answer within it fails the operation with client.ErrUnavailable.
	// Default 5s.
	RequestTimeout time.Duration
	// MaxRetries bounds the attempts of an operation whose multi lost to a
	// concurrent write; default 64. Past it the operation fails with
	// client.ErrOverloaded.
	MaxRetries int
}

func (c *Config) validate() error {
	if len(c.Servers) == 0 {
		return fmt.Errorf("zkbinding: no servers: %w", client.ErrInvalidArgument)
	}
	if c.Root == "" {
		c.Root = "/correctables"
	}
	if !strings.HasPrefix(c.Root, "/") || (len(c.Root) > 1 && strings.HasSuffix(c.Root, "/")) {
		return fmt.Errorf("zkbinding: root %q: want an absolute znode path: %w", c.Root, client.ErrInvalidArgument)
	}
	if c.SessionTimeout < 0 || c.RequestTimeout < 0 || c.MaxRetries < 0 {
		return fmt.Errorf("zkbinding: negative timeout or retries: %w", client.ErrInvalidArgument)
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = 10 * time.Second
	}
	kvop.DefaultLimits(&c.RequestTimeout, &c.MaxRetries)
	return nil
}

// Binding is a correctable.Binding of client.Op on ZooKeeper. It is safe
// for concurrent use.
type Binding struct {
	cfg  Config
	conn *zk.Conn
	// Bytes on the session's connections, both ways (for measuring).
	sent, received atomic.Uint64
	ready          atomic.Bool // Root and its children exist
}

var _ correctable.Binding[client.Op, client.Result] = (*Binding)(nil)

// New returns a Binding with one ZooKeeper session. It does not wait for
// the ensemble: an unreachable ensemble fails each operation.
func New(cfg Config) (*Binding, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	b := &Binding{cfg: cfg}
	dialer := func(network, address string, timeout time.Duration) (net.Conn, error) {
		c, err := net.DialTimeout(network, address, timeout)
		if err != nil {
			return nil, err
		}
		return &countingConn{Conn: c, b: b}, nil
	}
	conn, _, err := zk.Connect(cfg.Servers, cfg.SessionTimeout, zk.WithDialer(dialer), zk.WithLogger(nopLogger{}))
	if err != nil {
		return nil, fmt.Errorf("zkbinding: %w: %w", client.ErrInvalidArgument, err)
	}
	b.conn = conn
	return b, nil
}

// Close ends the session.
func (b *Binding) Close() error {
	b.conn.Close()
	return nil
}

// Bytes returns the bytes sent to and received from the ensemble by this
// Binding's session so far (ZooKeeper's wire protocol over TCP, without
// TCP/IP headers).
func (b *Binding) Bytes() (sent, received uint64) { return b.sent.Load(), b.received.Load() }

type countingConn struct {
	net.Conn
	b *Binding
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.b.received.Add(uint64(n))
	return n, err
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.b.sent.Add(uint64(n))
	return n, err
}

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

var levels = []correctable.Level{correctable.ReadMyWrites, correctable.Strong}

// Levels returns correctable.ReadMyWrites (the connected server) and
// correctable.Strong (after sync, or through Zab for writes).
func (b *Binding) Levels() []correctable.Level { return levels }

var supported = []client.Kind{
	client.KindGet, client.KindPut, client.KindDelete, client.KindCAS, client.KindIncr,
	client.KindAppend, client.KindEnqueue, client.KindDequeue, client.KindTxn,
}

type outcome struct {
	res client.Result
	err error
}

// Submit runs op at the requested levels; it implements correctable.Binding.
func (b *Binding) Submit(ctx context.Context, op client.Op, levels []correctable.Level, emit correctable.Emitter[client.Result]) error {
	if err := kvop.Check("zkbinding", op, supported...); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeoutCause(ctx, b.cfg.RequestTimeout, errTimeout)
	defer cancel()
	wantPrelim := levels[0] == correctable.ReadMyWrites
	wantFinal := levels[len(levels)-1] == correctable.Strong
	// Each goroutine sends once on a buffered channel: it ends when its
	// ZooKeeper calls return, whether or not Submit still waits.
	prelim := make(chan outcome, 1)
	final := make(chan outcome, 1)
	if wantPrelim {
		go func() { r, err := b.simulate(op); prelim <- outcome{r, err} }()
	}
	if wantFinal {
		go func() { r, err := b.execute(ctx, op); final <- outcome{r, err} }()
	}
	if wantPrelim {
		select {
		case p := <-prelim:
			switch {
			case p.err != nil && !wantFinal:
				return b.mapErr(ctx, op, p.err)
			case p.err == nil:
				if err := emit(correctable.View[client.Result]{Value: p.res, Level: correctable.ReadMyWrites}); err != nil {
					return stopErr(err)
				}
			}
			// A failed preliminary view is skipped: the final one may still come.
		case <-ctx.Done():
			return b.mapErr(ctx, op, ctx.Err())
		}
	}
	if !wantFinal {
		return nil
	}
	select {
	case f := <-final:
		if f.err != nil {
			return b.mapErr(ctx, op, f.err)
		}
		return stopErr(emit(correctable.View[client.Result]{Value: f.res, Level: correctable.Strong}))
	case <-ctx.Done():
		return b.mapErr(ctx, op, ctx.Err())
	}
}

var errTimeout = errors.New("request timeout")

func stopErr(err error) error {
	if errors.Is(err, correctable.ErrClosed) {
		return nil
	}
	return err
}

// mapErr maps a ZooKeeper client error to the client package's sentinels.
func (b *Binding) mapErr(ctx context.Context, op client.Op, err error) error {
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, errTimeout):
		return fmt.Errorf("zkbinding: %v: no answer from %v within %v: %w", op, b.cfg.Servers, b.cfg.RequestTimeout, client.ErrUnavailable)
	case ctx.Err() != nil:
		return fmt.Errorf("zkbinding: %v: %w", op, cause)
	case errors.Is(err, client.ErrOverloaded):
		return fmt.Errorf("zkbinding: %v: %w", op, err)
	case errors.Is(err, zk.ErrNoServer), errors.Is(err, zk.ErrConnectionClosed), errors.Is(err, zk.ErrSessionExpired),
		errors.Is(err, zk.ErrSessionMoved), errors.Is(err, zk.ErrClosing):
		return fmt.Errorf("zkbinding: %v: %w: %v", op, client.ErrUnavailable, err)
	case errors.Is(err, zk.ErrBadArguments), errors.Is(err, zk.ErrInvalidPath):
		return fmt.Errorf("zkbinding: %v: %w: %v", op, client.ErrInvalidArgument, err)
	case errors.Is(err, zk.ErrAPIError):
		return fmt.Errorf("zkbinding: %v: %w: %v", op, client.ErrUnimplemented, err)
	}
	return fmt.Errorf("zkbinding: %v: %w: %v", op, client.ErrServer, err)
}

var acl = zk.WorldACL(zk.PermAll)

// escape makes a key or queue name one znode name: percent-encoded, with
// "." encoded too, and a leading "_" so that no name is empty.
func escape(s string) string {
	return "_" + strings.ReplaceAll(url.PathEscape(s), ".", "%2E")
}

func (b *Binding) key(k string) string   { return b.cfg.Root + "/kv/" + escape(k) }
func (b *Binding) queue(q string) string { return b.cfg.Root + "/q/" + escape(q) }

// setup creates Root, Root/kv and Root/q once.
func (b *Binding) setup() error {
	if b.ready.Load() {
		return nil
	}
	var path string
	for _, part := range strings.Split(strings.TrimPrefix(b.cfg.Root, "/"), "/") {
		path += "/" + part
		if err := b.ensure(path, nil); err != nil {
			return err
		}
	}
	for _, p := range []string{b.cfg.Root + "/kv", b.cfg.Root + "/q"} {
		if err := b.ensure(p, nil); err != nil {
			return err
		}
	}
	b.ready.Store(true)
	return nil
}

// ensure creates path with data unless it exists.
func (b *Binding) ensure(path string, data []byte) error {
	_, err := b.conn.Create(path, data, 0, acl)
	if err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return err
	}
	return nil
}

// entry is one key as read: its state and znode version (-1 if absent).
type entry struct {
	kvop.Entry
	version int32
}

// read reads keys at the connected server (after a sync, for a strong
// read: sync makes the server catch up with the leader first).
func (b *Binding) read(keys []string, sync bool) (map[string]entry, error) {
	if err := b.setup(); err != nil {
		return nil, err
	}
	if sync {
		if _, err := b.conn.Sync(b.cfg.Root + "/kv"); err != nil {
			return nil, err
		}
	}
	out := make(map[string]entry, len(keys))
	for _, k := range keys {
		data, st, err := b.conn.Get(b.key(k))
		switch {
		case errors.Is(err, zk.ErrNoNode):
			out[k] = entry{version: -1}
		case err != nil:
			return nil, err
		default:
			out[k] = entry{Entry: kvop.Entry{Value: data, Found: true}, version: st.Version}
		}
	}
	return out, nil
}

func states(m map[string]entry) map[string]kvop.Entry {
	s := make(map[string]kvop.Entry, len(m))
	for k, e := range m {
		s[k] = e.Entry
	}
	return s
}

// simulate returns op's result on the connected server's state, without
// changing it.
func (b *Binding) simulate(op client.Op) (client.Result, error) {
	switch op.Kind() {
	case client.KindEnqueue:
		if err := b.setup(); err != nil {
			return client.Result{}, err
		}
		_, st, err := b.conn.Exists(b.queue(op.Key()))
		if err != nil {
			return client.Result{}, err
		}
		var n int64
		if st != nil {
			n = int64(st.NumChildren)
		}
		return client.Result{Len: n + 1}, nil // the sequence number is the ensemble's to give
	case client.KindDequeue:
		h, err := b.head(op.Key(), false)
		if err != nil || h.item == "" {
			return client.Result{}, err
		}
		return client.Result{OK: true, Value: h.value, Int: h.seq, Len: h.n - 1}, nil
	}
	state, err := b.read(kvop.Keys(op), false)
	if err != nil {
		return client.Result{}, err
	}
	res, _ := kvop.Apply(op, states(state))
	return res, nil
}

// execute runs op through the leader (Zab); reads sync first.
func (b *Binding) execute(ctx context.Context, op client.Op) (client.Result, error) {
	switch op.Kind() {
	case client.KindEnqueue:
		return b.enqueue(op)
	case client.KindDequeue:
		return b.dequeue(ctx, op)
	}
	keys := kvop.Keys(op)
	for range b.cfg.MaxRetries {
		if ctx.Err() != nil {
			return client.Result{}, ctx.Err()
		}
		state, err := b.read(keys, true)
		if err != nil {
			return client.Result{}, err
		}
		res, writes := kvop.Apply(op, states(state))
		if len(writes) == 0 && op.Kind() != client.KindTxn {
			return res, nil // read after sync
		}
		ok, err := b.commit(state, writes)
		if err != nil {
			return client.Result{}, err
		}
		if ok {
			return res, nil
		}
	}
	return client.Result{}, fmt.Errorf("%d attempts lost to concurrent writes: %w", b.cfg.MaxRetries, client.ErrOverloaded)
}

// commit applies writes in one multi that also checks every key read is
// as read: a present key has its version, an absent key is still absent
// (created and deleted in the multi, which fails if it exists). It reports
// false when a check failed (a concurrent write).
func (b *Binding) commit(read map[string]entry, writes []client.Write) (bool, error) {
	type cur struct {
		exists  bool
		version int32 // -1 once this multi changed the key
	}
	st := make(map[string]*cur, len(read))
	for k, e := range read {
		st[k] = &cur{exists: e.Found, version: e.version}
	}
	var ops []any
	checked := map[string]bool{}
	absent := func(path string) {
		ops = append(ops, &zk.CreateRequest{Path: path, Acl: acl}, &zk.DeleteRequest{Path: path, Version: -1})
	}
	for _, w := range writes {
		c, p := st[w.Key], b.key(w.Key)
		switch {
		case w.Delete && c.exists:
			ops = append(ops, &zk.DeleteRequest{Path: p, Version: c.version})
		case w.Delete && !checked[w.Key]:
			absent(p)
		case w.Delete:
		case c.exists:
			ops = append(ops, &zk.SetDataRequest{Path: p, Data: w.Value, Version: c.version})
		default:
			ops = append(ops, &zk.CreateRequest{Path: p, Data: w.Value, Acl: acl})
		}
		c.exists, c.version = !w.Delete, -1
		checked[w.Key] = true
	}
	for k, e := range read {
		switch {
		case checked[k]:
		case e.Found:
			ops = append(ops, &zk.CheckVersionRequest{Path: b.key(k), Version: e.version})
		default:
			absent(b.key(k))
		}
	}
	if len(ops) == 0 {
		return true, nil
	}
	_, err := b.conn.Multi(ops...)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, zk.ErrBadVersion), errors.Is(err, zk.ErrNodeExists), errors.Is(err, zk.ErrNoNode):
		return false, nil
	}
	return false, err
}

// maxWindow bounds how far past the head a retried dequeue reaches.
const maxWindow = 8

func itemName(seq int64) string { return fmt.Sprintf("i-%010d", seq) }

func parseItem(name string) (int64, bool) {
	s, ok := strings.CutPrefix(name, "i-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

func (b *Binding) enqueue(op client.Op) (client.Result, error) {
	if err := b.setup(); err != nil {
		return client.Result{}, err
	}
	q := b.queue(op.Key())
	if err := b.ensure(q, []byte("0")); err != nil {
		return client.Result{}, err
	}
	path, err := b.conn.Create(q+"/i-", op.Value(), zk.FlagSequence, acl)
	if err != nil {
		return client.Result{}, err
	}
	seq, _ := parseItem(path[strings.LastIndexByte(path, '/')+1:])
	// The length after: read once the item is in (a concurrent operation
	// may have changed it since).
	_, st, err := b.conn.Exists(q)
	if err != nil {
		return client.Result{}, err
	}
	return client.Result{Int: seq, Len: int64(st.NumChildren)}, nil
}

// head is a queue's head as read at one server.
type head struct {
	version int32 // the queue znode's version (its data is the head hint)
	n       int64 // items in the queue
	item    string
	seq     int64
	value   []byte
}

// head reads the queue znode (data: the sequence number of the head; Stat:
// the number of items) and the head item; only if that item is missing (a
// gap in the sequence) does it list the children to find the oldest.
func (b *Binding) head(queue string, sync bool) (head, error) {
	if err := b.setup(); err != nil {
		return head{}, err
	}
	q := b.queue(queue)
	if sync {
		if _, err := b.conn.Sync(q); err != nil && !errors.Is(err, zk.ErrNoNode) {
			return head{}, err
		}
	}
	var h head
	for {
		data, st, err := b.conn.Get(q)
		if errors.Is(err, zk.ErrNoNode) {
			return head{}, nil
		}
		if err != nil {
			return head{}, err
		}
		if h.n > 0 && st.Version == h.version {
			// The head hint did not move: its item is missing, taken out
			// of order by a retried dequeue (see dequeue) or a gap.
			// Probe the next few sequence numbers before listing.
			for j := int64(1); j <= maxWindow; j++ {
				value, _, err := b.conn.Get(q + "/" + itemName(h.seq+j))
				if err == nil {
					h.item, h.seq, h.value = itemName(h.seq+j), h.seq+j, value
					return h, nil
				}
				if !errors.Is(err, zk.ErrNoNode) {
					return head{}, err
				}
			}
			break
		}
		h = head{version: st.Version, n: int64(st.NumChildren)}
		if h.n == 0 {
			return h, nil
		}
		hint, _ := strconv.ParseInt(string(data), 10, 64)
		h.seq = hint
		value, _, err := b.conn.Get(q + "/" + itemName(hint))
		if err == nil {
			h.item, h.seq, h.value = itemName(hint), hint, value
			return h, nil
		}
		if !errors.Is(err, zk.ErrNoNode) {
			return head{}, err
		}
		// The item is gone: taken by a dequeue that moved the hint since
		// (read the queue znode again), or never there (a gap).
	}
	// A gap: find the oldest item in the list of children.
	names, _, err := b.conn.Children(q)
	if err != nil {
		return head{}, err
	}
	var seqs []int64
	for _, name := range names {
		if s, ok := parseItem(name); ok {
			seqs = append(seqs, s)
		}
	}
	if len(seqs) == 0 {
		h.n = 0
		return h, nil
	}
	h.seq = slices.Min(seqs)
	h.item = itemName(h.seq)
	value, _, err := b.conn.Get(q + "/" + h.item)
	if errors.Is(err, zk.ErrNoNode) {
		return b.head(queue, sync) // taken meanwhile: read again
	}
	h.value = value
	return h, err
}

// dequeue removes the head item and advances the head hint in one multi,
// guarded by the queue znode's version; it retries when another dequeue
// got there first.
//
// A retry instead takes one of the few items after the head (up to
// maxWindow, at random), deleting only that item, so that concurrent
// dequeues stop colliding on the head: alone, a dequeue is FIFO; under
// contention, close to it, and each item is still taken exactly once (the
// delete fails for all but one).
func (b *Binding) dequeue(ctx context.Context, op client.Op) (client.Result, error) {
	q := b.queue(op.Key())
	for attempt := range b.cfg.MaxRetries {
		if ctx.Err() != nil {
			return client.Result{}, ctx.Err()
		}
		h, err := b.head(op.Key(), attempt > 0)
		if err != nil {
			return client.Result{}, err
		}
		if h.item == "" {
			// Empty at this server: confirm at the leader's state.
			if h, err = b.head(op.Key(), true); err != nil || h.item == "" {
				return client.Result{}, err
			}
		}
		// After a lost race, leave the head to the newcomers.
		if j := 1 + rand.Int64N(maxWindow-1); attempt > 0 && j < h.n {
			item := q + "/" + itemName(h.seq+j)
			value, _, err := b.conn.Get(item)
			if errors.Is(err, zk.ErrNoNode) {
				continue
			}
			if err != nil {
				return client.Result{}, err
			}
			switch err := b.conn.Delete(item, -1); {
			case err == nil:
				return client.Result{OK: true, Value: value, Int: h.seq + j, Len: h.n - 1}, nil
			case errors.Is(err, zk.ErrNoNode):
				continue
			default:
				return client.Result{}, err
			}
		}
		_, err = b.conn.Multi(
			&zk.SetDataRequest{Path: q, Data: []byte(strconv.FormatInt(h.seq+1, 10)), Version: h.version},
			&zk.DeleteRequest{Path: q + "/" + h.item, Version: -1},
		)
		switch {
		case err == nil:
			return client.Result{OK: true, Value: h.value, Int: h.seq, Len: h.n - 1}, nil
		case errors.Is(err, zk.ErrBadVersion), errors.Is(err, zk.ErrNoNode):
			continue
		}
		return client.Result{}, err
	}
	return client.Result{}, fmt.Errorf("dequeue: %d attempts lost to concurrent dequeues: %w", b.cfg.MaxRetries, client.ErrOverloaded)
}
