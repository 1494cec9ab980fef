package replica

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/correctables/correctables/internal/state"
)

// OpID names an operation that enters the replicated lists: the replica that
// accepted it and its sequence number there. Sequence numbers start at 1 and
// have no gaps, so one number per origin (a VV entry) describes a prefix.
type OpID struct {
	Origin uint64
	Seq    uint64
}

func (id OpID) String() string { return fmt.Sprintf("%d.%d", id.Origin, id.Seq) }

// IsZero reports whether id names no operation (read-only operations that
// never enter the lists).
func (id OpID) IsZero() bool { return id == OpID{} }

// VV is a version vector: for every origin, the highest sequence number of a
// contiguous prefix of its operations.
type VV map[uint64]uint64

// Covers reports whether v includes every operation o includes.
func (v VV) Covers(o VV) bool {
	for id, s := range o {
		if v[id] < s {
			return false
		}
	}
	return true
}

// Clone returns an independent copy.
func (v VV) Clone() VV { return maps.Clone(v) }

// origins returns the origins in ascending order, for deterministic walks.
func (v VV) origins() []uint64 { return slices.Sorted(maps.Keys(v)) }

func (v VV) String() string {
	s := "{"
	for i, o := range v.origins() {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%d:%d", o, v[o])
	}
	return s + "}"
}

// Req is an operation as replicated (Creek Algorithm 1, line 1).
type Req struct {
	ID     OpID
	TS     uint64 // hybrid logical clock timestamp at the origin
	Op     state.Op
	Strong bool
	// Ctx is the causal context of a strong operation: the operations its
	// origin had received when it was accepted (itself included).
	Ctx VV

	fp  []fkey  // footprint, computed on first use
	fp1 [1]fkey // fp's array when it has one element (most operations)
}

// fkey is one element of a footprint: a key, a queue, or every key and
// queue (wildKey).
type fkey struct {
	kind byte // 'k' key, 'q' queue, '*' everything
	name string
}

// wildKey is the footprint element of an operation that conflicts with
// every other.
var wildKey = fkey{kind: '*'}

func (k fkey) String() string {
	if k == wildKey {
		return "*"
	}
	return string(k.kind) + ":" + k.name
}

// footprint lists the keys and queues the operation touches. A key and a
// queue of the same name are different elements.
func (r *Req) footprint() []fkey {
	if r.fp != nil {
		return r.fp
	}
	op := r.Op
	one := func(k fkey) []fkey {
		r.fp1[0] = k
		return r.fp1[:1]
	}
	var fp []fkey
	switch op.Kind {
	case state.OpEnqueue, state.OpDequeue:
		fp = one(fkey{'q', op.Key})
	case state.OpTxn:
		fp = []fkey{}
		if op.Txn != nil {
			for _, g := range op.Txn.Guards {
				fp = append(fp, fkey{'k', g.Key})
			}
			for _, w := range op.Txn.Then {
				fp = append(fp, fkey{'k', w.Key})
			}
			for _, w := range op.Txn.Else {
				fp = append(fp, fkey{'k', w.Key})
			}
		}
	case state.OpNoop:
		fp = r.fp1[:0]
	case state.OpScan:
		// Read-only operations never enter the lists; should one, it
		// conflicts with everything.
		fp = one(wildKey)
	default:
		fp = one(fkey{'k', op.Key})
	}
	r.fp = fp
	return fp
}

// compareReq is the tentative order: by timestamp, then by id.
func compareReq(a, b *Req) int {
	if c := cmp.Compare(a.TS, b.TS); c != 0 {
		return c
	}
	if c := cmp.Compare(a.ID.Origin, b.ID.Origin); c != 0 {
		return c
	}
	return cmp.Compare(a.ID.Seq, b.ID.Seq)
}

// ClientRequest is what a client submits to one replica.
type ClientRequest struct {
	// Client and Seq identify the request to its client; views carry them.
	Client uint64
	Seq    uint64
	Op     state.Op
	// Strong selects the protocol: a strong operation is ordered by CAB (or,
	// if read-only, read through ReadIndex); a weak one executes locally and
	// is gossiped.
	Strong bool
	// Want selects the views the client receives.
	Want Want
	// ReadVV asks, for a read-only request, that its tentative view's stamp
	// carry Stamp.ReadVV.
	ReadVV bool
}

// Want is a set of views a client asks for.
type Want uint8

const (
	// WantTentative asks for the tentative view, computed at once on the
	// replica's current order (the preliminary view).
	WantTentative Want = 1 << iota
	// WantStable asks for the stable view, computed once the operation's
	// place in the committed order is fixed (the final view). For a weak
	// read-only operation there is no stable view.
	WantStable
)

// Stamp says what a view was computed on (docs/design.md, "Stamps").
type Stamp struct {
	Replica uint64
	// AppliedIndex is the raft index the replica had applied.
	AppliedIndex uint64
	// CommittedCount is the length of the committed list the view saw.
	CommittedCount int
	// VV covers the operations the replica had received.
	VV VV
	// StableTime: every operation with a smaller timestamp had arrived.
	StableTime uint64
	// ReadVV, on the tentative view of a read that asked for it
	// (ClientRequest.ReadVV), covers the operations the read's result
	// depends on (Replica.readVV); nil otherwise.
	ReadVV VV
}

// View is one result for a client request.
type View struct {
	Client uint64
	Seq    uint64
	// ID is the operation's id, zero for read-only operations.
	ID     OpID
	Result state.Result
	// Stable marks the view computed on the committed order.
	Stable bool
	// Confirmed marks a stable view whose result equals the tentative view
	// sent before: the wire can carry it without the payload.
	Confirmed bool
	// Last marks the last view of the request: a request gets at most two
	// views (tentative, then stable), and nothing after the one marked Last.
	Last bool
	// Lost marks a stable view without a result: the operation committed
	// while this replica lagged behind a snapshot, its result was large (so
	// kept only as a digest) and differs from the tentative one.
	Lost  bool
	Stamp Stamp
}

// MsgType tells what a Message carries.
type MsgType uint8

const (
	// MsgRaft carries a raft message.
	MsgRaft MsgType = iota + 1
	// MsgOps carries operations, in order per origin (reliable broadcast).
	MsgOps
	// MsgSync carries the sender's VV and clock (anti-entropy); the receiver
	// answers with the operations the sender lacks.
	MsgSync
)

func (t MsgType) String() string {
	switch t {
	case MsgRaft:
		return "raft"
	case MsgOps:
		return "ops"
	case MsgSync:
		return "sync"
	}
	return fmt.Sprintf("MsgType(%d)", uint8(t))
}

// Message goes from one replica to another.
type Message struct {
	Type MsgType
	From uint64
	To   uint64
	Raft *raftpb.Message
	Ops  []*Req
	VV   VV
	// Clock is the sender's clock reading with MsgSync: every operation it
	// accepts later has a larger timestamp.
	Clock uint64
}
