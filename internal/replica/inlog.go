package replica

import (
	"slices"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// A leader keeps out of its log the operations its log already carries,
// uncommitted, in its current term. Without it an operation whose commit
// took longer than RetryTicks went into the log again at every retry of its
// origin, and again from each replica that proposed it as a stale foreign
// operation (proposeNoop): with 256 KiB values, slow to commit while a
// snapshot was being written, the log carried every operation about twice
// (1.5 GB of duplicates in one minute of `bench load --value-size 262144`),
// which made the snapshots, bounded by the bytes of log applied, twice as
// frequent, and the replicas slower still. Delivery skips a duplicate
// (committable), so nothing depended on them but the bytes.
//
// The set is valid while this replica leads in one term: its log up to
// there is its own and keeps every entry it appended (raft truncates only
// a follower's log). It forgets an operation when the entry that carries it
// is applied, committed by it or not (an entry that overtook the one with
// the operation's predecessor skips it, and the retry of its proposer
// brings it again); it forgets everything when the term or the role
// changes, so that an entry of a deposed leader, which may be lost, never
// keeps an operation out.
type inLog struct {
	term uint64
	ops  map[OpID]struct{}
}

// inLogNow returns the set of operations this replica's log carries
// uncommitted as the leader of the current term, nil if it is not the
// leader.
func (r *Replica) inLogNow() map[OpID]struct{} {
	st := r.node.Status()
	if st.RaftState != raft.StateLeader {
		if r.carried.ops != nil {
			r.carried = inLog{}
		}
		return nil
	}
	if r.carried.ops == nil || r.carried.term != st.GetTerm() {
		r.carried = inLog{term: st.GetTerm(), ops: map[OpID]struct{}{}}
		r.seedCarried()
	}
	return r.carried.ops
}

// maxSeedBytes bounds what a new leader reads of its log to learn what it
// carries.
const maxSeedBytes = 256 << 20

// seedCarried records the operations of the entries a new leader holds
// past its applied index: its log is the term's, every one of them will be
// applied, and the origins propose their operations again at once on a
// change of leader (checkLeader), so without it every election appended
// again what the log held uncommitted (thousands of 256 KiB operations
// after the elections of a loaded cluster). Entries raft holds but has not
// persisted yet are not read: the retries they may bring are duplicates,
// skipped.
func (r *Replica) seedCarried() {
	last, err := r.cfg.Storage.LastIndex()
	if err != nil || last <= r.applied {
		return
	}
	ents, err := r.cfg.Storage.Entries(r.applied+1, last+1, maxSeedBytes)
	if err != nil {
		return // compacted meanwhile, or none: nothing to learn
	}
	for _, ent := range ents {
		if ent.GetType() != raftpb.EntryNormal || len(ent.GetData()) == 0 || ent.GetData()[0] != entryVersion {
			continue
		}
		if e, err := decodeEntryKnown(ent.GetData(), r.Op); err == nil {
			carry(r.carried.ops, e.Ops)
		}
	}
}

// notCarried returns the operations of ops that need to go into the log:
// at the leader (set non-nil), not those its log carries (set) nor those
// committed already (a proposal that was on its way while an earlier entry
// committed them: under load, forwarded proposals wait long enough in the
// queues for that, and they made up most of the duplicates left). ops
// itself if it keeps them all.
func (r *Replica) notCarried(ops []*Req, set map[OpID]struct{}) []*Req {
	if set == nil {
		return ops
	}
	gone := func(q *Req) bool {
		if q.ID.Seq <= r.committedVV[q.ID.Origin] {
			return true
		}
		_, ok := set[q.ID]
		return ok
	}
	i := 0
	for i < len(ops) && !gone(ops[i]) {
		i++
	}
	if i == len(ops) {
		return ops
	}
	out := append([]*Req(nil), ops[:i]...)
	for _, q := range ops[i+1:] {
		if !gone(q) {
			out = append(out, q)
		}
	}
	return out
}

// carry records that the log now carries ops (set nil: not the leader).
func carry(set map[OpID]struct{}, ops []*Req) {
	if set == nil {
		return
	}
	for _, q := range ops {
		set[q.ID] = struct{}{}
	}
}

// applied forgets the operations of an entry being applied.
func (x *inLog) applied(ops []*Req) {
	if len(x.ops) == 0 {
		return
	}
	for _, q := range ops {
		delete(x.ops, q.ID)
	}
}

// stepProposal steps a proposal a follower forwarded. At the leader, the
// operations its log carries already are taken out of the proposal's
// entries (an entry left without any is dropped, and the proposal if none
// is left); what it appends, it records.
func (r *Replica) stepProposal(m *raftpb.Message) error {
	set := r.inLogNow()
	if set == nil {
		return r.node.Step(m)
	}
	var carried []*Req
	ents := m.Entries[:0:0]
	for _, ent := range m.Entries {
		if ent.GetType() != raftpb.EntryNormal || len(ent.GetData()) == 0 || ent.GetData()[0] != entryVersion {
			ents = append(ents, ent)
			continue
		}
		e, err := decodeEntryKnown(ent.GetData(), r.Op)
		if err != nil {
			ents = append(ents, ent) // delivery reports it
			continue
		}
		ops := r.notCarried(e.Ops, set)
		if len(ops) == 0 {
			continue
		}
		if len(ops) < len(e.Ops) {
			e.Ops = ops
			ent = &raftpb.Entry{Type: ent.Type, Data: encodeEntry(e)}
		}
		carried = append(carried, ops...)
		ents = append(ents, ent)
	}
	if len(ents) == 0 {
		return nil
	}
	if len(ents) < len(m.Entries) || !slices.Equal(ents, m.Entries) {
		// A proposal carries nothing but these (raft's stepLeader).
		m = &raftpb.Message{Type: m.Type, From: m.From, To: m.To, Term: m.Term, Entries: ents}
	}
	if err := r.node.Step(m); err != nil {
		return err
	}
	carry(set, carried)
	return nil
}
