package state

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/google/btree"
)

// Encodings. All integers are encoding/binary varints (uvarint for lengths
// and counts, zigzag varint for signed values), byte strings are a uvarint
// length then the bytes. Decoders accept only the canonical (minimal)
// varint form and reject unknown flag bits and trailing bytes, so every
// encoding is unique: Encode(Decode(b)) == b whenever Decode(b) succeeds.
// Nil and empty byte slices and Txn slices encode alike and decode as nil.
//
//	op:     kind u8 | flags u8 (1 ExpectAbsent, 2 Txn present) | key | value |
//	        expected | delta varint | limit varint | [txn]
//	txn:    n | n × (key | cmp u8 | value)            guards
//	        n | n × (delete u8 | key | value)         then
//	        n | n × (delete u8 | key | value)         else
//	result: code u8 | flags u8 (1 Found, 2 OK) | value | int varint |
//	        len varint | n | n × (key | value)
//	state:  version u8 (1) | n | n × (key | value)              keys, ascending
//	        n | n × (name | next uvarint | m | m × item)      queues, ascending

const (
	opFlagExpectAbsent = 1 << iota
	opFlagTxn
	opFlagsAll = opFlagExpectAbsent | opFlagTxn
)

const (
	resFlagFound = 1 << iota
	resFlagOK
	resFlagsAll = resFlagFound | resFlagOK
)

const snapshotVersion = 1

func appendBytes(b, v []byte) []byte {
	return append(binary.AppendUvarint(b, uint64(len(v))), v...)
}

func appendString(b []byte, v string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(v))), v...)
}

func appendWrites(b []byte, ws []Write) []byte {
	b = binary.AppendUvarint(b, uint64(len(ws)))
	for _, w := range ws {
		var d byte
		if w.Delete {
			d = 1
		}
		b = appendBytes(appendString(append(b, d), w.Key), w.Value)
	}
	return b
}

// EncodeOp returns the canonical binary encoding of o. It encodes any Op,
// valid or not.
func EncodeOp(o Op) []byte {
	return AppendOp(make([]byte, 0, OpSizeHint(o)), o)
}

// OpSizeHint is a capacity for o's encoding: exact for an op without a
// transaction, short of it for one with.
func OpSizeHint(o Op) int { return 16 + len(o.Key) + len(o.Value) + len(o.Expected) }

// AppendOp appends EncodeOp's encoding of o to b.
func AppendOp(b []byte, o Op) []byte {
	var flags byte
	if o.ExpectAbsent {
		flags |= opFlagExpectAbsent
	}
	if o.Txn != nil {
		flags |= opFlagTxn
	}
	b = append(b, byte(o.Kind), flags)
	b = appendString(b, o.Key)
	b = appendBytes(b, o.Value)
	b = appendBytes(b, o.Expected)
	b = binary.AppendVarint(b, o.Delta)
	b = binary.AppendVarint(b, int64(o.Limit))
	if t := o.Txn; t != nil {
		b = binary.AppendUvarint(b, uint64(len(t.Guards)))
		for _, g := range t.Guards {
			b = appendBytes(append(appendString(b, g.Key), byte(g.Cmp)), g.Value)
		}
		b = appendWrites(b, t.Then)
		b = appendWrites(b, t.Else)
	}
	return b
}

// DecodeOp decodes an EncodeOp encoding. It never panics; malformed input
// gives an error wrapping ErrCorrupt. It checks the encoding, not the op:
// run Op.Validate (Apply does) for that.
func DecodeOp(b []byte) (Op, error) {
	d := decoder{b: b}
	var o Op
	o.Kind = Kind(d.byte())
	flags := d.byte()
	if flags&^opFlagsAll != 0 {
		d.fail("op flags %#x", flags)
	}
	o.ExpectAbsent = flags&opFlagExpectAbsent != 0
	o.Key = d.string()
	o.Value = d.bytes()
	o.Expected = d.bytes()
	o.Delta = d.varint()
	o.Limit = d.int()
	if flags&opFlagTxn != 0 {
		t := &Txn{}
		if n := d.count(3); n > 0 {
			t.Guards = make([]Guard, n)
			for i := range t.Guards {
				t.Guards[i] = Guard{Key: d.string(), Cmp: Cmp(d.byte()), Value: d.bytes()}
			}
		}
		t.Then = d.writes()
		t.Else = d.writes()
		o.Txn = t
	}
	if err := d.finish("op"); err != nil {
		return Op{}, err
	}
	return o, nil
}

