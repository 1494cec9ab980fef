package replica

import (
	"maps"
	"slices"
)

// The broadcast half of conditional atomic broadcast (Creek §3.3, §5): strong
// operations proposed with their causal context, the periodic no-op that
// commits weak operations (Creek §4.4), and bounded entries.

// proposeStrong puts strong operations of this replica into the log, each
// together with every operation of its causal context that this replica
// does not know to be committed. The entries are then self-contained:
// CAB's delivery condition (Creek's checkDep) holds at every replica that
// reads them, so no replica waits for an origin that crashed after
// proposing. An operation whose whole context this replica does not hold
// (after a restart, some of it may be missing until gossip or the log
// brings it back) waits, and the retry proposes it later.
//
// The operations proposed together (those submitted since the last Ready,
// or those a retry or a new leader proposes again) and their contexts go
// in one run of entries instead of a run each. What goes in is what
// proposing them one after the other would put in the log (each context
// operation once: the later ones find it recently proposed); only the
// entries are fewer, each commits more.
func (r *Replica) proposeStrong(reqs []*Req) {
	var ready []*Req
	ctx := VV(nil) // the union of the contexts of ready
	up := r.proposable()
	for _, req := range reqs {
		if !r.vv.Covers(req.Ctx) || req.ID.Seq > up {
			continue
		}
		ready = append(ready, req)
		if len(ready) == 1 {
			ctx = req.Ctx // read only
			continue
		}
		if len(ready) == 2 {
			own := make(VV, len(ctx)+len(req.Ctx))
			maps.Copy(own, ctx)
			ctx = own
		}
		for o, s := range req.Ctx {
			ctx[o] = max(ctx[o], s)
		}
	}
	if len(ready) == 0 {
		return
	}
	var ops []*Req
	for _, e := range r.tentative {
		q := e.req
		if e.committed {
			continue
		}
		// Context operations this replica proposed within RetryTicks are in
		// an entry on its way; if that entry is lost, commit skips req (its
		// context is not committed) and the retry carries everything.
		if (q.ID.Seq <= ctx[q.ID.Origin] && !r.recentlyProposed(q.ID)) || slices.Contains(ready, q) {
			ops = append(ops, q)
		}
	}
	slices.SortFunc(ops, compareReq)
	// Entries are bounded in bytes: the context goes in entries of at most
	// MaxEntryBytes, oldest first, the operation itself in the last one.
	// Each is a per-origin prefix of what is left; one that arrives before
	// the one it follows commits only what it can (see commit).
	for _, chunk := range r.chunks(ops) {
		r.proposeEntry(entry{Proposer: r.cfg.ID, Ops: chunk})
	}
}

