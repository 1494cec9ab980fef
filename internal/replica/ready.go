package replica

import (
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// The driver's interface: Ready out, Advance in (as etcd raft's RawNode).

// HasReady reports whether Ready has anything.
func (r *Replica) HasReady() bool {
	return r.node.HasReady() || len(r.out.Messages) > 0 || len(r.out.Views) > 0 || len(r.out.Persist) > 0 ||
		r.readsDue() || r.readNoop || r.snapshotDue() || r.proposalsDue()
}

// readsDue reports whether askReads would ask for a read index.
func (r *Replica) readsDue() bool { return len(r.unasked) > 0 && len(r.readBatches) == 0 }

// Ready collects what the driver must persist, send and deliver. Committed
// entries are applied here: raft hands out only entries already durable.
// The Ready's Views are readable until the next call of Ready: Advance
// gives their array back, to be used again.
func (r *Replica) Ready() (Ready, error) {
	r.askReads()
	r.gossipNew()
	r.proposeNew()
	if r.readNoop {
		// Strong reads wait for the operations they follow to commit:
		// propose this replica's own weak ones now. Strong ones are
		// proposed by their origins already, and others' weak ones by
		// theirs (within NoopTicks, or the stale rule's 4*NoopTicks if
		// their origin is down): proposing those here would put them in
		// the log twice.
		r.readNoop = false
		r.proposeOwn()
	}
	if r.node.HasReady() {
		rrd := r.node.Ready()
		defer r.checkLeader()
		if rrd.Snapshot != nil && !raft.IsEmptySnap(rrd.Snapshot) {
			if err := r.restore(rrd.Snapshot); err != nil {
				return Ready{}, err
			}
			r.stats.SnapshotsReceived++
		}
		if err := r.applyEntries(rrd.CommittedEntries); err != nil {
			return Ready{}, err
		}
		if err := r.maybeSnapshot(); err != nil {
			return Ready{}, err
		}
		for _, rs := range rrd.ReadStates {
			r.readIndexKnown(parseReadCtx(r.incarnation, rs.RequestCtx), rs.Index)
		}
		r.serveReads()
		rd := r.out
		r.out = Ready{Views: r.takeSpareViews()}
		rd.HardState = rrd.HardState
		rd.Entries = rrd.Entries
		rd.Snapshot = rrd.Snapshot
		// Early sending needs the term and vote it acts on to be durable: a
		// node that became leader in this very Ready (a single voter) must
		// write them first, or a crash could make it lead the same term twice.
		leader := r.node.IsLeader()
		if hs := rrd.HardState; hs != nil && !raft.IsEmptyHardState(hs) {
			if hs.GetTerm() != r.hsTerm || hs.GetVote() != r.hsVote {
				leader = false
			}
			r.hsTerm, r.hsVote = hs.GetTerm(), hs.GetVote()
		}
		early := func(m *raftpb.Message) bool {
			t := m.GetType()
			return leader && (t == raftpb.MsgApp || t == raftpb.MsgHeartbeat)
		}
		// One array for both lists: the early raft messages, then the
		// others, then the replica's own (gossip).
		nEarly := 0
		for _, m := range rrd.Messages {
			if early(m) {
				nEarly++
			}
		}
		all := make([]Message, nEarly, len(rrd.Messages)+len(rd.Messages))
		e := 0
		for _, m := range rrd.Messages {
			msg := Message{Type: MsgRaft, From: r.cfg.ID, To: m.GetTo(), Raft: m}
			if early(m) {
				// Early: the leader's followers write in parallel with it.
				all[e] = msg
				e++
				continue
			}
			all = append(all, msg)
		}
		all = append(all, rd.Messages...)
		if nEarly > 0 {
			rd.Early = all[:nEarly:nEarly]
		}
		rd.Messages = all[nEarly:]
		rd.raft = &rrd
		return rd, nil
	}
	if err := r.maybeSnapshot(); err != nil {
		return Ready{}, err
	}
	rd := r.out
	r.out = Ready{Views: r.takeSpareViews()}
	return rd, nil
}

// maxSpareViews bounds the array of views a replica keeps between Readies.
const maxSpareViews = 4096

// takeSpareViews returns the array given back by the last Advance,
// empty and cleared (no results kept alive through it), or nil. The Ready
// that array was handed out with is no longer readable.
func (r *Replica) takeSpareViews() []View {
	v := r.spareViews
	r.spareViews = nil
	clear(v[:cap(v)])
	return v
}

// Advance tells the replica the Ready was handled.
func (r *Replica) Advance(rd Ready) {
	// The views were delivered: their array serves the next Ready's (one
	// that a burst grew past maxSpareViews goes). rd stays readable until
	// the next Ready.
	if c := cap(rd.Views); c > 0 && c <= maxSpareViews && r.spareViews == nil {
		r.spareViews = rd.Views[:0]
	}
	if rd.raft != nil {
		r.node.Advance(*rd.raft)
	}
	// A snapshot the driver stored within the Ready (or dropped) is done;
	// one it writes in the background is done at SnapshotDone.
	if q := rd.CreateSnapshot; q != nil && !q.background {
		data, _ := q.Data() // encoded by the driver already; its size bounds the next
		r.SnapshotDone(len(data))
	}
	// A snapshot handed to the driver counts as sent: raft leaves the
	// follower's snapshot state, and if the snapshot was lost the follower's
	// next rejection makes the leader send another.
	for _, m := range rd.Messages {
		if m.Type == MsgRaft && m.Raft.GetType() == raftpb.MsgSnap {
			r.node.ReportSnapshot(m.To, true)
		}
	}
}
