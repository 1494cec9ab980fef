package replica

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"slices"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/correctables/correctables/internal/state"
)

// ErrCorrupt is returned for bytes that do not decode.
var ErrCorrupt = errors.New("replica: corrupt encoding")

// entry is the payload of a raft log entry: operations to commit, in the
// order they are to be committed (the proposer sorts them; every replica
// sorts again, so the order never depends on the proposer).
type entry struct {
	Proposer uint64
	Ops      []*Req
	// Marker, if set, is a drain marker (drain.go): an entry of
	// markerVersion, without operations.
	Marker *marker
}

const entryVersion = 1

func encodeEntry(e entry) []byte {
	size := 1 + 2*binary.MaxVarintLen64
	for _, q := range e.Ops {
		size += reqSizeHint(q)
	}
	b := make([]byte, 0, size)
	b = append(b, entryVersion)
	b = binary.AppendUvarint(b, e.Proposer)
	b = binary.AppendUvarint(b, uint64(len(e.Ops)))
	for _, q := range e.Ops {
		b = AppendReq(b, q)
	}
	return b
}

func decodeEntry(b []byte) (entry, error) { return decodeEntryKnown(b, nil) }

// decodeEntryKnown is decodeEntry for a replica that may hold some of the
// entry's operations already (gossip usually brings them before the log
// does): an operation that known returns, with the same timestamp and
// strength, is that Req, and its causal context and op are skipped rather
// than decoded again. (The replica would use the Req it holds anyway: the
// operation is executed in its stack.)
func decodeEntryKnown(b []byte, known func(OpID) (*Req, bool)) (entry, error) {
	d := decoder{b: b}
	switch v := d.byte(); {
	case v == markerVersion:
		e := entry{Proposer: d.uvarint()}
		e.Marker = d.marker()
		if d.err == nil && len(d.b) != 0 {
			d.err = fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(d.b))
		}
		return e, d.err
	case v != entryVersion:
		return entry{}, fmt.Errorf("%w: entry version %d", ErrCorrupt, v)
	}
	e := entry{Proposer: d.uvarint()}
	n := d.count(minReqBytes)
	if n > 0 {
		e.Ops = make([]*Req, 0, n)
	}
	for i := 0; i < n && d.err == nil; i++ {
		e.Ops = append(e.Ops, d.reqKnown(known))
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(d.b))
	}
	return e, d.err
}

