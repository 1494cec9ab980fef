package state

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/cespare/xxhash/v2"
	"github.com/google/btree"
)

// entry is one key of the state. h caches entryHash(key, value) so that
// overwriting or deleting a key does not rehash its old value.
type entry struct {
	key   string
	value []byte
	h     uint64
	// g is set on a value an append made (appendTo), nil on any other.
	g *grown
}

// grown is what a value made by an append carries so that the next append
// to it costs what it appends, not the value's size: the xxhash digest of
// exactly its bytes (streaming: writing more to a copy of it gives the
// digest of the longer value), and the mark of its backing array. Before,
// every append copied the whole value into a fresh, zeroed slice and
// hashed it whole: n appends to one key cost n times its size, and a
// replica that restarted under a stream of appends to a 100 KB value spent
// seconds per loop round executing the ones gossip brought it (the kill
// soak: 34% of its CPU clearing new slices, 22% hashing).
type grown struct {
	dig xxhash.Digest
	arr *arrayMark
}

// arrayMark is shared by every value on one backing array: hwm is how far
// into the array any value has ever reached. A value may be extended in
// place only if it ends at hwm; so bytes once part of a value are never
// written again, whoever still holds that value (an Undo, a Result, a
// Clone, a reply being encoded).
type arrayMark struct{ hwm int }

func entryLess(a, b entry) bool { return a.key < b.key }

const btreeDegree = 32

// State is the versioned state: plain keys in a B-tree (ordered, for scans)
// and queues in a map by name. It is not safe for concurrent use; Clone
// counts as a write to the state it is called on.
//
// Create one with New; the zero State is usable only as the target of
// UnmarshalBinary.
type State struct {
	lim    Limits
	keys   *btree.BTreeG[entry]
	queues map[string]*queue // only queues that ever held an item (next > 1)
	// hash is the sum of the hashes of every key entry, every queued item and
	// every queue's next sequence number, kept up to date by each Apply and
	// Revert so Hash is O(1).
	hash uint64
}

// New returns an empty state with the given limits; zero fields mean the
// defaults. Negative limits are a programming error and panic.
func New(l Limits) *State {
	l.EnsureDefaults()
	if err := l.Validate(); err != nil {
		panic(err)
	}
	return &State{
		lim:    l,
		keys:   btree.NewG(btreeDegree, entryLess),
		queues: map[string]*queue{},
	}
}

// Limits returns the limits the state enforces, defaults filled in.
func (s *State) Limits() Limits { return s.lim }

// Len returns the number of plain keys plus the number of items in all queues.
func (s *State) Len() int {
	n := s.keys.Len()
	for _, q := range s.queues {
		n += q.n
	}
	return n
}

// Hash returns a content hash: equal states have equal hashes, whatever the
// order of the ops that built them, in every process and on every platform.
// It is maintained incrementally and costs O(1).
func (s *State) Hash() uint64 { return s.hash }

// Undo records how to revoke one Apply: the previous values of the keys it
// wrote (Creek Algorithm 2's undoMap), or the queue item it moved. The zero
// Undo (returned for reads, errors and ops that changed nothing) reverts
// nothing.
type Undo struct {
	kind undoKind
	k    keyUndo   // undoKey: the key written
	txn  []keyUndo // undoTxn: the writes, in the order applied
	name string    // undoEnqueue, undoDequeue: the queue
	item []byte    // undoDequeue: the item taken
	seq  uint64    // undoEnqueue, undoDequeue: the item's sequence number
}

type undoKind uint8

const (
	undoNone undoKind = iota
	undoKey
	undoTxn
	undoEnqueue
	undoDequeue
)

// keyUndo is the state of one key before a write, and what the write left
// (the hash of the entry it wrote, if put; else the key was deleted), which
// Revert checks the key still holds.
type keyUndo struct {
	key string
	old entry // valid if had
	had bool
	put bool
	h   uint64
}

// Changed reports whether the Apply that returned u changed the state.
func (u Undo) Changed() bool { return u.kind != undoNone }

// Apply executes op and returns its result and the record that reverts it.
// It is deterministic: the result and the new state depend only on the state
// and op. An op that fails Validate, or fails for a reason that depends on the
// state (ErrNotInteger, ErrOverflow, an append too large), returns a Result
// with only Err set and changes nothing. Apply copies every byte slice it
// stores, so the caller may reuse op's memory.
func (s *State) Apply(op Op) (Result, Undo) { return s.apply(op, false) }