// EncodeResult returns the canonical binary encoding of r.
func EncodeResult(r Result) []byte {
	var flags byte
	if r.Found {
		flags |= resFlagFound
	}
	if r.OK {
		flags |= resFlagOK
	}
	b := make([]byte, 0, 16+len(r.Value))
	b = append(b, byte(r.Err), flags)
	b = appendBytes(b, r.Value)
	b = binary.AppendVarint(b, r.Int)
	b = binary.AppendVarint(b, r.Len)
	b = binary.AppendUvarint(b, uint64(len(r.Items)))
	for _, it := range r.Items {
		b = appendBytes(appendString(b, it.Key), it.Value)
	}
	return b
}

// DecodeResult decodes an EncodeResult encoding. It never panics; malformed
// input gives an error wrapping ErrCorrupt.
func DecodeResult(b []byte) (Result, error) {
	d := decoder{b: b}
	var r Result
	r.Err = Code(d.byte())
	flags := d.byte()
	if flags&^resFlagsAll != 0 {
		d.fail("result flags %#x", flags)
	}
	r.Found = flags&resFlagFound != 0
	r.OK = flags&resFlagOK != 0
	r.Value = d.bytes()
	r.Int = d.varint()
	r.Len = d.varint()
	if n := d.count(2); n > 0 {
		r.Items = make([]KV, n)
		for i := range r.Items {
			r.Items[i] = KV{Key: d.string(), Value: d.bytes()}
		}
	}
	if err := d.finish("result"); err != nil {
		return Result{}, err
	}
	return r, nil
}

// MarshalBinary returns a snapshot of the state's contents (not its limits
// or undo history). Equal states have identical snapshots.
func (s *State) MarshalBinary() ([]byte, error) {
	return s.AppendBinary(make([]byte, 0, s.BinarySize())), nil
}

