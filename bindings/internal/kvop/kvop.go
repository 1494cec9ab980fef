// Package kvop defines, once, what the store's key-value operations
// (client.Op) mean, as a pure function of the keys they read, so that every
// binding of those operations to another store gives the same results as
// our store: a binding reads the keys an operation names, calls Apply, and
// commits the writes Apply returns only if the keys did not change in
// between (an etcd transaction on mod revisions, a ZooKeeper multi on
// versions, a Redis WATCH). Apply on a replica's local state without
// committing is the preliminary view of Correctables (OSDI'16) §5.2: the
// operation simulated on the state of the nearest replica.
package kvop

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/correctables/correctables/client"
)

// MaxScan is the most items a scan returns (limit 0 means this many), as in
// our store.
const MaxScan = 1000

// The defaults of the limits every binding's Config has.
const (
	// DefaultRequestTimeout bounds each operation.
	DefaultRequestTimeout = 5 * time.Second
	// DefaultMaxRetries bounds the attempts of an operation whose guarded
	// commit lost to a concurrent write.
	DefaultMaxRetries = 64
)

// DefaultLimits sets a zero request timeout or retry bound to its default.
func DefaultLimits(requestTimeout *time.Duration, maxRetries *int) {
	if *requestTimeout == 0 {
		*requestTimeout = DefaultRequestTimeout
	}
	if *maxRetries == 0 {
		*maxRetries = DefaultMaxRetries
	}
}

// Entry is one key's state: its value, if Found.
type Entry struct {
	Value []byte
	Found bool
}

// Keys returns the keys op reads and may write, for the kinds Apply handles
// (get, put, delete, cas, incr, append, txn); nil otherwise.
func Keys(op client.Op) []string {
	switch op.Kind() {
	case client.KindGet, client.KindPut, client.KindDelete, client.KindCAS, client.KindIncr, client.KindAppend:
		return []string{op.Key()}
	case client.KindTxn:
		var ks []string
		for _, g := range op.Guards() {
			ks = append(ks, g.Key)
		}
		then, els := op.Branches()
		for _, w := range append(slices.Clone(then), els...) {
			ks = append(ks, w.Key)
		}
		slices.Sort(ks)
		return slices.Compact(ks)
	}
	return nil
}

// Apply returns op's result on the state of its keys (every key of Keys(op)
// present in state, Found or not), and the writes that carry the state to
// after op. A failed op (Result.Err set) writes nothing.
func Apply(op client.Op, state map[string]Entry) (client.Result, []client.Write) {
	cur := state[op.Key()]
	switch op.Kind() {
	case client.KindGet:
		return client.Result{Found: cur.Found, Value: cur.Value}, nil
	case client.KindPut:
		return client.Result{Found: cur.Found, Value: cur.Value}, []client.Write{client.PutWrite(op.Key(), op.Value())}
	case client.KindDelete:
		if !cur.Found {
			return client.Result{}, nil
		}
		return client.Result{Found: true, Value: cur.Value}, []client.Write{client.DeleteWrite(op.Key())}
	case client.KindCAS:
		expected, absent := op.Expected()
		match := !cur.Found
		if !absent {
			match = cur.Found && bytes.Equal(cur.Value, expected)
		}
		r := client.Result{OK: match, Found: cur.Found, Value: cur.Value}
		if !match {
			return r, nil
		}
		return r, []client.Write{client.PutWrite(op.Key(), op.Value())}
	case client.KindIncr:
		var n int64
		if cur.Found {
			var err error
			if n, err = strconv.ParseInt(string(cur.Value), 10, 64); err != nil {
				return client.Result{Err: client.ErrNotInteger}, nil
			}
		}
		d := op.Delta()
		if (d > 0 && n > math.MaxInt64-d) || (d < 0 && n < math.MinInt64-d) {
			return client.Result{Err: client.ErrOverflow}, nil
		}
		n += d
		return client.Result{Found: cur.Found, Int: n}, []client.Write{client.PutWrite(op.Key(), strconv.AppendInt(nil, n, 10))}
	case client.KindAppend:
		v := append(slices.Clone(cur.Value), op.Value()...)
		return client.Result{Found: cur.Found, Int: int64(len(v))}, []client.Write{client.PutWrite(op.Key(), v)}
	case client.KindTxn:
		r := client.Result{OK: true}
		for _, g := range op.Guards() {
			e := state[g.Key]
			if !holds(g, e) {
				r.OK = false
			}
		}
		seen := map[string]bool{}
		for _, g := range op.Guards() {
			if e := state[g.Key]; e.Found && !seen[g.Key] {
				seen[g.Key] = true
				r.Items = append(r.Items, client.KV{Key: g.Key, Value: e.Value})
			}
		}
		slices.SortFunc(r.Items, func(a, b client.KV) int { return cmpString(a.Key, b.Key) })
		then, els := op.Branches()
		if r.OK {
			return r, then
		}
		return r, els
	}
	return client.Result{}, nil
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// holds evaluates a guard as our store does: a missing key is not equal to
// any value, not less and not greater than any value.
func holds(g client.Guard, e Entry) bool {
	switch g.Cmp {
	case client.CmpEqual:
		return e.Found && bytes.Equal(e.Value, g.Value)
	case client.CmpNotEqual:
		return !e.Found || !bytes.Equal(e.Value, g.Value)
	case client.CmpExists:
		return e.Found
	case client.CmpAbsent:
		return !e.Found
	case client.CmpLess:
		return e.Found && bytes.Compare(e.Value, g.Value) < 0
	case client.CmpGreater:
		return e.Found && bytes.Compare(e.Value, g.Value) > 0
	}
	return false
}

// Check returns an error matching client.ErrInvalidArgument for an op no
// store can run (the zero Op, a negative scan limit, a guard with an unknown
// comparison), and one matching client.ErrUnimplemented for a kind the
// binding does not offer (supported lists those it does).
func Check(store string, op client.Op, supported ...client.Kind) error {
	switch {
	case op.Kind() == 0:
		return fmt.Errorf("%s: the zero Op: %w", store, client.ErrInvalidArgument)
	case !slices.Contains(supported, op.Kind()):
		return fmt.Errorf("%s: %v: %w by this binding", store, op, client.ErrUnimplemented)
	case op.Kind() == client.KindScan && (op.Limit() < 0 || op.Limit() > MaxScan):
		return fmt.Errorf("%s: %v: limit outside [0, %d]: %w", store, op, MaxScan, client.ErrInvalidArgument)
	}
	for _, g := range op.Guards() {
		if g.Cmp < client.CmpEqual || g.Cmp > client.CmpGreater {
			return fmt.Errorf("%s: %v: guard %v: %w", store, op, g, client.ErrInvalidArgument)
		}
	}
	return nil
}