// chunks splits operations in (TS, ID) order into runs of at most
// MaxEntryBytes (at least one operation each).
func (r *Replica) chunks(ops []*Req) [][]*Req {
	var out [][]*Req
	var cur []*Req
	size := 0
	for _, q := range ops {
		n := reqSize(q)
		if len(cur) > 0 && size+n > r.cfg.MaxEntryBytes {
			out = append(out, cur)
			cur, size = nil, 0
		}
		cur = append(cur, q)
		size += n
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// reqSize estimates the encoded size of an operation: its keys and values,
// its causal context, and a bound on the rest.
func reqSize(q *Req) int {
	n := 64 + 16*len(q.Ctx) + q.Op.Size()
	if q.Op.Txn != nil {
		n += 8 * (len(q.Op.Txn.Guards) + len(q.Op.Txn.Then) + len(q.Op.Txn.Else))
	}
	return n
}

// proposeNoop commits this replica's tentative operations without a client
// operation (the periodic strong no-op of Creek §4.4): the oldest
// MaxEntryBytes of them; the next period takes the next. Operations of
// other origins go in too, fresh ones included, though their origin
// proposes them itself and the copy that commits second is a duplicate
// every replica writes and skips: the entry puts them in timestamp order
// with this replica's own, and so the commit order follows real time
// (TestCommitOrderFollowsTimestampsAcrossOrigins). Left to their origins'
// no-ops, two puts of a key from two replicas committed in the order of
// those no-ops' phases, 50 ms apart at most, and a state then reverted the
// key to the earlier put: weak and quorum reads returned ten times as many
// stale values (docs/benchmarks/cpq.md, "The no-op and the commit order").
func (r *Replica) proposeNoop() {
	ops := r.tentativeToPropose()
	if chunks := r.chunks(ops); len(chunks) > 0 {
		r.proposeEntry(entry{Proposer: r.cfg.ID, Ops: chunks[0]})
	}
}

// tentativeToPropose returns the operations this replica holds uncommitted
// that may go in an entry now, in timestamp order. A strong operation
// whose causal context this replica does not hold (after a restart lost
// what gossip had brought) cannot go in, nor anything after it from its
// origin: commit would skip them anyway. Nor can an own operation a leader
// has not made durable (proposable), nor one proposed a moment ago.
func (r *Replica) tentativeToPropose() []*Req {
	var all []*Req
	for _, e := range r.tentative {
		if !e.committed {
			all = append(all, e.req)
		}
	}
	slices.SortFunc(all, compareReq)
	all = r.notCommitted(all, r.node.IsLeader())
	var ops []*Req
	blocked := map[uint64]bool{}
	for _, q := range all {
		if blocked[q.ID.Origin] || (q.Strong && !r.vv.Covers(q.Ctx)) || (q.ID.Origin == r.cfg.ID && q.ID.Seq > r.proposable()) {
			blocked[q.ID.Origin] = true
			continue
		}
		if !r.recentlyProposed(q.ID) {
			ops = append(ops, q)
		}
	}
	return ops
}

// proposeOwn proposes this replica's own weak operations that no entry
// carries yet, oldest first, up to the first own strong operation (which
// goes in its own entries, with its context). Called as soon as NoopBatch
// of them wait, so that under load weak operations commit at the rate they
// arrive instead of a no-op period's worth at a time.
//
// Which own operations may go into an entry: see proposable.
func (r *Replica) proposeOwn() {
	var ops []*Req
	for s := max(r.ownProposed, r.committedVV[r.cfg.ID]) + 1; s <= r.proposable(); s++ {
		q, ok := r.Op(OpID{r.cfg.ID, s})
		if !ok || q.Strong {
			break
		}
		if !r.recentlyProposed(q.ID) {
			ops = append(ops, q)
		}
	}
	for _, chunk := range r.chunks(ops) {
		r.proposeEntry(entry{Proposer: r.cfg.ID, Ops: chunk})
	}
}

// proposable returns the highest own sequence number this replica may put
// in an entry now: everything it holds, in the Ready that persists it. A
// follower's proposal leaves as a message of that Ready, which the driver
// sends only after the write. A leader's appends leave before its write
// (Ready.Early), so that its own copy and its followers' are written in
// parallel, one sync on the path of an operation submitted at the leader,
// as for a proposal in etcd; a leader killed mid-write may leave a follower
// holding an operation its origin lost, and the restart fence (fence.go)
// keeps it from issuing that id again.
func (r *Replica) proposable() uint64 {
	return r.seq
}

// proposeNew proposes, in the Ready that persists them, the own strong
// operations submitted since the last Ready, and the own weak operations
// once NoopBatch of them wait for an entry (see proposable).
func (r *Replica) proposeNew() {
	upTo := r.proposable()
	n := 0
	var due []*Req
	for _, q := range r.toPropose {
		if q.ID.Seq > upTo {
			break
		}
		if _, pending := r.pendingStrong[q.ID]; pending {
			due = append(due, q)
		}
		n++
	}
	r.toPropose = r.toPropose[n:]
	if len(due) > 0 {
		r.proposeStrong(due)
	}
	if r.ownBatchDue(upTo) {
		r.proposeOwn()
	}
}

// proposalsDue reports whether proposeNew has something to propose.
// HasReady relies on it: it must be false whenever proposeNew would
// propose nothing, or the driver, which handles Readies while HasReady
// holds, would spin on empty Readies and never return to its loop (no
// ticks, no requests, no Stop).
func (r *Replica) proposalsDue() bool {
	upTo := r.proposable()
	return (len(r.toPropose) > 0 && r.toPropose[0].ID.Seq <= upTo) || r.ownBatchDue(upTo)
}

// ownBatchDue reports whether proposeOwn would propose something now: at
// least NoopBatch own operations up to upTo wait for an entry, and the
// first of them is weak. proposeOwn stops at the first own strong
// operation (it goes in its own entries, with its context, through
// proposeStrong), so when that one leads, nothing is due here: it is proposed
// again by the retry of pending strong operations (Tick) or at the next
// leader (checkLeader), and the weak ones behind it follow. That is the
// case of a follower that loses its leader (checkLeader forgets what it
// proposed) while a batch of its own strong operations waits for commit.
func (r *Replica) ownBatchDue(upTo uint64) bool {
	from := max(r.ownProposed, r.committedVV[r.cfg.ID]) + 1
	if upTo < from || upTo-from+1 < uint64(r.cfg.NoopBatch) {
		return false
	}
	q, ok := r.Op(OpID{r.cfg.ID, from})
	return ok && !q.Strong
}

// recentlyProposed reports whether this replica put the operation in an
// entry less than RetryTicks ago (and has not seen a leader change since).
func (r *Replica) recentlyProposed(id OpID) bool {
	t, ok := r.proposedAt[id]
	return ok && r.ticks-t < r.cfg.RetryTicks
}

func (r *Replica) proposeEntry(e entry) {
	for _, q := range e.Ops {
		r.proposedAt[q.ID] = r.ticks
		if q.ID.Origin == r.cfg.ID && q.ID.Seq > r.ownProposed {
			r.ownProposed = q.ID.Seq
		}
	}
	// At the leader, what is committed already stays out (inlog.go).
	if e.Ops = r.notCommitted(e.Ops, r.node.IsLeader()); len(e.Ops) == 0 {
		return
	}
	// A dropped proposal (no leader yet, or the leader's budget is full) is
	// retried by the tick loop; nothing else to do here.
	_ = r.node.Propose(encodeEntry(e))
}
