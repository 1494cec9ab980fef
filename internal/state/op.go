package state

import (
	"bytes"
	"fmt"
)

// Kind is the type of an operation. The numeric values are part of the wire
// encoding: never renumber, only append. Kind 0 is invalid so that a zero Op
// is rejected instead of being taken for a get.
type Kind uint8

// Operation kinds. See Op for the fields each uses and Result for what each
// returns.
const (
	OpGet Kind = iota + 1
	OpPut
	OpDelete
	OpCAS
	OpIncr
	OpAppend
	OpScan
	OpEnqueue
	OpDequeue
	OpTxn
	OpNoop
	maxKind = OpNoop
)

var kindNames = [...]string{
	OpGet:     "get",
	OpPut:     "put",
	OpDelete:  "delete",
	OpCAS:     "cas",
	OpIncr:    "incr",
	OpAppend:  "append",
	OpScan:    "scan",
	OpEnqueue: "enqueue",
	OpDequeue: "dequeue",
	OpTxn:     "txn",
	OpNoop:    "noop",
}

func (k Kind) String() string {
	if k >= OpGet && k <= maxKind {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Op is one deterministic operation over the State. Fields a kind does not use
// must be zero (Validate rejects them), so that an op has one meaning and one
// encoding.
//
//	kind     fields used
//	get      Key
//	put      Key, Value
//	delete   Key
//	cas      Key, Value (new), Expected, ExpectAbsent
//	incr     Key, Delta
//	append   Key, Value
//	scan     Key (prefix), Limit
//	enqueue  Key (queue name), Value (item)
//	dequeue  Key (queue name)
//	txn      Txn
//	noop     -
//
// Queues are a namespace of their own: queue "a" and key "a" are unrelated,
// and scan sees only keys.
type Op struct {
	Kind Kind
	// Key is the key, the queue name, or the scan prefix.
	Key string
	// Value is the put, append or enqueue value, or the CAS new value.
	Value []byte
	// Expected is the value CAS expects the key to hold (a missing key holds
	// no value and never matches, an empty Expected matches only an existing
	// empty value). Must be empty when ExpectAbsent is set.
	Expected []byte
	// ExpectAbsent makes CAS succeed only if the key does not exist.
	ExpectAbsent bool
	// Delta is added by incr.
	Delta int64
	// Limit is the maximum number of items a scan returns; 0 means
	// Limits.MaxScan. Must be in [0, MaxScan].
	Limit int
	// Txn is the transaction of an OpTxn.
	Txn *Txn
}

// Txn is a guarded multi-key transaction: if every guard holds (an empty
// guard list holds), the writes of Then are applied in order, else those of
// Else. It is all-or-nothing: a txn that fails validation writes nothing.
type Txn struct {
	Guards []Guard
	Then   []Write
	Else   []Write
}

// Cmp is a guard comparison. The numeric values are part of the wire encoding.
type Cmp uint8

// Guard comparisons. A missing key is not equal to any value, not less and
// not greater than any value.
const (
	// CmpEqual holds if the key exists and its value equals Guard.Value.
	CmpEqual Cmp = iota + 1
	// CmpNotEqual holds if the key is missing or its value differs.
	CmpNotEqual
	// CmpExists holds if the key exists; Guard.Value must be empty.
	CmpExists
	// CmpAbsent holds if the key does not exist; Guard.Value must be empty.
	CmpAbsent
	// CmpLess holds if the key exists and its value is bytewise less than Guard.Value.
	CmpLess
	// CmpGreater holds if the key exists and its value is bytewise greater than Guard.Value.
	CmpGreater
	maxCmp = CmpGreater
)

var cmpNames = [...]string{
	CmpEqual:    "==",
	CmpNotEqual: "!=",
	CmpExists:   "exists",
	CmpAbsent:   "absent",
	CmpLess:     "<",
	CmpGreater:  ">",
}

func (c Cmp) String() string {
	if c >= CmpEqual && c <= maxCmp {
		return cmpNames[c]
	}
	return fmt.Sprintf("Cmp(%d)", uint8(c))
}

// Guard is one comparison on a plain key (never a queue).
type Guard struct {
	Key   string
	Cmp   Cmp
	Value []byte
}

// holds evaluates the guard against the key's current value.
func (g Guard) holds(v []byte, found bool) bool {
	switch g.Cmp {
	case CmpEqual:
		return found && bytes.Equal(v, g.Value)
	case CmpNotEqual:
		return !found || !bytes.Equal(v, g.Value)
	case CmpExists:
		return found
	case CmpAbsent:
		return !found
	case CmpLess:
		return found && bytes.Compare(v, g.Value) < 0
	case CmpGreater:
		return found && bytes.Compare(v, g.Value) > 0
	}
	panic("state: unvalidated guard") // Validate rejects unknown Cmp before any guard is evaluated.
}

// Write is one write of a transaction branch: a put of Value, or a delete.
type Write struct {
	Delete bool
	Key    string
	Value  []byte // must be empty for a delete
}

// ReadOnly reports whether the op can never change the state: get, scan, and
// a txn with no writes in either branch. Noop is not read-only: its purpose is
// to be ordered (the periodic strong no-op of Creek §4.4 commits the weak ops
// before it), so it must go through the log, never a read-only path.
func (o Op) ReadOnly() bool {
	switch o.Kind {
	case OpGet, OpScan:
		return true
	case OpTxn:
		return o.Txn != nil && len(o.Txn.Then) == 0 && len(o.Txn.Else) == 0
	}
	return false
}

// Field masks for Validate: which fields each kind uses.
const (
	fKey = 1 << iota
	fValue
	fExpected
	fDelta
	fLimit
	fTxn
)

var kindFields = [...]uint8{
	OpGet:     fKey,
	OpPut:     fKey | fValue,
	OpDelete:  fKey,
	OpCAS:     fKey | fValue | fExpected,
	OpIncr:    fKey | fDelta,
	OpAppend:  fKey | fValue,
	OpScan:    fKey | fLimit,
	OpEnqueue: fKey | fValue,
	OpDequeue: fKey,
	OpTxn:     fTxn,
	OpNoop:    0,
}

// Size is the bytes of all keys and values the operation carries.
func (o Op) Size() int {
	n := len(o.Key) + len(o.Value) + len(o.Expected)
	if o.Txn != nil {
		for _, g := range o.Txn.Guards {
			n += len(g.Key) + len(g.Value)
		}
		for _, w := range o.Txn.Then {
			n += len(w.Key) + len(w.Value)
		}
		for _, w := range o.Txn.Else {
			n += len(w.Key) + len(w.Value)
		}
	}
	return n
}

// Validate checks the op against the limits (zero limit fields mean the
// defaults). It returns nil or an error wrapping ErrUnknownOp, ErrBadArgs,
// ErrKeyTooLarge, ErrValueTooLarge or ErrTooManyOps. Apply runs it first, so
// an op that fails it changes nothing. Errors that depend on the state
// (ErrNotInteger, ErrOverflow, an append that grows too large) come only from
// Apply.
func (o Op) Validate(l Limits) error {
	l.EnsureDefaults()
	if o.Kind < OpGet || o.Kind > maxKind {
		return fmt.Errorf("%w: kind %d", ErrUnknownOp, uint8(o.Kind))
	}
	use := kindFields[o.Kind]
	unused := func(name string) error {
		return fmt.Errorf("%w: %v does not use %s", ErrBadArgs, o.Kind, name)
	}
	switch {
	case use&fKey == 0 && o.Key != "":
		return unused("Key")
	case use&fValue == 0 && len(o.Value) != 0:
		return unused("Value")
	case use&fExpected == 0 && (len(o.Expected) != 0 || o.ExpectAbsent):
		return unused("Expected/ExpectAbsent")
	case use&fDelta == 0 && o.Delta != 0:
		return unused("Delta")
	case use&fLimit == 0 && o.Limit != 0:
		return unused("Limit")
	case use&fTxn == 0 && o.Txn != nil:
		return unused("Txn")
	}
	if err := checkKey(l, o.Kind.String(), o.Key); err != nil {
		return err
	}
	if err := checkValue(l, o.Kind.String(), o.Value); err != nil {
		return err
	}
	if err := checkValue(l, "cas expected", o.Expected); err != nil {
		return err
	}
	if n := o.Size(); n > l.MaxOpBytes {
		return fmt.Errorf("%w: %v carries %d bytes of keys and values, limit %d", ErrValueTooLarge, o.Kind, n, l.MaxOpBytes)
	}
	switch o.Kind {
	case OpCAS:
		if o.ExpectAbsent && len(o.Expected) != 0 {
			return fmt.Errorf("%w: cas with ExpectAbsent must have empty Expected", ErrBadArgs)
		}
	case OpScan:
		if o.Limit < 0 || o.Limit > l.MaxScan {
			return fmt.Errorf("%w: scan limit %d not in [0, %d]", ErrBadArgs, o.Limit, l.MaxScan)
		}
	case OpTxn:
		return o.Txn.validate(l)
	}
	return nil
}

func (t *Txn) validate(l Limits) error {
	if t == nil {
		return fmt.Errorf("%w: txn without Txn", ErrBadArgs)
	}
	if n := len(t.Guards) + len(t.Then) + len(t.Else); n > l.MaxTxnOps {
		return fmt.Errorf("%w: %d guards and writes, limit %d", ErrTooManyOps, n, l.MaxTxnOps)
	}
	for i, g := range t.Guards {
		if g.Cmp < CmpEqual || g.Cmp > maxCmp {
			return fmt.Errorf("%w: txn guard %d: cmp %d", ErrUnknownOp, i, uint8(g.Cmp))
		}
		if (g.Cmp == CmpExists || g.Cmp == CmpAbsent) && len(g.Value) != 0 {
			return fmt.Errorf("%w: txn guard %d: %v takes no value", ErrBadArgs, i, g.Cmp)
		}
		if err := checkKey(l, "txn guard", g.Key); err != nil {
			return err
		}
		if err := checkValue(l, "txn guard", g.Value); err != nil {
			return err
		}
	}
	for _, ws := range [][]Write{t.Then, t.Else} {
		for _, w := range ws {
			if w.Delete && len(w.Value) != 0 {
				return fmt.Errorf("%w: txn delete of %q with a value", ErrBadArgs, w.Key)
			}
			if err := checkKey(l, "txn write", w.Key); err != nil {
				return err
			}
			if err := checkValue(l, "txn write", w.Value); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkKey(l Limits, what, k string) error {
	if len(k) > l.MaxKey {
		return fmt.Errorf("%w: %s: key is %d bytes, limit %d", ErrKeyTooLarge, what, len(k), l.MaxKey)
	}
	return nil
}

func checkValue(l Limits, what string, v []byte) error {
	if len(v) > l.MaxValue {
		return fmt.Errorf("%w: %s: value is %d bytes, limit %d", ErrValueTooLarge, what, len(v), l.MaxValue)
	}
	return nil
}
