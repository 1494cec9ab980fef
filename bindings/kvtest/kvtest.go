// Package kvtest runs the conformance suite (correctable/conformance) on a
// binding of the store's operations (client.Op, client.Result) and checks,
// at the final view, that each operation means on that store what it means
// on ours: the same Found, Value, OK, Int and Len, the same queue order, the
// same per-operation errors. Our own client passes it on an in-process
// cluster, and so do the etcd, ZooKeeper, Redis and cache bindings on their
// real servers.
package kvtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/correctable"
	"github.com/correctables/correctables/correctable/conformance"
)

// Binding is a binding of the store's operations.
type Binding = correctable.Binding[client.Op, client.Result]

// Options configures Run.
type Options struct {
	// Prefix starts every key and queue the checks use; default "kvtest/".
	Prefix string
	// Unsupported are the kinds the binding refuses; each must fail with
	// client.ErrUnimplemented. Every other kind is checked.
	Unsupported []client.Kind
	// Down is the binding configured for a server that does not run; its
	// operations must fail with client.ErrUnavailable.
	Down Binding
	// Failures are further operations the binding must fail.
	Failures []conformance.Failure[client.Op]
	// IgnoreGoroutines: see conformance.Harness.
	IgnoreGoroutines []goleak.Option
	// LongLived: see conformance.Harness.
	LongLived []string
	// Timeout: see conformance.Harness.
	Timeout time.Duration
	// ServersInProcess: see conformance.Harness.
	ServersInProcess bool
	// MaySkip: see conformance.Harness.
	MaySkip bool
}