// ApplyOwned is Apply for an op whose memory nobody changes once made (a
// replica's operations: decoded afresh from the wire or the log, kept
// as they are, executed again after rollbacks): the values it stores are
// op's, not copies. An append never writes into a value a put stored
// (appendTo copies it first).
func (s *State) ApplyOwned(op Op) (Result, Undo) { return s.apply(op, true) }

// apply is Apply; owned: op's values are stored as they are.
func (s *State) apply(op Op, owned bool) (Result, Undo) {
	keep := bytes.Clone
	if owned {
		keep = func(b []byte) []byte { return b }
	}
	if err := op.Validate(s.lim); err != nil {
		return Result{Err: CodeOf(err)}, Undo{}
	}
	switch op.Kind {
	case OpGet:
		e, ok := s.get(op.Key)
		return Result{Found: ok, Value: e.value}, Undo{}
	case OpPut:
		u := s.set(op.Key, keep(op.Value))
		return Result{Found: u.had, Value: u.old.value}, s.keyUndo(u)
	case OpDelete:
		u := s.del(op.Key)
		if !u.had {
			return Result{}, Undo{}
		}
		return Result{Found: true, Value: u.old.value}, s.keyUndo(u)
	case OpCAS:
		return s.cas(op, keep)
	case OpIncr:
		return s.incr(op)
	case OpAppend:
		cur, found := s.get(op.Key)
		n := len(cur.value) + len(op.Value)
		if n > s.lim.MaxValue {
			return Result{Err: CodeValueTooLarge}, Undo{}
		}
		u := s.put(appendTo(op.Key, cur, op.Value))
		return Result{Found: found, Int: int64(n)}, s.keyUndo(u)
	case OpScan:
		return s.scan(op), Undo{}
	case OpEnqueue:
		return s.enqueue(op.Key, keep(op.Value))
	case OpDequeue:
		return s.dequeue(op.Key)
	case OpTxn:
		return s.txn(op.Txn, keep)
	case OpNoop:
		return Result{}, Undo{}
	}
	panic("state: Validate accepted unknown kind " + op.Kind.String())
}

// Revert revokes the Apply that returned u. Every Apply made after it that
// touched one of its keys or its queue must have been reverted first: on
// one key or queue, reverts come in LIFO order; Applies that touch none of
// them (operations that commute with it) may stay. Reverting the zero Undo
// does nothing. Reverting under a later write, which would silently make
// this state diverge from every other replica's, is a bug in the caller and
// panics: the key must still hold what u's Apply wrote, the queue still end
// (enqueue) or begin (dequeue) where u's Apply left it.
func (s *State) Revert(u Undo) {
	switch u.kind {
	case undoNone:
	case undoKey:
		s.restore(u.k)
	case undoTxn:
		for i := len(u.txn) - 1; i >= 0; i-- {
			s.restore(u.txn[i])
		}
	case undoEnqueue:
		q := s.queues[u.name]
		if q == nil || q.n == 0 || q.next != u.seq+1 {
			panic(fmt.Sprintf("state: Revert of enqueue %d on %q under a later change of the queue", u.seq, u.name))
		}
		v := q.popBack()
		// popBack decremented next: the removed item's sequence number is
		// now q.next, and the queue's previous next was q.next+1.
		s.hash -= itemHash(u.name, q.next, v) + queueHash(u.name, q.next+1)
		if q.next == 1 {
			delete(s.queues, u.name) // back to never having held an item
		} else {
			s.hash += queueHash(u.name, q.next)
		}
	case undoDequeue:
		q := s.queues[u.name]
		if q == nil || q.headSeq() != u.seq+1 {
			panic(fmt.Sprintf("state: Revert of dequeue %d on %q under a later change of the queue", u.seq, u.name))
		}
		q.pushFront(u.item)
		s.hash += itemHash(u.name, q.headSeq(), u.item)
	}
}

func (s *State) keyUndo(k keyUndo) Undo { return Undo{kind: undoKey, k: k} }

func (s *State) get(k string) (entry, bool) { return s.keys.Get(entry{key: k}) }

func (s *State) set(k string, v []byte) keyUndo {
	return s.put(entry{key: k, value: v, h: entryHash(k, v)})
}