// BinarySize is the length of MarshalBinary's encoding, computed without
// encoding: a caller that appends the state to a buffer of its own
// (AppendBinary) sizes the buffer once instead of growing it by copies.
func (s *State) BinarySize() int {
	n := 1 + uvarintLen(uint64(s.keys.Len()))
	s.keys.Ascend(func(e entry) bool {
		n += uvarintLen(uint64(len(e.key))) + len(e.key) + uvarintLen(uint64(len(e.value))) + len(e.value)
		return true
	})
	n += uvarintLen(uint64(len(s.queues)))
	for name, q := range s.queues {
		n += uvarintLen(uint64(len(name))) + len(name) + uvarintLen(q.next) + uvarintLen(uint64(q.n))
		for i := 0; i < q.n; i++ {
			v := q.at(i)
			n += uvarintLen(uint64(len(v))) + len(v)
		}
	}
	return n
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

// AppendBinary appends MarshalBinary's encoding of the state to b.
func (s *State) AppendBinary(b []byte) []byte {
	b = append(b, snapshotVersion)
	b = binary.AppendUvarint(b, uint64(s.keys.Len()))
	s.keys.Ascend(func(e entry) bool {
		b = appendBytes(appendString(b, e.key), e.value)
		return true
	})
	names := make([]string, 0, len(s.queues))
	for name := range s.queues {
		names = append(names, name)
	}
	slices.Sort(names)
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, name := range names {
		q := s.queues[name]
		b = appendString(b, name)
		b = binary.AppendUvarint(b, q.next)
		b = binary.AppendUvarint(b, uint64(q.n))
		for i := 0; i < q.n; i++ {
			b = appendBytes(b, q.at(i))
		}
	}
	return b
}

// UnmarshalBinary replaces the state's contents with a MarshalBinary
// snapshot and forgets the undo history (Undo records taken before no longer
// apply). On error the state is unchanged. On a zero State it sets the
// default limits. Snapshot values are not checked against the limits: a
// snapshot is state that some replica already accepted.
func (s *State) UnmarshalBinary(b []byte) error {
	d := decoder{b: b}
	if v := d.byte(); d.err == nil && v != snapshotVersion {
		d.fail("snapshot version %d", v)
	}
	keys := btree.NewG(btreeDegree, entryLess)
	var h uint64
	n := d.count(2)
	prev := ""
	for i := 0; i < n && d.err == nil; i++ {
		k, v := d.string(), d.bytes()
		if i > 0 && k <= prev {
			d.fail("snapshot keys out of order at %q", k)
		}
		prev = k
		e := entry{key: k, value: v, h: entryHash(k, v)}
		keys.ReplaceOrInsert(e)
		h += e.h
	}
	queues := map[string]*queue{}
	n = d.count(3)
	for i := 0; i < n && d.err == nil; i++ {
		name := d.string()
		if i > 0 && name <= prev {
			d.fail("snapshot queues out of order at %q", name)
		}
		prev = name
		next := d.uvarint()
		m := d.count(1)
		if d.err == nil && (next <= 1 || uint64(m) >= next) {
			d.fail("snapshot queue %q: %d items, next sequence %d", name, m, next)
		}
		q := newQueue()
		q.next = next - uint64(m) // pushBack advances it back to next
		for j := 0; j < m && d.err == nil; j++ {
			v := d.bytes()
			h += itemHash(name, q.next, v)
			q.pushBack(v)
		}
		h += queueHash(name, next)
		queues[name] = q
	}
	if err := d.finish("snapshot"); err != nil {
		return err
	}
	if s.keys == nil {
		s.lim = DefaultLimits()
	}
	s.keys, s.queues, s.hash = keys, queues, h
	return nil
}

// decoder reads a byte string, remembering the first error; once it has
// failed, every read returns a zero value.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
	}
}

func (d *decoder) finish(what string) error {
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return fmt.Errorf("decode %s: %w", what, d.err)
	}
	return nil
}

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.fail("truncated")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad uvarint")
		return 0
	}
	if n > 1 && d.b[n-1] == 0 { // a trailing zero group: overlong form
		d.fail("non-canonical uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	if n > 1 && d.b[n-1] == 0 {
		d.fail("non-canonical varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// int reads a varint that must fit in an int.
func (d *decoder) int() int {
	v := d.varint()
	if int64(int(v)) != v {
		d.fail("integer %d out of range", v)
		return 0
	}
	return int(v)
}

// count reads an element count and checks it against the remaining input,
// given that each element takes at least min bytes, so that garbage cannot
// make the decoder allocate more than a small multiple of its input.
func (d *decoder) count(min int) int {
	v := d.uvarint()
	if v > uint64(len(d.b)/min) {
		d.fail("count %d exceeds input", v)
		return 0
	}
	return int(v)
}

func (d *decoder) bytes() []byte {
	n := d.count(1)
	if d.err != nil || n == 0 {
		return nil
	}
	// A copy: decoded ops, results and snapshots must not alias a buffer the
	// caller may reuse.
	v := bytes.Clone(d.b[:n])
	d.b = d.b[n:]
	return v
}

func (d *decoder) string() string {
	n := d.count(1)
	if d.err != nil || n == 0 {
		return ""
	}
	v := string(d.b[:n])
	d.b = d.b[n:]
	return v
}

func (d *decoder) writes() []Write {
	n := d.count(3)
	if n == 0 {
		return nil
	}
	ws := make([]Write, n)
	for i := range ws {
		switch del := d.byte(); del {
		case 0, 1:
			ws[i].Delete = del == 1
		default:
			d.fail("write delete flag %d", del)
		}
		ws[i].Key = d.string()
		ws[i].Value = d.bytes()
	}
	return ws
}
