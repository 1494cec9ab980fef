package replica

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
)

// Draining a replica before its removal. A weak operation is acknowledged
// by its origin alone (the preliminary view) and reaches the others by
// gossip or the log; a replica removed while it runs stops as soon as it
// applies its removal, so its own operations that nothing had carried
// elsewhere yet would be lost with it. The drain closes that window, and
// goes through the log so that every replica agrees on it:
//
//  1. Whoever removes replica X first commits a drain marker for X.
//  2. Every replica applies the marker at the same index. X, applying it,
//     refuses new client operations (ErrDraining: its clients go to
//     another replica), proposes every operation it holds uncommitted at
//     once (not at the next no-op period), and, once every operation it
//     accepted up to its last sequence number is committed, commits a
//     "drained X" marker.
//  3. The remover applies "drained X" and only then proposes the
//     configuration change. Drained(X) tells it so.
//
// Both markers are replicated state: a replica that restarts (or installs
// a snapshot) while draining goes on draining. A replica that drains and
// is then not removed (its remover gave up) keeps refusing clients until
// a removal, which is the only way out of draining.

// ErrDraining: this replica is draining before its removal from the
// cluster and accepts no new client operation; the client should go to
// another replica.
var ErrDraining = errors.New("replica: draining before its removal from the cluster; use another replica")

// markerVersion is the first byte of a marker entry (operations are
// entryVersion); a marker carries no operation.
const markerVersion = 2

// markerKind is what a marker entry says.
type markerKind uint8

const (
	// markDrain: replica ID is to drain.
	markDrain markerKind = iota + 1
	// markDrained: replica ID (the proposer) has every own operation up to
	// Seq committed and accepts no more.
	markDrained
)

// marker is a log entry about a replica's drain.
type marker struct {
	Kind markerKind
	ID   uint64
	Seq  uint64
}

// drainState is the replicated drain state: the replicas whose drain
// marker was applied and those that confirmed it, until their removal.
type drainState struct {
	draining map[uint64]bool
	drained  map[uint64]bool
	// drainedAt is the tick this replica last proposed its own "drained"
	// marker (local, for the retry).
	drainedAt int
	proposed  bool
}

func encodeMarker(proposer uint64, m marker) []byte {
	b := []byte{markerVersion}
	b = binary.AppendUvarint(b, proposer)
	b = append(b, byte(m.Kind))
	b = binary.AppendUvarint(b, m.ID)
	return binary.AppendUvarint(b, m.Seq)
}

// marker decodes the rest of a marker entry (after its version byte).
func (d *decoder) marker() *marker {
	m := &marker{Kind: markerKind(d.byte()), ID: d.uvarint(), Seq: d.uvarint()}
	if d.err == nil && (m.Kind != markDrain && m.Kind != markDrained || m.ID == 0) {
		d.fail(fmt.Sprintf("bad marker %d for replica %d", m.Kind, m.ID))
	}
	return m
}

// ProposeDrain proposes the drain marker for replica id (a member that is
// not draining yet). Like any proposal it may be dropped (no leader): the
// caller watches Draining and proposes again.
func (r *Replica) ProposeDrain(id uint64) error {
	if r.confState == nil {
		return ErrMemberChangePending
	}
	if !r.isMember(id) || r.removedIDs[id] {
		return fmt.Errorf("%w: replica %d is not a member", ErrBadMemberChange, id)
	}
	if r.Draining(id) {
		return nil
	}
	return r.node.Propose(encodeMarker(r.cfg.ID, marker{Kind: markDrain, ID: id}))
}

// Draining reports whether the drain marker of replica id was applied here
// (and id is not removed yet).
func (r *Replica) Draining(id uint64) bool { return r.drain.draining[id] && !r.removedIDs[id] }

// Drained reports whether replica id confirmed its drain through the log:
// every operation it acknowledged is committed.
func (r *Replica) Drained(id uint64) bool { return r.drain.drained[id] && !r.removedIDs[id] }

