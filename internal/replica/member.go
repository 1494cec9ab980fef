package replica

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Membership. The set of replicas is raft's configuration: it changes only
// through configuration-change entries of the log (ConfChangeV2; a change of
// more than one voter goes through joint consensus, which raft leaves by
// itself), so every replica agrees on the members at every log index. The
// replicated membership state is that configuration plus what the log says
// about it: the peer address each added replica was announced with (in the
// change's context) and the ids removed, which are never accepted again.
// Snapshots carry both. Gossip goes to the current members only; version
// vectors keep the entries of removed origins (their operations may still
// be tentative at some replica, and commit as any other).

// Errors of ProposeMembers. Nothing is proposed when one is returned.
var (
	// ErrBadMemberChange: the change is not valid against the current
	// membership (a member added twice, an unknown one removed, an id that
	// was removed before, the last voter removed, ...).
	ErrBadMemberChange = errors.New("replica: invalid membership change")
	// ErrMemberChangePending: the configuration is in transition (joint, or
	// not known yet); try again once it has settled.
	ErrMemberChangePending = errors.New("replica: a membership change is in progress")
	// ErrRemoved: this replica was removed from the cluster.
	ErrRemoved = errors.New("replica: removed from the cluster")
)

// Member is a replica of the current configuration.
type Member struct {
	ID uint64
	// Addr is the peer address the replica was added with ("" for the
	// replicas the cluster was bootstrapped with: their addresses come from
	// each replica's own configuration).
	Addr string
	// Learner: the replica receives the log but does not vote (yet).
	Learner bool
}

// MemberChangeKind is one kind of membership change.
type MemberChangeKind uint8

const (
	// AddVoter adds a new replica as a voter.
	AddVoter MemberChangeKind = iota + 1
	// AddLearner adds a new replica as a learner: it catches up (from a
	// snapshot if the log was compacted) without counting in quorums.
	AddLearner
	// Promote makes a learner a voter.
	Promote
	// Remove removes a replica for good: its id is never accepted again.
	Remove
)

// MemberChange is one change of a membership proposal.
type MemberChange struct {
	Kind MemberChangeKind
	ID   uint64
	// Addr is the new replica's peer address (AddVoter, AddLearner).
	Addr string
}

// confContext is the context of a configuration change entry: the peer
// addresses of the replicas it adds.
type confContext struct {
	Addrs map[uint64]string `json:"addrs,omitempty"`
}

// Members returns the current configuration's replicas by id (voters and
// learners, both halves of a joint configuration). Before the replica knows
// a configuration (a fresh one before its first Ready, or one that joins
// and has not heard from the cluster yet) it is Config.Peers.
func (r *Replica) Members() []Member {
	out := make([]Member, 0, len(r.memberIDs))
	learners := map[uint64]bool{}
	if cs := r.confState; cs != nil {
		for _, id := range cs.GetLearners() {
			learners[id] = true
		}
		for _, id := range cs.GetLearnersNext() {
			learners[id] = true
		}
	}
	for _, id := range r.memberIDs {
		out = append(out, Member{ID: id, Addr: r.addrs[id], Learner: learners[id]})
	}
	return out
}

// MembershipGen changes whenever the membership (or an address in it)
// changes, so that a driver knows when to look at Members again.
func (r *Replica) MembershipGen() uint64 { return r.memberGen }

// Removed reports whether this replica has been removed from the cluster:
// it must stop, and its id is never accepted again.
func (r *Replica) Removed() bool { return r.removedIDs[r.cfg.ID] }

// RemovedIDs returns the ids removed from the cluster, ascending.
func (r *Replica) RemovedIDs() []uint64 { return slices.Sorted(maps.Keys(r.removedIDs)) }

// Joint reports whether the configuration is joint (a change of several
// voters in progress).
func (r *Replica) Joint() bool {
	return r.confState != nil && len(r.confState.GetVotersOutgoing()) > 0
}

// isMember reports whether id is in the current configuration.
func (r *Replica) isMember(id uint64) bool {
	_, ok := slices.BinarySearch(r.memberIDs, id)
	return ok
}

// knownOrigin reports whether operations of origin o are accepted from
// gossip: it is a member, or was one (its operations outlive it).
func (r *Replica) knownOrigin(o uint64) bool {
	return o != 0 && (r.isMember(o) || r.removedIDs[o] || r.vv[o] > 0)
}

// setConfState installs the configuration applied from the log or a
// snapshot.
func (r *Replica) setConfState(cs *raftpb.ConfState) {
	r.confState = cs
	r.refreshMembers()
}

