package client

import (
	"maps"

	"github.com/correctables/correctables/correctable"
)

// Stamp says what a view was computed on (docs/design.md, "Stamps"): the replica that
// answered and how much of the history it held. The Client puts one in
// every View's Stamp; get it back with StampOf.
type Stamp struct {
	// Replica is the id of the replica that computed the view.
	Replica uint64
	// AppliedIndex is the raft index the replica had applied.
	AppliedIndex uint64
	// CommittedCount is the length of the committed order the view saw.
	CommittedCount uint64
	// VV is the version vector of operations the replica had received:
	// origin replica id to the highest sequence number received from it.
	// Shared between the views of one reply: treat it as read-only.
	VV map[uint64]uint64
	// StableTime is the replica's stable time, a hybrid logical clock
	// timestamp: every operation with a smaller timestamp had arrived.
	StableTime uint64
	// Op is the id the operation got at the replica that received it; zero
	// for read-only operations, which are not replicated.
	Op OpID
	// ReadVV, on the view of a quorum read (InvokeQuorum), is a version
	// vector no larger than VV that covers every operation the read's
	// result depends on: everything the replica had committed, and the
	// operations up to the last one it held tentatively that touch a key the
	// read reads, or a key that a transaction among those guards or writes,
	// and so on (all of VV for a Scan). Nil on other views, and from a
	// replica that does not report it.
	ReadVV map[uint64]uint64
	// Guarantees, for a view delivered through a Session, is what the view
	// satisfies for that session (Session.Check); nil outside a session.
	Guarantees *Guarantees
}

// OpID identifies an operation: the replica that received it and its
// sequence number there.
type OpID struct {
	Origin uint64
	Seq    uint64
}

// IsZero reports whether id is the zero OpID.
func (id OpID) IsZero() bool { return id == OpID{} }

// Covers reports whether s's version vector includes every operation of
// o's: a replica at s has received everything a replica at o had.
func (s Stamp) Covers(o Stamp) bool {
	for origin, seq := range o.VV {
		if s.VV[origin] < seq {
			return false
		}
	}
	return true
}

// Clone returns a copy of s that shares no memory with it.
func (s Stamp) Clone() Stamp {
	s.VV = maps.Clone(s.VV)
	s.ReadVV = maps.Clone(s.ReadVV)
	return s
}

// StampOf returns the Stamp of a view delivered by a Client, and false for a
// view without one (from another binding, or a combinator that dropped it).
func StampOf(v correctable.View[Result]) (Stamp, bool) {
	s, ok := v.Stamp.(Stamp)
	return s, ok
}
