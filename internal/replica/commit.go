package replica

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/correctables/correctables/internal/state"
)

// propose puts a strong operation into the log together with every
// operation of its causal context that this replica does not know to be
// committed. The entry is then self-contained: CAB's delivery condition
// (Creek's checkDep) holds at every replica that reads it, so no replica
// waits for an origin that crashed after proposing. If this replica does not
// hold the whole context (after a restart, some of it may be missing until
// gossip or the log brings it back) it waits and the retry proposes later.
func (r *Replica) propose(req *Req) {
	if !r.vv.Covers(req.Ctx) {
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
		if q == req || (q.ID.Seq <= req.Ctx[q.ID.Origin] && !r.recentlyProposed(q.ID)) {
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
// MaxEntryBytes of them; the next period takes the next.
func (r *Replica) proposeNoop() {
	var all []*Req
	for _, e := range r.tentative {
		if !e.committed {
			all = append(all, e.req)
		}
	}
	slices.SortFunc(all, compareReq)
	// A strong operation whose causal context this replica does not hold
	// (after a restart lost what gossip had brought) cannot go in, nor
	// anything after it from its origin: commit would skip them anyway.
	var ops []*Req
	blocked := map[uint64]bool{}
	for _, q := range all {
		if blocked[q.ID.Origin] || (q.Strong && !r.vv.Covers(q.Ctx)) {
			blocked[q.ID.Origin] = true
			continue
		}
		if !r.recentlyProposed(q.ID) {
			ops = append(ops, q)
		}
	}
	if chunks := r.chunks(ops); len(chunks) > 0 {
		r.proposeEntry(entry{Proposer: r.cfg.ID, Ops: chunks[0]})
	}
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
	}
	// A dropped proposal (no leader yet, or the leader's budget is full) is
	// retried by the tick loop; nothing else to do here.
	_ = r.node.Propose(encodeEntry(e))
}

// apply delivers one committed raft entry.
func (r *Replica) apply(ent *raftpb.Entry) error {
	if ent.GetIndex() <= r.applied {
		return nil // covered by a snapshot restored at start
	}
	r.applied = ent.GetIndex()
	switch ent.GetType() {
	case raftpb.EntryConfChange:
		var cc raftpb.ConfChange
		if err := proto.Unmarshal(ent.GetData(), &cc); err != nil {
			return fmt.Errorf("replica: conf change at %d: %w", ent.GetIndex(), err)
		}
		r.confState = r.node.ApplyConfChange(&cc)
		return nil
	case raftpb.EntryConfChangeV2:
		var cc raftpb.ConfChangeV2
		if err := proto.Unmarshal(ent.GetData(), &cc); err != nil {
			return fmt.Errorf("replica: conf change at %d: %w", ent.GetIndex(), err)
		}
		r.confState = r.node.ApplyConfChange(&cc)
		return nil
	}
	if len(ent.GetData()) == 0 {
		return nil // raft's empty entry at the start of a term
	}
	e, err := decodeEntry(ent.GetData())
	if err != nil {
		return fmt.Errorf("replica: entry %d: %w", ent.GetIndex(), err)
	}
	return r.commit(e.Ops)
}

// commit moves the operations of a delivered entry to the committed list
// (Algorithm 1, commit): those not committed yet, in (TS, ID) order. The
// tentative list keeps the rest. Execution is adjusted with as little
// rollback as the orders allow: the longest common prefix of the tentative
// list and the newly committed operations stays as it was executed.
func (r *Replica) commit(ops []*Req) error {
	// What an entry commits, in (TS, ID) order: each operation that extends
	// its origin's committed prefix and, if strong, whose causal context is
	// committed by then. The rest (an entry that overtook the one before it
	// from the same proposer, or a duplicate) is skipped; it comes again.
	// The decision depends only on the committed prefix, the same at every
	// replica at this point of the log.
	sorted := slices.SortedFunc(slices.Values(ops), compareReq)
	var fresh []*Req
	upto := r.committedVV.Clone()
	for _, q := range sorted {
		o := q.ID.Origin
		if q.ID.Seq != upto[o]+1 {
			continue
		}
		if q.Strong && !ctxCommitted(q, upto) {
			continue
		}
		upto[o] = q.ID.Seq
		fresh = append(fresh, q)
	}
	if len(fresh) == 0 {
		return nil
	}

	for _, q := range fresh {
		o := q.ID.Origin
		r.committedVV[o] = q.ID.Seq
		if q.ID.Seq > r.vv[o] {
			// Learnt from the log before gossip brought it.
			if q.ID.Seq != r.vv[o]+1 {
				return fmt.Errorf("replica: %v committed while %d.%d is missing", q.ID, o, r.vv[o]+1)
			}
			r.vv[o] = q.ID.Seq
			if q.ID.Seq == r.logBase[o]+uint64(len(r.log[o]))+1 {
				r.log[o] = append(r.log[o], q)
			}
			r.clk.Observe(q.TS)
			if q.TS > r.lastTS[o] {
				r.lastTS[o] = q.TS
			}
		}
		r.committed = append(r.committed, q.ID)
		delete(r.arrived, q.ID)
		delete(r.proposedAt, q.ID)
	}

	// The new logical order: the committed list (now with fresh at its
	// end), then the remaining tentative operations by (TS, ID) (Algorithm 1
	// line 53). The stack keeps its longest prefix in which no operation has
	// a conflicting operation that must now precede it but is above it or
	// not executed yet; the rest is rolled back and executed in the new
	// order (adjustExecution, line 42). Rollbacks only where necessary:
	// operations that commute keep their place, committed or not.
	base := r.committedCount() - len(fresh)
	posFresh := make(map[OpID]int, len(fresh))
	for i, q := range fresh {
		posFresh[q.ID] = base + i
	}
	inStack := map[OpID]bool{}
	for i := range r.tentative {
		e := &r.tentative[i]
		if p, ok := posFresh[e.req.ID]; ok {
			e.committed, e.cpos = true, p
			inStack[e.req.ID] = true
			r.ntent--
		}
	}
	var missing []executed
	for _, q := range fresh {
		if !inStack[q.ID] {
			missing = append(missing, executed{req: q, committed: true, cpos: posFresh[q.ID]})
		}
	}
	keep := r.keepLen(posFresh, missing)
	r.reexec(append(r.rollbackTo(keep), missing...))
	byID := make(map[OpID]state.Result, len(fresh))
	for _, e := range r.tentative {
		if _, ok := posFresh[e.req.ID]; ok {
			byID[e.req.ID] = e.result
		}
	}
	results := make([]state.Result, len(fresh))
	for i, q := range fresh {
		results[i] = byID[q.ID]
	}
	// Committed operations at the bottom of the stack join the base: nothing
	// below them can be rolled back any more, so their undo records go.
	drop := 0
	for drop < len(r.tentative) && r.tentative[drop].committed {
		drop++
	}
	r.tentative = slices.Delete(r.tentative, 0, drop)
	r.stats.Committed += len(fresh)
	for i, q := range fresh {
		r.rememberResult(q.ID, results[i])
	}

	for i, q := range fresh {
		delete(r.pendingStrong, q.ID)
		w, ok := r.waiting[q.ID]
		if !ok {
			continue
		}
		delete(r.waiting, q.ID)
		if q.Strong && q.ID.Origin == r.cfg.ID {
			r.stats.StrongCommitted++
			if results[i].Equal(w.tentative) {
				r.stats.StrongAccurate++
			}
		}
		r.emit(View{
			Client: w.client, Seq: w.seq, ID: q.ID, Result: results[i], Stable: true,
			Confirmed: w.sent && results[i].Equal(w.tentative), Last: true,
		})
	}
	return nil
}

// keepLen returns how much of the bottom of the stack stays executed as it
// is once the operations in posFresh are committed: the stack below the
// lowest operation that a conflicting newly committed operation must now
// precede but that was executed before it (the fresh one sits above it, or
// is missing from the stack). Only newly committed operations change place
// in the logical order, so only pairs with one of them can be out of order.
// One walk from the top down, with the smallest committed position of the
// fresh operations seen so far per key: linear in the stack, not quadratic.
func (r *Replica) keepLen(posFresh map[OpID]int, missing []executed) int {
	const none = math.MaxInt
	minPos := map[string]int{} // per key: smallest cpos of a fresh op above
	anyPos, wildPos := none, none
	note := func(q *Req, cpos int) {
		anyPos = min(anyPos, cpos)
		for _, k := range q.footprint() {
			if k == "*" {
				wildPos = min(wildPos, cpos)
			} else if p, ok := minPos[k]; !ok || cpos < p {
				minPos[k] = cpos
			}
		}
	}
	// first returns the smallest cpos of a fresh op seen so far that
	// conflicts with q.
	first := func(q *Req) int {
		p := wildPos
		for _, k := range q.footprint() {
			if k == "*" {
				return anyPos
			}
			if v, ok := minPos[k]; ok {
				p = min(p, v)
			}
		}
		return p
	}
	for _, y := range missing {
		note(y.req, y.cpos)
	}
	keep := len(r.tentative)
	for i := len(r.tentative) - 1; i >= 0; i-- {
		x := r.tentative[i]
		cpos, fresh := posFresh[x.req.ID]
		switch {
		case !x.committed:
			// Every fresh op precedes a tentative one.
			if first(x.req) != none {
				keep = i
			}
		case fresh:
			if first(x.req) < cpos {
				keep = i
			}
			note(x.req, cpos)
		}
		// Operations committed earlier precede every fresh one: in order.
	}
	return keep
}

// Step handles a message from a peer.
func (r *Replica) Step(m Message) error {
	switch m.Type {
	case MsgRaft:
		if m.Raft == nil {
			return errors.New("replica: raft message without payload")
		}
		return r.node.Step(m.Raft)
	case MsgOps:
		for _, q := range m.Ops {
			if q == nil || q.ID.Origin == 0 || !slices.Contains(r.cfg.Peers, q.ID.Origin) {
				return fmt.Errorf("replica: operation from unknown origin in message from %d", m.From)
			}
			if q.ID.Seq <= r.vv[q.ID.Origin] {
				continue // duplicate
			}
			// A gap (reordered or dropped message) is left to anti-entropy:
			// accepting out of order would break the per-origin FIFO that
			// version vectors rely on.
			r.receive(q)
		}
		return nil
	case MsgSync:
		r.answerSync(m)
		return nil
	}
	return fmt.Errorf("replica: unknown message type %d from %d", m.Type, m.From)
}

// answerSync sends a peer the operations its VV lacks, and learns its clock.
func (r *Replica) answerSync(m Message) {
	if r.vv.Covers(VV{m.From: m.VV[m.From]}) && m.Clock > r.lastTS[m.From] {
		// We hold every operation the peer had issued when it read its
		// clock, so nothing it issues later can be older than that.
		r.lastTS[m.From] = m.Clock
	}
	// What this replica sent the peer less than RetryTicks ago is likely
	// still on its way: the peer's VV cannot show it yet. Sending it again
	// at every sync would multiply the traffic on a slow link; it is sent
	// again only once RetryTicks have passed without the peer's VV moving.
	sent := r.gossipSent[m.From]
	if sent == nil || r.ticks-sent.at >= r.cfg.RetryTicks || !m.VV.Covers(sent.base) {
		sent = &gossipMark{vv: VV{}, base: m.VV.Clone(), at: r.ticks}
		r.gossipSent[m.From] = sent
	}
	var ops []*Req
	size := 0
	for _, o := range r.vv.origins() {
		// Operations forgotten after a snapshot are committed: the peer
		// gets them from the raft log or a snapshot instead.
		for s := max(m.VV[o], sent.vv[o], r.logBase[o]) + 1; s <= r.vv[o] && len(ops) < r.cfg.MaxOpsPerMsg; s++ {
			q, ok := r.Op(OpID{o, s})
			if !ok || (len(ops) > 0 && size+reqSize(q) > r.cfg.MaxEntryBytes) {
				break
			}
			ops = append(ops, q)
			size += reqSize(q)
			sent.vv[o] = s
		}
	}
	if len(ops) > 0 {
		r.send(Message{Type: MsgOps, To: m.From, Ops: ops})
	}
}

// gossipMark is what this replica sent a peer in answer to its syncs since
// tick at (while the peer's VV stayed at or above base).
type gossipMark struct {
	vv, base VV
	at       int
}

// Tick advances logical time: raft heartbeats and elections, anti-entropy,
// the periodic no-op and retries of strong requests.
func (r *Replica) Tick() {
	r.ticks++
	r.node.Tick()
	r.checkLeader()
	if r.ticks%r.cfg.GossipTicks == 0 {
		for _, p := range r.cfg.Peers {
			if p != r.cfg.ID {
				r.send(Message{Type: MsgSync, To: p, VV: r.vv.Clone(), Clock: r.clk.Peek()})
			}
		}
	}
	// A replica commits its own weak operations every NoopTicks; it commits
	// operations of others it holds, less often, in case their origin is
	// down (any replica may carry them into the log).
	if (r.ownTentative() && r.ticks-r.lastNoop >= r.cfg.NoopTicks) ||
		(r.ticks-r.lastNoop >= r.cfg.NoopTicks && r.staleForeign()) {
		r.lastNoop = r.ticks
		r.proposeNoop()
	}
	for _, id := range sortedIDs(r.pendingStrong) {
		if r.ticks-r.pendingStrong[id] >= r.cfg.RetryTicks {
			r.pendingStrong[id] = r.ticks
			if q, ok := r.Op(id); ok {
				r.propose(q)
			}
		}
	}
	for _, id := range sortedKeys(r.reads) {
		pr := r.reads[id]
		if pr.index == 0 && r.ticks-pr.askedAt >= r.cfg.RetryTicks {
			pr.askedAt = r.ticks
			r.node.ReadIndex(readCtx(r.incarnation, id))
		}
	}
}

// staleForeign reports whether an operation of another origin has waited
// 4*NoopTicks for commit here: its origin's own no-op should have committed
// it by then, so the origin may be down.
func (r *Replica) staleForeign() bool {
	for _, e := range r.tentative {
		if !e.committed && e.req.ID.Origin != r.cfg.ID && r.ticks-r.arrived[e.req.ID] >= 4*r.cfg.NoopTicks {
			return true
		}
	}
	return false
}

// checkLeader notices a new leader: what was proposed or asked without one
// (raft drops it) or through the old one is likely lost, so it is asked
// again now rather than after RetryTicks. Duplicates are skipped at
// delivery.
func (r *Replica) checkLeader() {
	lead := r.node.Status().Lead
	if lead == r.lastLead {
		return
	}
	r.lastLead = lead
	// Entries on their way through the old leader may be lost.
	clear(r.proposedAt)
	if lead == 0 {
		return
	}
	for _, id := range sortedIDs(r.pendingStrong) {
		r.pendingStrong[id] = r.ticks
		if q, ok := r.Op(id); ok {
			r.propose(q)
		}
	}
	for _, id := range sortedKeys(r.reads) {
		if pr := r.reads[id]; pr.index == 0 {
			pr.askedAt = r.ticks
			r.node.ReadIndex(readCtx(r.incarnation, id))
		}
	}
}

// ownTentative reports whether an operation of this replica awaits commit.
func (r *Replica) ownTentative() bool {
	return r.vv[r.cfg.ID] > r.committedVV[r.cfg.ID]
}

// HasReady reports whether Ready has anything.
func (r *Replica) HasReady() bool {
	return r.node.HasReady() || len(r.out.Messages) > 0 || len(r.out.Views) > 0 || len(r.out.Persist) > 0
}

// Ready collects what the driver must persist, send and deliver. Committed
// entries are applied here: raft hands out only entries already durable.
func (r *Replica) Ready() (Ready, error) {
	if r.node.HasReady() {
		rrd := r.node.Ready()
		defer r.checkLeader()
		if rrd.Snapshot != nil && !raft.IsEmptySnap(rrd.Snapshot) {
			if err := r.restore(rrd.Snapshot); err != nil {
				return Ready{}, err
			}
		}
		for _, ent := range rrd.CommittedEntries {
			if err := r.apply(ent); err != nil {
				return Ready{}, err
			}
		}
		if err := r.maybeSnapshot(); err != nil {
			return Ready{}, err
		}
		for _, rs := range rrd.ReadStates {
			if pr, ok := r.reads[parseReadCtx(r.incarnation, rs.RequestCtx)]; ok && pr.index == 0 {
				pr.index = max(rs.Index, 1)
			}
		}
		r.serveReads()
		rd := r.out
		r.out = Ready{}
		rd.HardState = rrd.HardState
		rd.Entries = rrd.Entries
		rd.Snapshot = rrd.Snapshot
		msgs := make([]Message, 0, len(rrd.Messages)+len(rd.Messages))
		for _, m := range rrd.Messages {
			msgs = append(msgs, Message{Type: MsgRaft, From: r.cfg.ID, To: m.GetTo(), Raft: m})
		}
		rd.Messages = append(msgs, rd.Messages...)
		rd.raft = &rrd
		return rd, nil
	}
	rd := r.out
	r.out = Ready{}
	return rd, nil
}

// Advance tells the replica the Ready was handled.
func (r *Replica) Advance(rd Ready) {
	if rd.raft != nil {
		r.node.Advance(*rd.raft)
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

// serveReads answers the strong reads whose read index has been applied,
// all on one rollback of the tentative list.
func (r *Replica) serveReads() {
	var due []uint64
	for _, id := range sortedKeys(r.reads) {
		if pr := r.reads[id]; pr.index != 0 && pr.index <= r.applied {
			due = append(due, id)
		}
	}
	if len(due) == 0 {
		return
	}
	results := make([]state.Result, len(due))
	r.withCommitted(func(st *state.State) {
		for i, id := range due {
			res, undo := st.Apply(r.reads[id].req.Op)
			st.Revert(undo)
			results[i] = res
		}
	})
	r.stats.Reads += len(due)
	for i, id := range due {
		pr := r.reads[id]
		delete(r.reads, id)
		r.emit(View{
			Client: pr.req.Client, Seq: pr.req.Seq, Result: results[i], Stable: true,
			Confirmed: pr.sent && results[i].Equal(pr.tentative), Last: true,
		})
	}
}

// conflicts reports whether two operations touch a common key or queue:
// operations that do not commute, whose relative order matters. Every
// operation in the lists may write, so a common key is a conflict.
func conflicts(a, b *Req) bool {
	fa, fb := a.footprint(), b.footprint()
	for _, x := range fa {
		for _, y := range fb {
			if x == y || x == "*" || y == "*" {
				return true
			}
		}
	}
	return false
}

// ctxCommitted reports whether a strong operation's causal context (itself
// excepted) is within the committed prefixes upto.
func ctxCommitted(q *Req, upto VV) bool {
	for o, s := range q.Ctx {
		if o == q.ID.Origin {
			s-- // the context includes the operation itself
		}
		if upto[o] < s {
			return false
		}
	}
	return true
}