// Run runs the conformance suite and the semantic checks on b.
func Run(t *testing.T, b Binding, o Options) {
	t.Helper()
	if o.Prefix == "" {
		o.Prefix = "kvtest/"
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	failures := append([]conformance.Failure[client.Op]{
		{Name: "zero Op", Op: client.Op{}, Err: client.ErrInvalidArgument},
	}, o.Failures...)
	for _, k := range o.Unsupported {
		failures = append(failures, conformance.Failure[client.Op]{Name: "unsupported " + k.String(), Op: sample(k, o.Prefix), Err: client.ErrUnimplemented})
	}
	h := conformance.Harness[client.Op, client.Result]{
		Binding:          b,
		Put:              func(k, v string) client.Op { return client.Put(k, []byte(v)) },
		Get:              client.Get,
		Value:            func(r client.Result) (string, bool) { return string(r.Value), r.Found },
		Prefix:           o.Prefix + "conformance/",
		Failures:         failures,
		Timeout:          o.Timeout,
		IgnoreGoroutines: o.IgnoreGoroutines,
		LongLived:        o.LongLived,
		ServersInProcess: o.ServersInProcess,
		MaySkip:          o.MaySkip,
	}
	if o.Down != nil {
		h.Down, h.DownErr = o.Down, client.ErrUnavailable
	}
	conformance.Run(t, h)
	t.Run("Semantics", func(t *testing.T) { semantics(t, b, o) })
}

// sample returns an operation of kind k.
func sample(k client.Kind, prefix string) client.Op {
	switch k {
	case client.KindGet:
		return client.Get(prefix + "s")
	case client.KindPut:
		return client.Put(prefix+"s", []byte("v"))
	case client.KindDelete:
		return client.Delete(prefix + "s")
	case client.KindCAS:
		return client.CAS(prefix+"s", []byte("a"), []byte("b"))
	case client.KindIncr:
		return client.Incr(prefix+"n", 1)
	case client.KindAppend:
		return client.Append(prefix+"s", []byte("v"))
	case client.KindScan:
		return client.Scan(prefix, 10)
	case client.KindEnqueue:
		return client.Enqueue(prefix+"q", []byte("v"))
	case client.KindDequeue:
		return client.Dequeue(prefix + "q")
	case client.KindTxn:
		return client.Txn([]client.Guard{client.IfAbsent(prefix + "s")}, []client.Write{client.PutWrite(prefix+"s", []byte("v"))}, nil)
	case client.KindNoop:
		return client.Noop()
	}
	return client.Op{}
}

type checker struct {
	t       *testing.T
	b       Binding
	timeout time.Duration
}

// final invokes op at every level and returns its final view's result.
func (c checker) final(op client.Op) client.Result {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	v, err := correctable.Invoke(ctx, c.b, op).Final(ctx)
	if err != nil {
		c.t.Fatalf("%v: %v", op, err)
	}
	return v.Value
}

// expect checks the final result of op against want (Items and the
// sequence number Int of queues aside, which expect checks elsewhere).
func (c checker) expect(op client.Op, want client.Result) client.Result {
	c.t.Helper()
	got := c.final(op)
	if op.Kind() == client.KindEnqueue || op.Kind() == client.KindDequeue {
		want.Int = got.Int
	}
	if !got.Equal(want) || !errors.Is(got.Err, want.Err) {
		c.t.Errorf("%v: got %s; want %s", op, show(got), show(want))
	}
	return got
}

func show(r client.Result) string {
	return fmt.Sprintf("{Found:%v Value:%q Int:%d Len:%d OK:%v Items:%d Err:%v}", r.Found, r.Value, r.Int, r.Len, r.OK, len(r.Items), r.Err)
}

func semantics(t *testing.T, b Binding, o Options) {
	c := checker{t: t, b: b, timeout: o.Timeout}
	p := o.Prefix + "semantics/"
	skip := map[client.Kind]bool{}
	for _, k := range o.Unsupported {
		skip[k] = true
	}
	k := p + "k"
	v := func(s string) []byte { return []byte(s) }
	c.expect(client.Get(k), client.Result{})
	c.expect(client.Put(k, v("v1")), client.Result{})
	c.expect(client.Put(k, v("v2")), client.Result{Found: true, Value: v("v1")})
	c.expect(client.Get(k), client.Result{Found: true, Value: v("v2")})
	if !skip[client.KindDelete] {
		c.expect(client.Delete(k), client.Result{Found: true, Value: v("v2")})
		c.expect(client.Get(k), client.Result{})
		c.expect(client.Delete(k), client.Result{})
	}
	if !skip[client.KindCAS] {
		ck := p + "cas"
		c.expect(client.CAS(ck, v("x"), v("y")), client.Result{})
		c.expect(client.CASAbsent(ck, v("a")), client.Result{OK: true})
		c.expect(client.CASAbsent(ck, v("b")), client.Result{Found: true, Value: v("a")})
		c.expect(client.CAS(ck, v("a"), v("b")), client.Result{OK: true, Found: true, Value: v("a")})
		c.expect(client.CAS(ck, v("a"), v("c")), client.Result{Found: true, Value: v("b")})
		c.expect(client.Get(ck), client.Result{Found: true, Value: v("b")})
	}
	if !skip[client.KindIncr] {
		n := p + "n"
		c.expect(client.Incr(n, 5), client.Result{Int: 5})
		c.expect(client.Incr(n, -7), client.Result{Found: true, Int: -2})
		c.expect(client.Get(n), client.Result{Found: true, Value: v("-2")})
		c.expect(client.Put(n, v("abc")), client.Result{Found: true, Value: v("-2")})
		c.expect(client.Incr(n, 1), client.Result{Err: client.ErrNotInteger})
		c.expect(client.Put(n, v("9223372036854775807")), client.Result{Found: true, Value: v("abc")})
		c.expect(client.Incr(n, 1), client.Result{Err: client.ErrOverflow})
	}
	if !skip[client.KindAppend] {
		a := p + "append"
		c.expect(client.Append(a, v("ab")), client.Result{Int: 2})
		c.expect(client.Append(a, v("cd")), client.Result{Found: true, Int: 4})
		c.expect(client.Get(a), client.Result{Found: true, Value: v("abcd")})
	}
	if !skip[client.KindScan] {
		sp := p + "scan/"
		for _, s := range []string{"b", "a", "c"} {
			c.final(client.Put(sp+s, v(s)))
		}
		got := c.final(client.Scan(sp, 2))
		if got.OK || len(got.Items) != 2 || got.Items[0].Key != sp+"a" || got.Items[1].Key != sp+"b" || string(got.Items[1].Value) != "b" {
			t.Errorf("scan %q limit 2: %+v; want a, b and not OK (c remains)", sp, got)
		}
		if got := c.final(client.Scan(sp, 0)); !got.OK || len(got.Items) != 3 {
			t.Errorf("scan %q: %+v; want all three, OK", sp, got)
		}
	}
	if !skip[client.KindTxn] {
		tk := p + "txn"
		c.expect(client.Txn([]client.Guard{client.IfAbsent(tk)}, []client.Write{client.PutWrite(tk, v("1"))}, nil), client.Result{OK: true})
		c.expect(client.Txn([]client.Guard{client.IfEqual(tk, v("2"))}, nil, []client.Write{client.DeleteWrite(tk)}),
			client.Result{Items: []client.KV{{Key: tk, Value: v("1")}}})
		c.expect(client.Get(tk), client.Result{})
	}
	if !skip[client.KindEnqueue] && !skip[client.KindDequeue] {
		q := p + "queue"
		c.expect(client.Dequeue(q), client.Result{})
		var seqs []int64
		for i, item := range []string{"t1", "t2", "t3"} {
			r := c.expect(client.Enqueue(q, v(item)), client.Result{Len: int64(i + 1)})
			seqs = append(seqs, r.Int)
		}
		for i, item := range []string{"t1", "t2", "t3"} {
			r := c.expect(client.Dequeue(q), client.Result{OK: true, Value: v(item), Len: int64(2 - i)})
			if r.Int != seqs[i] {
				t.Errorf("dequeue of %s: sequence number %d; its enqueue said %d", item, r.Int, seqs[i])
			}
		}
		for i := 1; i < len(seqs); i++ {
			if seqs[i] <= seqs[i-1] {
				t.Errorf("enqueue sequence numbers %v: not increasing", seqs)
			}
		}
		c.expect(client.Dequeue(q), client.Result{})
	}
}

// BenchmarkViews measures, per operation (a get of an existing key, a put),
// the time from the invocation to each of its views, invoking at every
// level b.N times one after the other; it reports the median of each view
// as a metric named for the operation and the level, in microseconds.
func BenchmarkViews(b *testing.B, binding Binding) {
	ctx := context.Background()
	if _, err := correctable.InvokeStrong(ctx, binding, client.Put("bench/k", []byte("v"))).Final(ctx); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer() // (it would drop the metrics if called later)
	for _, tc := range []struct {
		name string
		op   func(i int) client.Op
	}{
		{"get", func(int) client.Op { return client.Get("bench/k") }},
		{"put", func(i int) client.Op { return client.Put("bench/k", []byte(fmt.Sprint(i))) }},
	} {
		samples := map[correctable.Level][]time.Duration{}
		for i := range b.N {
			c := correctable.Invoke(ctx, binding, tc.op(i))
			var views []correctable.View[client.Result]
			done := make(chan struct{})
			c.SetCallbacks(correctable.Callbacks[client.Result]{
				OnUpdate: func(v correctable.View[client.Result]) { views = append(views, v) },
				OnFinal:  func(v correctable.View[client.Result]) { views = append(views, v); close(done) },
				OnError:  func(err error) { b.Error(err); close(done) },
			})
			<-done
			for _, v := range views {
				samples[v.Level] = append(samples[v.Level], v.Elapsed)
			}
		}
		for l, ds := range samples {
			slices.Sort(ds)
			b.ReportMetric(float64(ds[len(ds)/2].Microseconds()), tc.name+"-"+l.Name()+"-p50-µs")
		}
	}
}

// PipeGoroutines are the goroutines of a pipe between our client and a
// replica in the same process (client.WithPipe, api Store.Pipe): the
// client's sender and reader, the server's handler and sender, and gRPC's
// watcher of the stream's context. A pipe opens when an operation of one
// view first goes to a replica and lives until the client's Close, as its
// connection does (Options.LongLived).
var PipeGoroutines = []string{
	"github.com/correctables/correctables/client.(*pipe).send",
	"github.com/correctables/correctables/client.(*pipe).read",
	"github.com/correctables/correctables/internal/server.(*Server).Pipe",
	"github.com/correctables/correctables/internal/server.(*Server).pipeSend",
	"google.golang.org/grpc.newClientStreamWithParams.func4",
}
