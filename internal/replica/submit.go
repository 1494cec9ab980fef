package replica

import (
	"fmt"
	"slices"

	"github.com/correctables/correctables/internal/state"
)

// Client requests (Creek Algorithm 1, invoke): weak and strong operations,
// and read-only ones (Creek §4.4).

// Submit accepts a client request. Its views come out through Ready.
func (r *Replica) Submit(cr ClientRequest) error {
	if err := r.checkOp(cr.Op); err != nil {
		return err
	}
	if cr.Op.ReadOnly() {
		return r.submitRead(cr)
	}
	if r.fenceTerm != 0 {
		return ErrFenced // restarted, and an id it issued before may be in flight (fence.go)
	}
	if r.ownUncommitted() >= r.cfg.MaxTentative || (cr.Strong && len(r.pendingStrong) >= r.cfg.MaxPending) {
		return ErrBusy
	}
	// After a restart, own operations of the run before may have come back
	// from the log or from gossip (fence.go): never issue an id again.
	r.seq = max(r.seq, r.vv[r.cfg.ID]) + 1
	req := &Req{ID: OpID{r.cfg.ID, r.seq}, TS: r.clk.Now(), Op: cr.Op, Strong: cr.Strong}
	if cr.Strong {
		req.Ctx = r.vv.Clone()
		req.Ctx[r.cfg.ID] = req.ID.Seq
	}
	res, _ := r.receive(req)
	r.out.Persist = append(r.out.Persist, req)
	w := &waiter{client: cr.Client, seq: cr.Seq, want: cr.Want, tentative: res}
	if cr.Want&WantTentative != 0 {
		r.emit(View{Client: cr.Client, Seq: cr.Seq, ID: req.ID, Result: res, Last: cr.Want&WantStable == 0})
		w.sent = true
	}
	if cr.Want&WantStable != 0 {
		r.waiting[req.ID] = w
	}
	r.newOwn = append(r.newOwn, req) // gossiped at the next Ready, batched
	if cr.Strong {
		r.pendingStrong[req.ID] = r.ticks
		// Proposed at the next Ready, which persists it (proposeNew,
		// see proposable), with the other strong operations submitted since
		// the last one: one run of entries for the batch.
		r.toPropose = append(r.toPropose, req)
	}
	return nil
}

// checkOp refuses what no replica state can serve: any operation while this
// replica drains before its removal, and an operation over the limits.
func (r *Replica) checkOp(op state.Op) error {
	if r.Draining(r.cfg.ID) {
		return ErrDraining
	}
	if err := op.Validate(r.cfg.Limits); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidOp, err)
	}
	return nil
}

// submitRead serves a read-only request: a weak read executes at once on the
// tentative state and sends nothing to peers (Creek §4.4); a strong read also
// asks raft for a read index and answers from the committed state once the
// replica has applied up to it and committed every operation it had
// received when the read arrived (its causal context, as a strong update's).
func (r *Replica) submitRead(cr ClientRequest) error {
	if cr.Strong && len(r.reads) >= r.cfg.MaxPending {
		return ErrBusy
	}
	// A strong read that asks for the final view only has no use for the
	// tentative state's result (it is kept only to mark the final view a
	// confirmation of a preliminary one): one execution, on the committed
	// state, serves it.
	var res state.Result
	sent := false
	if cr.Want&WantTentative != 0 || !cr.Strong {
		res = r.execRead(cr.Op)
		v := View{Client: cr.Client, Seq: cr.Seq, Result: res, Last: !cr.Strong || cr.Want&WantStable == 0}
		if cr.ReadVV {
			v.Stamp.ReadVV = r.readVV(cr.Op)
		}
		r.emit(v)
		sent = true
	}
	if !cr.Strong || cr.Want&WantStable == 0 {
		return nil
	}
	r.nextRead++
	pr := &pendingRead{req: cr, tentative: res, sent: sent}
	if !r.committedVV.Covers(r.vv) {
		// Operations it follows are still tentative here: the next Ready
		// proposes this replica's own weak ones (one entry for all such
		// reads) rather than leave them to the periodic no-op.
		pr.ctx = r.vv.Clone()
		r.readNoop = true
	}
	r.reads[r.nextRead] = pr
	r.unasked = append(r.unasked, r.nextRead)
	return nil
}

// askReads asks raft for one read index for every strong read submitted
// since the last batch was asked, once no batch is waiting for its index:
// one ReadIndex, and so one round of heartbeats from the leader to every
// follower, serves all of them (Raft thesis §6.4: the leader amortizes the
// confirmation of its leadership over the reads it accumulated; etcd's
// server keeps one such request in flight the same way). A read that
// arrives while a batch is in flight joins the next one, asked after it
// arrived, so its index is still one the leader confirmed after the read
// began. Asking at every Ready instead cost a heartbeat round per one or
// two reads under load: about 5 peer messages per strong read at 256
// outstanding (bench load --workload c --modes strong), 0.4 with one in
// flight.
func (r *Replica) askReads() {
	if len(r.unasked) == 0 || len(r.readBatches) > 0 {
		return
	}
	r.nextBatch++
	r.readBatches[r.nextBatch] = &readBatch{ids: r.unasked, askedAt: r.ticks}
	r.unasked = nil
	r.node.ReadIndex(readCtx(r.incarnation, r.nextBatch))
}