// refreshMembers recomputes the member list from the configuration.
func (r *Replica) refreshMembers() {
	var ids []uint64
	if cs := r.confState; cs != nil {
		for _, l := range [][]uint64{cs.GetVoters(), cs.GetVotersOutgoing(), cs.GetLearners(), cs.GetLearnersNext()} {
			ids = append(ids, l...)
		}
	} else {
		ids = slices.Clone(r.cfg.Peers)
	}
	slices.Sort(ids)
	r.memberIDs = slices.Compact(ids)
	r.memberGen++
}

// voters returns the voters of the configuration's incoming half.
func (r *Replica) voters() []uint64 {
	if r.confState == nil {
		return r.cfg.Peers
	}
	return r.confState.GetVoters()
}

// checkMemberChanges checks a proposal against the replicated membership
// state: the configuration, the removed ids and the committed version
// vector (an id that has committed operations was a replica once). The
// same check runs when the change is applied, on state every replica has
// at that log index, so every replica accepts or refuses it alike.
func (r *Replica) checkMemberChanges(chs []MemberChange) error {
	if len(chs) == 0 {
		return fmt.Errorf("%w: no change", ErrBadMemberChange)
	}
	voters := map[uint64]bool{}
	for _, id := range r.voters() {
		voters[id] = true
	}
	learners := map[uint64]bool{}
	if r.confState != nil {
		for _, id := range r.confState.GetLearners() {
			learners[id] = true
		}
	}
	seen := map[uint64]bool{}
	for _, ch := range chs {
		id := ch.ID
		if id == 0 {
			return fmt.Errorf("%w: replica id 0", ErrBadMemberChange)
		}
		if seen[id] {
			return fmt.Errorf("%w: replica %d changed twice in one proposal", ErrBadMemberChange, id)
		}
		seen[id] = true
		switch ch.Kind {
		case AddVoter, AddLearner:
			switch {
			case voters[id] || learners[id]:
				return fmt.Errorf("%w: replica %d is already a member", ErrBadMemberChange, id)
			case r.removedIDs[id]:
				return fmt.Errorf("%w: replica %d was removed; a removed id is never reused (add the replacement under a new id)", ErrBadMemberChange, id)
			case r.committedVV[id] > 0:
				return fmt.Errorf("%w: replica id %d has operations in the log; choose a new id", ErrBadMemberChange, id)
			case ch.Addr == "":
				return fmt.Errorf("%w: replica %d added without a peer address", ErrBadMemberChange, id)
			}
			if ch.Kind == AddVoter {
				voters[id] = true
			} else {
				learners[id] = true
			}
		case Promote:
			if !learners[id] {
				return fmt.Errorf("%w: replica %d is not a learner", ErrBadMemberChange, id)
			}
			delete(learners, id)
			voters[id] = true
		case Remove:
			if !voters[id] && !learners[id] {
				return fmt.Errorf("%w: replica %d is not a member", ErrBadMemberChange, id)
			}
			delete(voters, id)
			delete(learners, id)
		default:
			return fmt.Errorf("%w: unknown change kind %d", ErrBadMemberChange, ch.Kind)
		}
	}
	if len(voters) == 0 {
		return fmt.Errorf("%w: it would remove every voter", ErrBadMemberChange)
	}
	return nil
}

// ProposeMembers proposes a membership change (one entry, through the
// leader). One change of at most one voter is applied as it is; a change of
// several voters (a replacement: remove one, add another) goes through
// joint consensus, which raft leaves on its own. The proposal is checked
// here and again when it is applied; raft drops it (as it drops any
// proposal) when there is no leader or another change is not applied yet:
// the caller watches Members to see it take effect.
func (r *Replica) ProposeMembers(chs []MemberChange) error {
	if r.confState == nil || r.Joint() {
		return ErrMemberChangePending
	}
	if err := r.checkMemberChanges(chs); err != nil {
		return err
	}
	cc := &raftpb.ConfChangeV2{}
	ctx := confContext{}
	for _, ch := range chs {
		var t raftpb.ConfChangeType
		switch ch.Kind {
		case AddVoter, Promote:
			t = raftpb.ConfChangeAddNode
		case AddLearner:
			t = raftpb.ConfChangeAddLearnerNode
		case Remove:
			t = raftpb.ConfChangeRemoveNode
		}
		if ch.Addr != "" && (ch.Kind == AddVoter || ch.Kind == AddLearner) {
			if ctx.Addrs == nil {
				ctx.Addrs = map[uint64]string{}
			}
			ctx.Addrs[ch.ID] = ch.Addr
		}
		cc.Changes = append(cc.Changes, &raftpb.ConfChangeSingle{Type: t.Enum(), NodeId: proto.Uint64(ch.ID)})
	}
	b, err := json.Marshal(ctx)
	if err != nil {
		return fmt.Errorf("replica: encoding a membership change: %w", err)
	}
	cc.Context = b
	return r.node.ProposeConfChange(cc)
}

