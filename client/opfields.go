package client

// The accessors below let a binding of these operations to another store
// (etcd, ZooKeeper, Redis, a cache; see the bindings directory) read an Op
// it did not build. They return the slices the Op was built with: do not
// modify them.

// Key returns the key of get, put, delete, cas, incr and append, the prefix
// of scan and the queue of enqueue and dequeue; "" for txn and noop.
func (o Op) Key() string { return o.key }

// Value returns the value written by put, cas and append, and the item of
// enqueue; nil for the other kinds.
func (o Op) Value() []byte { return o.value }

// Expected returns the value a cas expects at its key, or absent = true for
// a CASAbsent; zero for the other kinds.
func (o Op) Expected() (value []byte, absent bool) { return o.expected, o.expectAbsent }

// Delta returns the amount an incr adds; 0 for the other kinds.
func (o Op) Delta() int64 { return o.delta }

// Limit returns a scan's limit (0: the store's maximum); 0 for the other
// kinds.
func (o Op) Limit() int { return o.limit }

// Guards returns a txn's guards; nil for the other kinds.
func (o Op) Guards() []Guard {
	if o.txn == nil {
		return nil
	}
	return o.txn.guards
}

// Branches returns the writes a txn applies when its guards hold (then) and
// when they do not (els); nil for the other kinds.
func (o Op) Branches() (then, els []Write) {
	if o.txn == nil {
		return nil, nil
	}
	return o.txn.then, o.txn.els
}
