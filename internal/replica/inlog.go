package replica

import (
	"slices"

	"go.etcd.io/raft/v3/raftpb"
)

// A leader keeps out of its log the operations committed already. A
// proposal may be on its way for a long time: a follower's retry, another
// replica's proposal of a stale foreign operation, or a re-proposal after a
// change of leader wait in the peer queues and the leader's inbound queue,
// and under 256 KiB values they arrived after an entry had committed their
// operations, which went into the log again (correctables_duplicate_commits_total).
// Delivery would skip them (committable); only the bytes are saved.
//
// Only what is committed is certain to need no entry any more: an
// operation the log merely carries uncommitted may still be skipped at
// delivery (its entry overtook its predecessor's) and need the entry a
// retry brings. (Keeping those out too took the duplicates of a loaded
// cluster to zero, but a restarted former leader's backlog then committed
// a retry period at a time, and the kill soak's round 8 stalled.)

// notCommitted returns the operations of ops not committed yet if this
// replica leads (ops itself if it keeps them all, or does not lead).
func (r *Replica) notCommitted(ops []*Req, leader bool) []*Req {
	gone := func(q *Req) bool { return q.ID.Seq <= r.committedVV[q.ID.Origin] }
	if !leader || !slices.ContainsFunc(ops, gone) {
		return ops
	}
	return slices.DeleteFunc(slices.Clone(ops), gone)
}

// stepProposal steps a proposal a follower forwarded. At the leader, the
// operations committed already are taken out of the proposal's entries (an
// entry left without any is dropped, and the proposal if none is left).
func (r *Replica) stepProposal(m *raftpb.Message) error {
	if !r.node.IsLeader() {
		return r.node.Step(m)
	}
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
		ops := r.notCommitted(e.Ops, true)
		if len(ops) == 0 {
			continue
		}
		if len(ops) < len(e.Ops) {
			e.Ops = ops
			ent = &raftpb.Entry{Type: ent.Type, Data: encodeEntry(e)}
		}
		ents = append(ents, ent)
	}
	if len(ents) == 0 {
		return nil
	}
	if !slices.Equal(ents, m.Entries) {
		// A proposal carries nothing but these (raft's stepLeader).
		m = &raftpb.Message{Type: m.Type, From: m.From, To: m.To, Term: m.Term, Entries: ents}
	}
	return r.node.Step(m)
}
