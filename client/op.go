package client

import (
	"bytes"
	"fmt"
	"strings"
)

// Kind is the type of an operation.
type Kind uint8

// Operation kinds, one per constructor.
const (
	KindGet Kind = iota + 1
	KindPut
	KindDelete
	KindCAS
	KindIncr
	KindAppend
	KindScan
	KindEnqueue
	KindDequeue
	KindTxn
	KindNoop
)

var kindNames = [...]string{
	KindGet:     "get",
	KindPut:     "put",
	KindDelete:  "delete",
	KindCAS:     "cas",
	KindIncr:    "incr",
	KindAppend:  "append",
	KindScan:    "scan",
	KindEnqueue: "enqueue",
	KindDequeue: "dequeue",
	KindTxn:     "txn",
	KindNoop:    "noop",
}

// String returns the kind's name.
func (k Kind) String() string {
	if k >= KindGet && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Op is one operation of the store. Build it with a constructor (Get, Put,
// ..., Txn, Noop): an Op has one meaning and one encoding, and the zero Op is
// not an operation (invoking it fails with ErrInvalidArgument). Ops are
// values; the constructors do not copy the byte slices they are given, so do
// not modify them while an invocation of the Op runs.
type Op struct {
	kind         Kind
	key          string
	value        []byte
	expected     []byte
	expectAbsent bool
	delta        int64
	limit        int
	txn          *txnOp
}

type txnOp struct {
	guards []Guard
	then   []Write
	els    []Write
}

// Get reads key. Result: Found, Value.
func Get(key string) Op { return Op{kind: KindGet, key: key} }

// Put writes value at key. Result: Found and Value of the previous value.
func Put(key string, value []byte) Op { return Op{kind: KindPut, key: key, value: value} }

// Delete removes key. Result: Found and Value of the deleted value.
func Delete(key string) Op { return Op{kind: KindDelete, key: key} }

// CAS writes value at key if key holds expected (a missing key never
// matches). Result: OK if the swap happened; Found and Value of the value
// before the operation.
func CAS(key string, expected, value []byte) Op {
	return Op{kind: KindCAS, key: key, expected: expected, value: value}
}

// CASAbsent writes value at key if key does not exist. Result as for CAS.
func CASAbsent(key string, value []byte) Op {
	return Op{kind: KindCAS, key: key, value: value, expectAbsent: true}
}

// Incr adds delta to the decimal integer at key (a missing key counts as 0).
// Result: Found, and Int the new value; Err is ErrNotInteger or ErrOverflow
// when the increment is impossible.
func Incr(key string, delta int64) Op { return Op{kind: KindIncr, key: key, delta: delta} }

// Append appends value to the value at key. Result: Found, and Int the
// length of the new value.
func Append(key string, value []byte) Op { return Op{kind: KindAppend, key: key, value: value} }

// Scan reads up to limit keys with the given prefix, sorted (limit 0: the
// server's maximum). Result: Items; OK if Items holds every key with the
// prefix.
func Scan(prefix string, limit int) Op { return Op{kind: KindScan, key: prefix, limit: limit} }

// Enqueue appends item to the queue (queues are a namespace of their own).
// Result: Int the item's sequence number, Len the queue length after.
func Enqueue(queue string, item []byte) Op { return Op{kind: KindEnqueue, key: queue, value: item} }

// Dequeue takes the head of the queue. Result: OK if an item was taken (false
// on an empty queue), Value the item, Int its sequence number, Len the queue
// length after.
func Dequeue(queue string) Op { return Op{kind: KindDequeue, key: queue} }

// Txn applies the writes of then if every guard holds (no guards hold), else
// those of els, atomically. Result: OK if the guards held; Items the values,
// before the writes, of the guarded keys that exist, sorted by key.
func Txn(guards []Guard, then, els []Write) Op {
	return Op{kind: KindTxn, txn: &txnOp{guards: guards, then: then, els: els}}
}

// Noop does nothing but take a place in the order: invoked strongly, it
// commits the weak operations before it (Creek §4.4).
func Noop() Op { return Op{kind: KindNoop} }

// Kind returns the op's kind; zero for the zero Op.
func (o Op) Kind() Kind { return o.kind }

// ReadOnly reports whether the op never changes the store: get, scan, and a
// transaction without writes. A weak read-only op has no committed view.
func (o Op) ReadOnly() bool {
	switch o.kind {
	case KindGet, KindScan:
		return true
	case KindTxn:
		return len(o.txn.then) == 0 && len(o.txn.els) == 0
	}
	return false
}

// retryable reports whether running o twice is harmless (a read or a
// no-op), so that it may go to another endpoint after it may have run.
func (o Op) retryable() bool { return o.ReadOnly() || o.kind == KindNoop }

// String describes the op for logs and errors; values are shown by length
// only.
func (o Op) String() string {
	switch o.kind {
	case KindGet, KindDelete, KindDequeue:
		return fmt.Sprintf("%s(%q)", o.kind, o.key)
	case KindPut, KindAppend, KindEnqueue:
		return fmt.Sprintf("%s(%q, %dB)", o.kind, o.key, len(o.value))
	case KindCAS:
		if o.expectAbsent {
			return fmt.Sprintf("cas(%q, absent, %dB)", o.key, len(o.value))
		}
		return fmt.Sprintf("cas(%q, %dB, %dB)", o.key, len(o.expected), len(o.value))
	case KindIncr:
		return fmt.Sprintf("incr(%q, %d)", o.key, o.delta)
	case KindScan:
		return fmt.Sprintf("scan(%q, %d)", o.key, o.limit)
	case KindTxn:
		var b strings.Builder
		b.WriteString("txn(if")
		for _, g := range o.txn.guards {
			fmt.Fprintf(&b, " %s", g)
		}
		fmt.Fprintf(&b, ": %d writes, else %d)", len(o.txn.then), len(o.txn.els))
		return b.String()
	case KindNoop:
		return "noop"
	}
	return "invalid op"
}

// Cmp is a transaction guard's comparison.
type Cmp uint8

// Guard comparisons. A missing key is not equal to any value, not less and
// not greater than any value.
const (
	CmpEqual Cmp = iota + 1
	CmpNotEqual
	CmpExists
	CmpAbsent
	CmpLess
	CmpGreater
)

var cmpNames = [...]string{
	CmpEqual:    "==",
	CmpNotEqual: "!=",
	CmpExists:   "exists",
	CmpAbsent:   "absent",
	CmpLess:     "<",
	CmpGreater:  ">",
}

// String returns the comparison's symbol.
func (c Cmp) String() string {
	if c >= CmpEqual && int(c) < len(cmpNames) {
		return cmpNames[c]
	}
	return fmt.Sprintf("cmp(%d)", uint8(c))
}

// Guard is one comparison of a transaction, on a plain key (never a queue).
// Build it with IfEqual, IfNotEqual, IfExists, IfAbsent, IfLess, IfGreater.
type Guard struct {
	Key   string
	Cmp   Cmp
	Value []byte // empty for CmpExists and CmpAbsent
}

// IfEqual holds if key exists and holds value.
func IfEqual(key string, value []byte) Guard { return Guard{Key: key, Cmp: CmpEqual, Value: value} }

// IfNotEqual holds if key is missing or holds another value.
func IfNotEqual(key string, value []byte) Guard {
	return Guard{Key: key, Cmp: CmpNotEqual, Value: value}
}

// IfExists holds if key exists.
func IfExists(key string) Guard { return Guard{Key: key, Cmp: CmpExists} }

// IfAbsent holds if key does not exist.
func IfAbsent(key string) Guard { return Guard{Key: key, Cmp: CmpAbsent} }

// IfLess holds if key exists and its value is bytewise less than value.
func IfLess(key string, value []byte) Guard { return Guard{Key: key, Cmp: CmpLess, Value: value} }

// IfGreater holds if key exists and its value is bytewise greater than value.
func IfGreater(key string, value []byte) Guard {
	return Guard{Key: key, Cmp: CmpGreater, Value: value}
}

// String describes the guard.
func (g Guard) String() string {
	if g.Cmp == CmpExists || g.Cmp == CmpAbsent {
		return fmt.Sprintf("%q %s", g.Key, g.Cmp)
	}
	return fmt.Sprintf("%q %s %dB", g.Key, g.Cmp, len(g.Value))
}

// Write is one write of a transaction branch. Build it with PutWrite or
// DeleteWrite.
type Write struct {
	Delete bool
	Key    string
	Value  []byte // empty for a delete
}

// PutWrite writes value at key.
func PutWrite(key string, value []byte) Write { return Write{Key: key, Value: value} }

// DeleteWrite removes key.
func DeleteWrite(key string) Write { return Write{Delete: true, Key: key} }

// KV is one key and its value.
type KV struct {
	Key   string
	Value []byte
}

// Result is an operation's result, as seen in one view. If Err is not nil
// the operation changed nothing (in that view) and the other fields are
// zero. Otherwise, per kind:
//
//	get      Found: key exists; Value: its value.
//	put      Found: key existed; Value: its previous value.
//	delete   Found: key existed; Value: its previous (deleted) value.
//	cas      OK: the swap happened; Found/Value: the value before the op.
//	incr     Found: key existed; Int: the new value.
//	append   Found: key existed; Int: length of the new value.
//	scan     Items: keys with the prefix and their values, sorted by key;
//	         OK: Items holds every key with the prefix.
//	enqueue  Int: the item's sequence number; Len: queue length after.
//	dequeue  OK: an item was taken; Value: the item; Int: its sequence
//	         number; Len: queue length after.
//	txn      OK: the guards held; Items: the values, before the writes, of
//	         the guarded keys that exist, sorted by key.
//	noop     nothing.
//
// Err is one of ErrUnknownOp, ErrBadArgs, ErrKeyTooLarge, ErrValueTooLarge,
// ErrTooManyOps, ErrNotInteger, ErrOverflow, or ErrUnknownCode: the
// operation ran and failed at the replica. A preliminary and a final view
// may differ in Err as in any other field (an increment can fail on the
// tentative state and succeed on the committed one). Failures to run the
// operation at all fail the Correctable instead.
//
// Result is not comparable with ==; use Equal (for example with
// correctable.SpeculateFunc).
type Result struct {
	Found bool
	Value []byte
	Int   int64
	Len   int64
	OK    bool
	Items []KV
	Err   error
}

// Equal reports whether r and o are the same result. Nil and empty byte
// slices are equal; errors are equal if both are nil or both match the same
// sentinel.
func (r Result) Equal(o Result) bool {
	if r.Found != o.Found || r.Int != o.Int || r.Len != o.Len || r.OK != o.OK ||
		!bytes.Equal(r.Value, o.Value) || len(r.Items) != len(o.Items) || codeOfErr(r.Err) != codeOfErr(o.Err) {
		return false
	}
	for i := range r.Items {
		if r.Items[i].Key != o.Items[i].Key || !bytes.Equal(r.Items[i].Value, o.Items[i].Value) {
			return false
		}
	}
	return true
}