// readIndexKnown records the read index raft returned for a batch.
func (r *Replica) readIndexKnown(batch, index uint64) {
	b, ok := r.readBatches[batch]
	if !ok {
		return // answered already (a retry's duplicate), or another incarnation's
	}
	delete(r.readBatches, batch)
	for _, id := range b.ids {
		if pr, ok := r.reads[id]; ok && pr.index == 0 {
			pr.index = max(index, 1)
		}
	}
}

func (r *Replica) execRead(op state.Op) state.Result {
	res, undo := r.st.Apply(op)
	r.st.Revert(undo) // read-only: nothing to undo, but keep the contract
	r.stats.Reads++
	return res
}

// serveReads answers the strong reads whose read index has been applied,
// all on one rollback of the tentative list.
func (r *Replica) serveReads() {
	// Every Ready comes here: find the due reads first and sort only
	// those, not every read still waiting for its index.
	var due []uint64
	for id, pr := range r.reads {
		if pr.index != 0 && pr.index <= r.applied && (pr.ctx == nil || r.committedVV.Covers(pr.ctx)) {
			due = append(due, id)
		}
	}
	if len(due) == 0 {
		return
	}
	slices.Sort(due)
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

// ReadNow serves a weak read at once, outside the Ready cycle: the view
// Submit would emit for it (Creek §4.4: a weak read executes on the
// tentative state and sends nothing), returned instead of emitted. It is
// for an owner that runs weak reads on its requests' goroutines while its
// loop waits for a write to sync (the server), holding the replica
// exclusively meanwhile, as it holds it for every other call.
//
// What the view shows must be durable before the owner delivers it, as
// for a view that comes out of Ready: ReadNow serves the read (ok) only
// when every operation of the state it reads has been handed out in a
// Ready to persist, so that the owner needs to wait for nothing but the
// write in progress, if any. Otherwise (an operation submitted since the
// last Ready, or a min_vv the replica does not cover yet) it reports
// false and serves nothing: the owner submits the request as usual. It
// refuses what Submit would refuse, with the same errors.
func (r *Replica) ReadNow(cr ClientRequest, minVV VV) (v View, ok bool, err error) {
	if !cr.Op.ReadOnly() || cr.Strong || cr.Want != WantTentative {
		return View{}, false, nil
	}
	if err := r.checkOp(cr.Op); err != nil {
		return View{}, false, err
	}
	if len(r.out.Persist) > 0 || (minVV != nil && !r.vv.Covers(minVV)) {
		return View{}, false, nil
	}
	res := r.execRead(cr.Op)
	v = View{Client: cr.Client, Seq: cr.Seq, Result: res, Last: true, Stamp: r.stamp()}
	if cr.ReadVV {
		v.Stamp.ReadVV = r.readVV(cr.Op)
	}
	return v, true, nil
}

// readVV returns a version vector that covers every operation the result
// of the read op, executed on the tentative state now, depends on: every
// committed operation (committedVV; the committed state is a function of
// the committed operations alone), and, per origin, up to the last
// tentative operation of the stack that touches a key or queue op reads,
// or a key or queue that a transaction touching one of those reads or
// writes (a transaction's guards decide what it writes, so the operations
// of the keys it guards count too; the closure runs over keys until no
// transaction adds one). Other tentative operations do not change op's
// result. A replica that has received everything readVV counts has
// received every operation this result reflects: a quorum read may return
// the result over one from a replica that has received more of other
// keys' operations (the client's quorum read), where comparing whole
// version vectors would make it wait for the replicas to agree on those
// too. For a read whose footprint is every key (a Scan), or while the
// stack holds an operation that touches every key, it is the whole version
// vector.
func (r *Replica) readVV(op state.Op) VV {
	fp := (&Req{Op: op}).footprint()
	if r.keys.wild > 0 || slices.Contains(fp, wildKey) {
		return r.vvCopy()
	}
	// Every origin the replica knows is named, with 0 if nothing of it
	// counts: a read_vv on the wire is then empty only where the vv is.
	out := make(VV, len(r.vv))
	for o := range r.vv {
		out[o] = r.committedVV[o]
	}
	seen := make(map[fkey]bool, len(fp))
	todo := slices.Clone(fp)
	for len(todo) > 0 {
		k := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if seen[k] {
			continue
		}
		seen[k] = true
		for _, p := range r.keys.slots(k) {
			q := r.tentative[r.at(p)].req
			if q.ID.Seq > out[q.ID.Origin] {
				out[q.ID.Origin] = q.ID.Seq
			}
			if q.Op.Kind == state.OpTxn {
				todo = append(todo, q.footprint()...)
			}
		}
	}
	return out
}