// AppendReq appends the encoding of a Req (used in log entries, on the wire
// between replicas, and for persisted own operations).
func AppendReq(b []byte, q *Req) []byte {
	b = binary.AppendUvarint(b, q.ID.Origin)
	b = binary.AppendUvarint(b, q.ID.Seq)
	b = binary.AppendUvarint(b, q.TS)
	if q.Strong {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = appendVV(b, q.Ctx)
	// The op goes straight into b, then moves up by its length's varint:
	// one copy of a few hundred bytes instead of a buffer per op.
	start := len(b)
	b = state.AppendOp(b, q.Op)
	n := len(b) - start
	var l [binary.MaxVarintLen64]byte
	k := binary.PutUvarint(l[:], uint64(n))
	b = append(b, l[:k]...)
	copy(b[start+k:], b[start:start+n])
	copy(b[start:], l[:k])
	return b
}

// reqSizeHint is a capacity for AppendReq's encoding of q: exact but for
// the op's (state.OpSizeHint), so that a buffer kept in the raft log or a
// peer queue carries little unused room.
func reqSizeHint(q *Req) int {
	op := state.OpSizeHint(q.Op)
	n := uvarintLen(q.ID.Origin) + uvarintLen(q.ID.Seq) + uvarintLen(q.TS) + 1 +
		uvarintLen(uint64(len(q.Ctx))) + uvarintLen(uint64(op)) + op
	for o, s := range q.Ctx {
		n += uvarintLen(o) + uvarintLen(s)
	}
	return n
}

// uvarintLen is the length of binary.AppendUvarint's encoding of x.
func uvarintLen(x uint64) int { return 1 + (bits.Len64(x|1)-1)/7 }

// DecodeReq decodes one Req and returns the bytes after it.
func DecodeReq(b []byte) (*Req, []byte, error) {
	d := decoder{b: b}
	q := d.req()
	return q, d.b, d.err
}

func appendVV(b []byte, v VV) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	// Origins in ascending order, sorted on the stack for the usual few.
	var buf [8]uint64
	os := buf[:0]
	for o := range v {
		os = append(os, o)
	}
	slices.Sort(os)
	for _, o := range os {
		b = binary.AppendUvarint(b, o)
		b = binary.AppendUvarint(b, v[o])
	}
	return b
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrCorrupt, what)
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if d.err != nil || len(d.b) == 0 {
		d.fail("short")
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
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// Least encoded sizes, which bound what a claimed count can be.
const (
	// minReqBytes: origin, seq, ts, strong flag, VV length, op length and
	// the op's kind and flags.
	minReqBytes = 8
	// minVVEntryBytes: origin and sequence number.
	minVVEntryBytes = 2
)

// count reads a count of elements of at least min bytes each, or (min 1) a
// byte length, and checks it against the remaining input: garbage cannot
// make the decoder allocate more than a small multiple of its input. No
// other bound: what the limits let into a log entry, a message or a
// snapshot (state.Limits: values of 1 MiB, operations of 3 MiB, snapshots
// of any size) must decode.
func (d *decoder) count(min int) int {
	n := d.uvarint()
	if d.err != nil {
		return 0
	}
	if n > uint64(len(d.b)/min) {
		d.fail(fmt.Sprintf("count %d exceeds the %d bytes left", n, len(d.b)))
		return 0
	}
	return int(n)
}

func (d *decoder) vv() VV {
	n := d.count(minVVEntryBytes)
	if n == 0 {
		return nil
	}
	v := make(VV, n)
	for i := 0; i < n && d.err == nil; i++ {
		v[d.uvarint()] = d.uvarint()
	}
	return v
}

// reqs decodes n Reqs (nil if n is 0). Each is allocated on its own: a
// Req kept in the log must not keep the others of its message alive.
func (d *decoder) reqs(n int) []*Req {
	if n == 0 {
		return nil
	}
	qs := make([]*Req, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		qs = append(qs, d.req())
	}
	return qs
}

// reqKnown is req, but returns the Req known has for the operation's id
// when its timestamp and strength match, skipping the rest of the
// encoding.
func (d *decoder) reqKnown(known func(OpID) (*Req, bool)) *Req {
	if known == nil {
		return d.req()
	}
	start := d.b
	id := OpID{Origin: d.uvarint(), Seq: d.uvarint()}
	ts := d.uvarint()
	strong := d.byte()
	if d.err != nil {
		return &Req{}
	}
	if q, ok := known(id); ok && q.TS == ts && (strong == 1) == q.Strong && strong <= 1 {
		for i, n := 0, d.count(minVVEntryBytes); i < n && d.err == nil; i++ {
			d.uvarint()
			d.uvarint()
		}
		if n := d.count(1); d.err == nil {
			d.b = d.b[n:]
		}
		return q
	}
	d.b = start
	return d.req()
}

func (d *decoder) req() *Req {
	q := &Req{}
	q.ID.Origin = d.uvarint()
	q.ID.Seq = d.uvarint()
	q.TS = d.uvarint()
	switch d.byte() {
	case 0:
	case 1:
		q.Strong = true
	default:
		d.fail("bad strong flag")
	}
	q.Ctx = d.vv()
	n := d.count(1)
	if d.err != nil {
		return q
	}
	op, err := state.DecodeOp(d.b[:n])
	if err != nil {
		d.err = fmt.Errorf("%w: %w", ErrCorrupt, err)
		return q
	}
	q.Op = op
	d.b = d.b[n:]
	if q.ID.Origin == 0 || q.ID.Seq == 0 {
		d.fail("zero operation id")
	}
	return q
}

// maxMessageVV bounds the entries of a decoded version vector.
const maxMessageVV = 1 << 10

// EncodeMessage encodes a replica message for the wire between replicas.
func EncodeMessage(m Message) ([]byte, error) { return AppendMessage(nil, m) }

// AppendMessage appends EncodeMessage's encoding of m to b (a buffer the
// caller reuses: the peer links encode every message they send).
func AppendMessage(b []byte, m Message) ([]byte, error) {
	size := 2 + 5*binary.MaxVarintLen64 + len(m.VV)*2*binary.MaxVarintLen64
	for _, q := range m.Ops {
		size += reqSizeHint(q)
	}
	if m.Raft != nil {
		size += proto.Size(m.Raft)
	}
	b = slices.Grow(b, size)
	b = append(b, entryVersion, byte(m.Type))
	b = binary.AppendUvarint(b, m.From)
	b = binary.AppendUvarint(b, m.To)
	b = binary.AppendUvarint(b, m.Clock)
	b = appendVV(b, m.VV)
	b = binary.AppendUvarint(b, uint64(len(m.Ops)))
	for _, q := range m.Ops {
		b = AppendReq(b, q)
	}
	if m.Raft != nil {
		var err error
		// proto.Size above cached the sizes MarshalAppend uses.
		b, err = proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(b, m.Raft)
		if err != nil {
			return nil, fmt.Errorf("replica: encode raft message: %w", err)
		}
	}
	return b, nil
}

// DecodeMessage decodes what EncodeMessage produced. It never panics on
// garbage and rejects anything malformed with ErrCorrupt.
func DecodeMessage(b []byte) (Message, error) {
	d := decoder{b: b}
	if v := d.byte(); d.err == nil && v != entryVersion {
		return Message{}, fmt.Errorf("%w: message version %d", ErrCorrupt, v)
	}
	m := Message{Type: MsgType(d.byte())}
	m.From, m.To, m.Clock = d.uvarint(), d.uvarint(), d.uvarint()
	if m.VV = d.vv(); len(m.VV) > maxMessageVV {
		d.fail("version vector too large")
	}
	m.Ops = d.reqs(d.count(minReqBytes))
	if d.err != nil {
		return Message{}, d.err
	}
	switch m.Type {
	case MsgRaft:
		m.Raft = &raftpb.Message{}
		if err := proto.Unmarshal(d.b, m.Raft); err != nil {
			return Message{}, fmt.Errorf("%w: raft message: %w", ErrCorrupt, err)
		}
	case MsgOps, MsgSync:
		if len(d.b) != 0 {
			return Message{}, fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(d.b))
		}
	default:
		return Message{}, fmt.Errorf("%w: message type %d", ErrCorrupt, m.Type)
	}
	return m, nil
}
