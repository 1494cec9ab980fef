package replica

// Logical time: raft ticks, anti-entropy, the periodic no-op and retries.

// Tick advances logical time: raft heartbeats and elections, anti-entropy,
// the periodic no-op and retries of strong requests.
func (r *Replica) Tick() {
	r.ticks++
	r.node.Tick()
	r.checkLeader()
	if r.ticks%r.cfg.GossipTicks == 0 {
		for _, p := range r.memberIDs {
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
	r.drainTick()
	var due []*Req
	for _, id := range sortedIDs(r.pendingStrong) {
		if r.ticks-r.pendingStrong[id] >= r.cfg.RetryTicks {
			r.pendingStrong[id] = r.ticks
			if q, ok := r.Op(id); ok {
				due = append(due, q)
			}
		}
	}
	r.proposeStrong(due) // one run of entries for all of them
	for _, id := range sortedKeys(r.readBatches) {
		if b := r.readBatches[id]; r.ticks-b.askedAt >= r.cfg.RetryTicks {
			b.askedAt = r.ticks
			r.node.ReadIndex(readCtx(r.incarnation, id))
		}
	}
}

// staleForeign reports whether an operation of another origin waits for
// commit here and is stale (foreignStale).
func (r *Replica) staleForeign() bool {
	for _, e := range r.tentative {
		if !e.committed && e.req.ID.Origin != r.cfg.ID && r.foreignStale(e.req.ID) {
			return true
		}
	}
	return false
}

// foreignStale reports whether an operation of another origin has waited
// 4*NoopTicks for commit since it arrived here: its origin's own no-op
// should have committed it by then, so the origin may be down, and any
// replica may carry it into the log.
func (r *Replica) foreignStale(id OpID) bool {
	return r.ticks-r.arrived[id] >= 4*r.cfg.NoopTicks
}

// checkLeader notices a new leader: what was proposed or asked without one
// (raft drops it) or through the old one is likely lost, so it is asked
// again now rather than after RetryTicks. Duplicates are skipped at
// delivery.
func (r *Replica) checkLeader() {
	st := r.node.Status()
	lead := st.Lead
	if lead == r.lastLead {
		return
	}
	r.lastLead = lead
	r.otherLeads(st.GetTerm(), lead)
	// Entries on their way through the old leader may be lost.
	clear(r.proposedAt)
	r.ownProposed = 0
	if lead == 0 {
		return
	}
	var due []*Req
	for _, id := range sortedIDs(r.pendingStrong) {
		r.pendingStrong[id] = r.ticks
		if q, ok := r.Op(id); ok {
			due = append(due, q)
		}
	}
	r.proposeStrong(due) // one run of entries for all of them
	for _, id := range sortedKeys(r.readBatches) {
		r.readBatches[id].askedAt = r.ticks
		r.node.ReadIndex(readCtx(r.incarnation, id))
	}
}

// ownTentative reports whether an operation of this replica awaits commit.
func (r *Replica) ownTentative() bool {
	return r.vv[r.cfg.ID] > r.committedVV[r.cfg.ID]
}

// ReportUnreachable tells the replica that a raft message to peer id
// could not be sent (its transport dropped it: the peer is down, or its
// queue full). Raft probes the peer afresh rather than count what it sent
// as on its way.
func (r *Replica) ReportUnreachable(id uint64) { r.node.ReportUnreachable(id) }
