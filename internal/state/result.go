package state

import "bytes"

// KV is one key and its value.
type KV struct {
	Key   string
	Value []byte
}

// Result is what Apply returns. If Err is not CodeOK the op changed nothing
// and every other field is zero. Otherwise, per kind:
//
//	get      Found: key exists; Value: its value.
//	put      Found: key existed; Value: its previous value.
//	delete   Found: key existed; Value: its previous (deleted) value.
//	cas      OK: the swap happened; Found/Value: the value before the op
//	         (on success it equals Expected; on failure it is the current
//	         value that did not match).
//	incr     Found: key existed; Int: the new value (also stored, as decimal
//	         ASCII).
//	append   Found: key existed; Int: length of the new value.
//	scan     Items: up to Limit keys with the prefix and their values, sorted
//	         by key; OK: Items holds every key with the prefix (not cut at
//	         Limit).
//	enqueue  Int: the item's sequence number; Len: queue length after.
//	dequeue  OK: an item was taken (false, with no error, on an empty queue);
//	         Value: the item; Int: its sequence number; Len: queue length
//	         after.
//	txn      OK: the guards held and Then was applied (else Else was);
//	         Items: the values, before the writes, of the guarded keys that
//	         exist, sorted by key, each key once.
//	noop     nothing.
//
// Queue sequence numbers start at 1 and count every item ever enqueued on the
// queue, so the n-th item enqueued has number n whatever was dequeued before;
// head sequence number and Len together tell how many items are left, which
// is what the ticket queue of Correctables §4.3 bases its decision on.
//
// Value and Items alias the state's memory: treat them as read-only.
type Result struct {
	Err   Code
	Found bool
	Value []byte
	Int   int64
	Len   int64
	OK    bool
	Items []KV
}

// Equal reports whether r and o are the same result. Nil and empty byte
// slices are equal.
func (r Result) Equal(o Result) bool {
	if r.Err != o.Err || r.Found != o.Found || r.Int != o.Int || r.Len != o.Len || r.OK != o.OK ||
		!bytes.Equal(r.Value, o.Value) || len(r.Items) != len(o.Items) {
		return false
	}
	for i := range r.Items {
		if r.Items[i].Key != o.Items[i].Key || !bytes.Equal(r.Items[i].Value, o.Items[i].Value) {
			return false
		}
	}
	return true
}