// applyConfChange applies a committed configuration change: checked against
// the membership at this index (a change that fails the check is skipped
// whole, at every replica alike), then handed to raft, and the addresses
// and removals it carries recorded. The version-1 entries raft writes when
// it bootstraps a cluster (every proposal here is version 2) add the first
// voters without addresses and are taken as they are.
func (r *Replica) applyConfChange(index uint64, cc raftpb.ConfChangeI, bootstrap bool) {
	v2 := cc.AsV2()
	if v2.LeaveJoint() {
		if r.Joint() {
			r.setConfState(r.node.ApplyConfChange(cc))
		}
		return
	}
	var chs []MemberChange
	var ctx confContext
	if len(v2.GetContext()) > 0 {
		// A context that does not decode carries no address; the check
		// below then refuses the additions.
		_ = json.Unmarshal(v2.GetContext(), &ctx)
	}
	voter := map[uint64]bool{}
	for _, id := range r.voters() {
		voter[id] = true
	}
	learner := map[uint64]bool{}
	if r.confState != nil {
		for _, id := range r.confState.GetLearners() {
			learner[id] = true
		}
	}
	for _, ch := range v2.GetChanges() {
		id := ch.GetNodeId()
		switch ch.GetType() {
		case raftpb.ConfChangeAddNode:
			if learner[id] {
				chs = append(chs, MemberChange{Kind: Promote, ID: id})
			} else {
				chs = append(chs, MemberChange{Kind: AddVoter, ID: id, Addr: ctx.Addrs[id]})
			}
		case raftpb.ConfChangeAddLearnerNode:
			chs = append(chs, MemberChange{Kind: AddLearner, ID: id, Addr: ctx.Addrs[id]})
		case raftpb.ConfChangeRemoveNode:
			chs = append(chs, MemberChange{Kind: Remove, ID: id})
		default:
			chs = append(chs, MemberChange{ID: id}) // refused below
		}
	}
	if !bootstrap {
		if r.Joint() {
			r.logMember("configuration change skipped: the configuration is joint", index, nil)
			return
		}
		if err := r.checkMemberChanges(chs); err != nil {
			r.logMember("configuration change skipped", index, err)
			return
		}
	}
	r.setConfState(r.node.ApplyConfChange(cc))
	for _, ch := range chs {
		switch ch.Kind {
		case AddVoter, AddLearner:
			if ch.Addr != "" {
				r.addrs[ch.ID] = ch.Addr
			}
		case Remove:
			r.removedIDs[ch.ID] = true
			delete(r.addrs, ch.ID)
			delete(r.lastTS, ch.ID)
			delete(r.gossipSent, ch.ID)
		}
	}
	r.memberGen++
	// A snapshot at once: raft sends a replica that needs one the latest
	// stored snapshot, and a replica ignores a snapshot whose configuration
	// does not include it, so one taken before it was added never reaches
	// it.
	r.confSnap = !bootstrap
	if r.cfg.Logger != nil {
		r.cfg.Logger.Info("membership changed", "index", index, "members", r.memberIDs, "joint", r.Joint(), "removed", r.RemovedIDs())
	}
}

func (r *Replica) logMember(msg string, index uint64, err error) {
	if r.cfg.Logger != nil {
		r.cfg.Logger.Warn(msg, "index", index, "err", err)
	}
}

// snapshotMembers is the membership a snapshot carries beyond raft's
// ConfState: the announced peer addresses and the removed ids.
type snapshotMembers struct {
	addrs   map[uint64]string
	removed map[uint64]bool
}

// appendMembership encodes the membership after a snapshot's state: the
// addresses (count, then id, length, bytes each) and the removed ids
// (count, then ids), in ascending id order.
func (r *Replica) appendMembership(b []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(r.addrs)))
	for _, id := range slices.Sorted(maps.Keys(r.addrs)) {
		b = binary.AppendUvarint(b, id)
		b = binary.AppendUvarint(b, uint64(len(r.addrs[id])))
		b = append(b, r.addrs[id]...)
	}
	b = binary.AppendUvarint(b, uint64(len(r.removedIDs)))
	for _, id := range r.RemovedIDs() {
		b = binary.AppendUvarint(b, id)
	}
	return b
}

// members decodes what appendMembership encoded.
func (d *decoder) members() *snapshotMembers {
	m := &snapshotMembers{addrs: map[uint64]string{}, removed: map[uint64]bool{}}
	for n := d.count(3); n > 0 && d.err == nil; n-- {
		id := d.uvarint()
		l := d.count(1)
		if d.err != nil {
			break
		}
		m.addrs[id] = string(d.b[:l])
		d.b = d.b[l:]
	}
	for n := d.count(1); n > 0 && d.err == nil; n-- {
		m.removed[d.uvarint()] = true
	}
	return m
}