// appendTo returns the entry of key k holding cur's value followed by add
// (cur is the zero entry if k is absent). The value is extended in place
// when nothing was ever written past its end (arrayMark), else copied
// (into memory not zeroed first); its digest continues cur's.
func appendTo(k string, cur entry, add []byte) entry {
	g := &grown{}
	if cur.g != nil {
		g.dig = cur.g.dig
	} else {
		g.dig.Reset()
		_, _ = g.dig.Write(cur.value)
	}
	_, _ = g.dig.Write(add)
	var v []byte
	switch {
	case cur.g != nil && cur.g.arr.hwm == len(cur.value) && cap(cur.value)-len(cur.value) >= len(add):
		v, g.arr = append(cur.value, add...), cur.g.arr
	case cur.g != nil && cur.g.arr.hwm > len(cur.value):
		// Another value took the room after this one (a rollback undid
		// it, and this append replaces it): an exact copy, as most such
		// appends are undone again; a run of appends grows from the
		// next.
		v, g.arr = bytes.Join([][]byte{cur.value, add}, nil), &arrayMark{}
	default:
		// A full array, or a value no append made: room to grow.
		v, g.arr = append(cur.value[:len(cur.value):len(cur.value)], add...), &arrayMark{}
	}
	if v == nil {
		v = []byte{} // found, and empty: as a put of nothing leaves it
	}
	g.arr.hwm = len(v)
	return entry{key: k, value: v, g: g, h: entryHashSum(k, len(v), g.dig.Sum64())}
}

// put stores e, whose hash is computed.
func (s *State) put(e entry) keyUndo {
	k := e.key
	old, had := s.keys.ReplaceOrInsert(e)
	if had {
		s.hash -= old.h
	}
	s.hash += e.h
	return keyUndo{key: k, old: old, had: had, put: true, h: e.h}
}

func (s *State) del(k string) keyUndo {
	old, had := s.keys.Delete(entry{key: k})
	if had {
		s.hash -= old.h
	}
	return keyUndo{key: k, old: old, had: had}
}

// restore undoes one write to a key, which must be the last write to it
// not yet undone (see Revert).
func (s *State) restore(u keyUndo) {
	var cur entry
	var ok bool
	if u.had {
		cur, ok = s.keys.ReplaceOrInsert(u.old)
		s.hash += u.old.h
	} else {
		cur, ok = s.keys.Delete(entry{key: u.key})
	}
	if ok {
		s.hash -= cur.h
	}
	if ok != u.put || (ok && cur.h != u.h) {
		panic(fmt.Sprintf("state: Revert of a write to %q under a later write to it", u.key))
	}
}

func (s *State) cas(op Op, keep func([]byte) []byte) (Result, Undo) {
	cur, found := s.get(op.Key)
	var match bool
	if op.ExpectAbsent {
		match = !found
	} else {
		match = found && bytes.Equal(cur.value, op.Expected)
	}
	r := Result{OK: match, Found: found, Value: cur.value}
	if !match {
		return r, Undo{}
	}
	return r, s.keyUndo(s.set(op.Key, keep(op.Value)))
}

func (s *State) incr(op Op) (Result, Undo) {
	cur, found := s.get(op.Key)
	var n int64
	if found {
		var err error
		if n, err = strconv.ParseInt(string(cur.value), 10, 64); err != nil {
			return Result{Err: CodeNotInteger}, Undo{}
		}
	}
	d := op.Delta
	if (d > 0 && n > math.MaxInt64-d) || (d < 0 && n < math.MinInt64-d) {
		return Result{Err: CodeOverflow}, Undo{}
	}
	n += d
	u := s.set(op.Key, strconv.AppendInt(nil, n, 10))
	return Result{Found: found, Int: n}, s.keyUndo(u)
}

func (s *State) scan(op Op) Result {
	limit := op.Limit
	if limit == 0 {
		limit = s.lim.MaxScan
	}
	r := Result{OK: true}
	s.keys.AscendGreaterOrEqual(entry{key: op.Key}, func(e entry) bool {
		if !strings.HasPrefix(e.key, op.Key) {
			return false
		}
		if len(r.Items) == limit {
			r.OK = false // there is at least one more
			return false
		}
		r.Items = append(r.Items, KV{Key: e.key, Value: e.value})
		return true
	})
	return r
}

func (s *State) enqueue(name string, v []byte) (Result, Undo) {
	q := s.queues[name]
	if q == nil {
		q = newQueue()
		s.queues[name] = q
	} else {
		s.hash -= queueHash(name, q.next)
	}
	seq := q.next
	q.pushBack(v)
	s.hash += itemHash(name, seq, v) + queueHash(name, q.next)
	return Result{Int: int64(seq), Len: int64(q.n)}, Undo{kind: undoEnqueue, name: name, seq: seq}
}

// dequeue touches only the head of the queue: O(1) whatever its length.
func (s *State) dequeue(name string) (Result, Undo) {
	q := s.queues[name]
	if q == nil || q.n == 0 {
		return Result{}, Undo{}
	}
	seq := q.headSeq()
	v := q.popFront()
	s.hash -= itemHash(name, seq, v)
	r := Result{OK: true, Value: v, Int: int64(seq), Len: int64(q.n)}
	return r, Undo{kind: undoDequeue, name: name, item: v, seq: seq}
}