// applyMarker applies a committed marker entry. The checks use state every
// replica has at this index, so every replica applies or skips it alike.
func (r *Replica) applyMarker(index, proposer uint64, m *marker) {
	if r.drain.draining == nil {
		r.drain.draining, r.drain.drained = map[uint64]bool{}, map[uint64]bool{}
	}
	switch m.Kind {
	case markDrain:
		if !r.isMember(m.ID) || r.removedIDs[m.ID] || r.drain.draining[m.ID] {
			return
		}
		r.drain.draining[m.ID] = true
		if m.ID == r.cfg.ID {
			// Propose at the next tick (not during recovery's replay,
			// before the replica knows its own operations).
			r.drain.drainedAt, r.drain.proposed = 0, false
		}
	case markDrained:
		if proposer != m.ID || !r.drain.draining[m.ID] || r.drain.drained[m.ID] || r.committedVV[m.ID] < m.Seq {
			return
		}
		r.drain.drained[m.ID] = true
	}
	if r.cfg.Logger != nil {
		what := "draining before removal"
		if m.Kind == markDrained {
			what = "drained: every operation it acknowledged is committed"
		}
		r.cfg.Logger.Info(what, "replica", m.ID, "index", index, "committed", r.committedVV[m.ID])
	}
}

// drainTick runs at every tick of a draining replica: it proposes what it
// holds uncommitted (each operation again after RetryTicks, as long as it
// is not committed), then its "drained" marker, again every RetryTicks
// until it is applied.
func (r *Replica) drainTick() {
	self := r.cfg.ID
	if !r.Draining(self) || r.drain.drained[self] {
		return
	}
	if r.committedVV[self] < r.seq {
		r.proposeAllTentative()
		return
	}
	if r.drain.proposed && r.ticks-r.drain.drainedAt < r.cfg.RetryTicks {
		return
	}
	r.drain.proposed, r.drain.drainedAt = true, r.ticks
	_ = r.node.Propose(encodeMarker(self, marker{Kind: markDrained, ID: self, Seq: r.seq}))
}

// proposeAllTentative is proposeNoop without its bound of one entry: every
// tentative operation that may go in an entry now, in entries of at most
// MaxEntryBytes.
func (r *Replica) proposeAllTentative() {
	ops := r.tentativeToPropose()
	for _, chunk := range r.chunks(ops) {
		r.proposeEntry(entry{Proposer: r.cfg.ID, Ops: chunk})
	}
}

// appendDrain encodes the drain state after a snapshot's membership: the
// draining ids (count, ids), then the drained ones, ascending, removed ids
// left out.
func (r *Replica) appendDrain(b []byte) []byte {
	for _, set := range []map[uint64]bool{r.drain.draining, r.drain.drained} {
		ids := slices.DeleteFunc(slices.Sorted(maps.Keys(set)), func(id uint64) bool { return r.removedIDs[id] })
		b = binary.AppendUvarint(b, uint64(len(ids)))
		for _, id := range ids {
			b = binary.AppendUvarint(b, id)
		}
	}
	return b
}

// drainSets decodes what appendDrain encoded.
func (d *decoder) drainSets() (draining, drained map[uint64]bool) {
	draining, drained = map[uint64]bool{}, map[uint64]bool{}
	for _, set := range []map[uint64]bool{draining, drained} {
		for n := d.count(1); n > 0 && d.err == nil; n-- {
			set[d.uvarint()] = true
		}
	}
	return draining, drained
}

// installDrain takes a snapshot's drain state (empty from a snapshot of a
// version before 5, which had none).
func (r *Replica) installDrain(draining, drained map[uint64]bool) {
	if draining == nil {
		draining, drained = map[uint64]bool{}, map[uint64]bool{}
	}
	r.drain.draining, r.drain.drained = draining, drained
	r.drain.proposed = false
}

// withoutDrain returns snapshot data with its drain state (tail, which
// appendDrain encoded at its end) replaced by none. A backup is restored
// into a new cluster (snapshot restore): a replica that was draining in
// the old one must not refuse clients in the new one for ever.
func withoutDrain(data, tail []byte) []byte {
	if len(tail) <= 2 {
		return data // no drain state: two empty sets
	}
	return append(data[:len(data)-len(tail):len(data)-len(tail)], 0, 0)
}

// CheckMembers checks a membership change against the current membership
// without proposing it, as ProposeMembers does (ErrMemberChangePending
// while the configuration is unknown or joint, ErrBadMemberChange for a
// change that cannot be made): a removal checks its change before it
// drains the replica, so that a change that cannot be made now does not
// leave a replica draining.
func (r *Replica) CheckMembers(chs []MemberChange) error {
	if r.Removed() {
		return ErrRemoved
	}
	if r.confState == nil || r.Joint() {
		return ErrMemberChangePending
	}
	return r.checkMemberChanges(chs)
}
