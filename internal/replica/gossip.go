package replica

import (
	"errors"
	"fmt"

	"go.etcd.io/raft/v3/raftpb"
)

// Reliable broadcast of operations (Creek §3.2, Algorithm 1, the weak path):
// FIFO per origin, with anti-entropy.

// Step handles a message from a peer.
func (r *Replica) Step(m Message) error {
	switch m.Type {
	case MsgRaft:
		if m.Raft == nil {
			return errors.New("replica: raft message without payload")
		}
		if m.Raft.GetType() == raftpb.MsgProp {
			return r.stepProposal(m.Raft)
		}
		return r.node.Step(m.Raft)
	case MsgOps:
		// The message's operations are placed together (one rollback for
		// all): anti-entropy brings a replica that restarted, whose stack
		// holds the newer operations pushed to it since, many older ones at
		// once, and placing them one by one rolled that stack back and
		// executed it again per operation.
		xs := r.arrivals[:0]
		var err error
		for _, q := range m.Ops {
			if q == nil || q.ID.Origin == 0 || !r.knownOrigin(q.ID.Origin) {
				err = fmt.Errorf("replica: operation from unknown origin in message from %d", m.From)
				break
			}
			if q.ID.Seq <= r.vv[q.ID.Origin] {
				continue // duplicate
			}
			// A gap (reordered or dropped message) is left to anti-entropy:
			// accepting out of order would break the per-origin FIFO that
			// version vectors rely on.
			if r.admit(q) {
				xs = append(xs, executed{req: q})
			}
		}
		if len(xs) > 0 {
			r.place(xs) // copies xs to the stack
		}
		clear(xs)
		r.arrivals = xs[:0]
		return err
	case MsgSync:
		r.answerSync(m)
		return nil
	}
	return fmt.Errorf("replica: unknown message type %d from %d", m.Type, m.From)
}

// gossipNew sends every peer, in one message per MaxOpsPerMsg operations,
// the own operations accepted since the last Ready (the eager push of
// reliable broadcast; anti-entropy repairs what is lost).
func (r *Replica) gossipNew() {
	if len(r.newOwn) == 0 {
		return
	}
	for _, chunk := range r.chunks(r.newOwn) {
		for len(chunk) > 0 {
			n := min(len(chunk), r.cfg.MaxOpsPerMsg)
			for _, p := range r.memberIDs {
				if p != r.cfg.ID {
					r.send(Message{Type: MsgOps, To: p, Ops: chunk[:n]})
				}
			}
			chunk = chunk[n:]
		}
	}
	r.newOwn = nil
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
	// A peer that lacks operations this replica has forgotten (committed,
	// dropped after a snapshot) gets them from the raft log or a snapshot,
	// and nothing from here until then: an origin's operations after the
	// gap would be refused, and the other origins' would run ahead of it,
	// to be rolled back and executed again under each answer that brings
	// the lagging origin later (a restarted replica, in the kill soak,
	// rolled back 3,000 operations per answer for seconds).
	for o, base := range r.logBase {
		if m.VV[o] < base {
			return
		}
	}
	// The operations go in timestamp order across origins (a merge of the
	// origins' runs, each FIFO and so in timestamp order), as gossip does
	// (Creek §3.2): the receiver places each on top of what it holds. Origin
	// by origin, a replica that had missed many (a restart) placed every
	// later origin's run under the earlier one's, rolling back and
	// executing again all it had received so far, per message.
	next := map[uint64]uint64{} // origin: the next sequence number to send
	for _, o := range r.vv.origins() {
		if s := max(m.VV[o], sent.vv[o]) + 1; s <= r.vv[o] {
			next[o] = s
		}
	}
	var ops []*Req
	size := 0
	for len(ops) < r.cfg.MaxOpsPerMsg {
		var q *Req
		for o, s := range next {
			if c, ok := r.Op(OpID{o, s}); !ok {
				delete(next, o) // not held (cannot happen: s <= vv[o])
			} else if q == nil || compareReq(c, q) < 0 {
				q = c
			}
		}
		if q == nil || (len(ops) > 0 && size+reqSize(q) > r.cfg.MaxEntryBytes) {
			break
		}
		ops = append(ops, q)
		size += reqSize(q)
		sent.vv[q.ID.Origin] = q.ID.Seq
		if o := q.ID.Origin; q.ID.Seq < r.vv[o] {
			next[o] = q.ID.Seq + 1
		} else {
			delete(next, o)
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