func (s *State) txn(t *Txn, keep func([]byte) []byte) (Result, Undo) {
	r := Result{OK: true}
	var keys []string
	for _, g := range t.Guards {
		e, found := s.get(g.Key)
		if !g.holds(e.value, found) {
			r.OK = false
		}
		if found {
			keys = append(keys, g.Key)
		}
	}
	slices.Sort(keys)
	for _, k := range slices.Compact(keys) {
		e, _ := s.get(k)
		r.Items = append(r.Items, KV{Key: k, Value: e.value})
	}
	ws := t.Then
	if !r.OK {
		ws = t.Else
	}
	if len(ws) == 0 {
		return r, Undo{}
	}
	us := make([]keyUndo, len(ws))
	for i, w := range ws {
		if w.Delete {
			us[i] = s.del(w.Key)
		} else {
			us[i] = s.set(w.Key, keep(w.Value))
		}
	}
	return r, Undo{kind: undoTxn, txn: us}
}

// Clone returns a deep, independent copy: applying to or reverting either
// never affects the other. Undo records from s remain valid on the clone. The
// key tree is copied lazily (copy-on-write), so Clone costs O(number of
// queued items), not O(number of keys).
func (s *State) Clone() *State {
	c := &State{
		lim:    s.lim,
		keys:   s.keys.Clone(),
		queues: make(map[string]*queue, len(s.queues)),
		hash:   s.hash,
	}
	for name, q := range s.queues {
		c.queues[name] = q.clone()
	}
	return c
}

// Equal reports whether s and o hold the same keys, values and queues
// (including each queue's next sequence number). Limits and undo history are
// not compared.
func (s *State) Equal(o *State) bool {
	if s.hash != o.hash || s.keys.Len() != o.keys.Len() || len(s.queues) != len(o.queues) {
		return false
	}
	eq := true
	s.keys.Ascend(func(e entry) bool {
		f, ok := o.get(e.key)
		eq = ok && bytes.Equal(e.value, f.value)
		return eq
	})
	if !eq {
		return false
	}
	for name, q := range s.queues {
		p := o.queues[name]
		if p == nil || p.next != q.next || p.n != q.n {
			return false
		}
		for i := 0; i < q.n; i++ {
			if !bytes.Equal(q.at(i), p.at(i)) {
				return false
			}
		}
	}
	return true
}

// Hashing: each key entry, queued item and queue counter is hashed with
// FNV-1a over a tagged, length-prefixed encoding and then mixed (the
// SplitMix64 finalizer) so that the hashes can be summed: a sum is
// independent of order and can be updated in O(1) per change. A value goes
// in as its length and its XXH64 digest: FNV-1a takes a multiplication per
// byte (about 0.5 GB/s), so hashing a 256 KiB value cost ten times copying
// it, at every execution.

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnvString(h uint64, b string) uint64 {
	for i := 0; i < len(b); i++ {
		h = (h ^ uint64(b[i])) * fnvPrime
	}
	return h
}

func fnvUint(h, v uint64) uint64 {
	for i := 0; i < 8; i++ {
		h = (h ^ (v & 0xff)) * fnvPrime
		v >>= 8
	}
	return h
}

func mix(h uint64) uint64 {
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// valueHash folds value v into h.
func valueHash(h uint64, v []byte) uint64 { return valueHashSum(h, len(v), xxhash.Sum64(v)) }

// valueHashSum is valueHash of a value of n bytes whose xxhash is sum.
func valueHashSum(h uint64, n int, sum uint64) uint64 {
	return fnvUint(fnvUint(h, uint64(n)), sum)
}

func entryHash(k string, v []byte) uint64 { return entryHashSum(k, len(v), xxhash.Sum64(v)) }

// entryHashSum is entryHash of a value of n bytes whose xxhash is sum.
func entryHashSum(k string, n int, sum uint64) uint64 {
	h := fnvUint(fnvOffset, 'k')
	h = fnvString(fnvUint(h, uint64(len(k))), k)
	return mix(valueHashSum(h, n, sum))
}

func itemHash(name string, seq uint64, v []byte) uint64 {
	h := fnvUint(fnvOffset, 'i')
	h = fnvString(fnvUint(h, uint64(len(name))), name)
	return mix(valueHash(fnvUint(h, seq), v))
}

func queueHash(name string, next uint64) uint64 {
	h := fnvUint(fnvOffset, 'q')
	h = fnvString(fnvUint(h, uint64(len(name))), name)
	return mix(fnvUint(h, next))
}
