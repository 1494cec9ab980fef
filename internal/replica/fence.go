package replica

import (
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// The restart fence: no operation id is ever issued twice.
//
// A leader sends its appends before it writes them (Ready.Early), and the
// entries may carry its own new operations, persisted by the same write.
// A leader killed during that write may come back without an operation
// (o, s) that a follower holds in its log and that a later leader may
// still commit. Were the restarted replica to issue s again for another
// operation, commit would take one for the other (a duplicate id is
// skipped), and the client of the second would get the first's result.
//
// So a restarted replica takes no update (Submit answers ErrBusy) until
// every entry of the terms it may have led before is settled, committed or
// never to be: until it has applied an entry (or a snapshot) of a later
// term. A leader of term T that committed an entry of T at index j has,
// up to j, every entry any later leader will hold (raft's Leader
// Completeness and Log Matching), and entries of earlier terms past j are
// never committed (terms do not decrease along a log). Having applied up
// to j, the replica has learnt its lost operations that were committed
// (through the log, or gossip from replicas that did), and goes on after
// the highest.
//
// The terms it may have led are at most the term of its durable hard
// state: a leader sends early only in a Ready that does not change its
// term or vote, so those are durable first. If it did not vote for itself
// in that term, or learns that another replica leads it, it did not lead
// it, and an applied entry of that term settles the earlier ones. A
// replica that restarts as a follower in a stable cluster usually replays
// such an entry from its own log and is not fenced at all; a leader that
// restarts waits for the next leader's first entry. Reads are not fenced.

// fence sets the fence of a replica recovering with hard state hs.
func (r *Replica) fence(hs *raftpb.HardState) {
	if hs.GetTerm() == 0 {
		return // new storage: this replica has issued nothing
	}
	r.fenceTerm = hs.GetTerm()
	r.fenceSelf = hs.GetVote() == r.cfg.ID
}

// settle records that an entry or snapshot of term has been applied, and
// lifts the fence if that settles the terms this replica may have led.
func (r *Replica) settle(term uint64) {
	r.appliedTerm = max(r.appliedTerm, term)
	t := r.appliedTerm
	if r.fenceTerm == 0 || t < r.fenceTerm || (t == r.fenceTerm && r.fenceSelf) {
		return
	}
	if r.cfg.Logger != nil && !r.fencedAt.IsZero() {
		// Lifted by what it learnt after its replay, not by the replay:
		// the wait its clients saw.
		r.cfg.Logger.Info("restart fence lifted: taking updates", "term", term, "applied", r.applied,
			"fenced_term", r.fenceTerm, "waited", time.Since(r.fencedAt).Round(time.Millisecond))
	}
	r.fenceTerm, r.fenceSelf = 0, false
	// Own operations of an earlier run that others committed were learnt
	// from the log or from gossip: issue after them.
	r.seq = max(r.seq, r.vv[r.cfg.ID])
}

// otherLeads records that lead leads term: if that is another replica and
// the fenced term, this replica did not lead it.
func (r *Replica) otherLeads(term, lead uint64) {
	if r.fenceTerm != 0 && term == r.fenceTerm && lead != 0 && lead != r.cfg.ID {
		r.fenceSelf = false
		r.settle(0) // an entry of term may have been applied already
	}
}

// Fenced reports whether the replica refuses updates after a restart until
// it has caught up with its cluster (see fence.go).
func (r *Replica) Fenced() bool { return r.fenceTerm != 0 }
