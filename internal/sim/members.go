package sim

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/correctables/correctables/internal/history"
	"github.com/correctables/correctables/internal/replica"
)

// Membership changes in the simulation (Faults.Members): while faults are
// on, the leader is asked from time to time to add a learner (a new node
// that starts empty and joins, as `serve --join` does), promote a learner,
// remove a member, or replace a voter by a new one in one joint-consensus
// change. A node learns its removal as a server does: by applying it, or
// when a replica that applied it refuses its messages (the server refuses
// its peer stream); it then stops for good and never restarts, as
// `serve` on a removed replica's data refuses to. Its clients lose their
// outstanding outcomes, as they do when a replica crashes.

// maxNodes bounds how many nodes a run may create (New's limit).
const maxNodes = 9

// memberIDsOf returns the ids of ms.
func memberIDsOf(ms []replica.Member) []uint64 {
	ids := make([]uint64, len(ms))
	for i, m := range ms {
		ids[i] = m.ID
	}
	return ids
}

// observeMembers runs after each handled Ready of n: it keeps the ids n
// knows as removed (for refusing their messages) and stops n once it
// applied its own removal.
func (c *Cluster) observeMembers(n *Node) {
	if n.Rep == nil || n.Rep.MembershipGen() == n.memberGen {
		return
	}
	n.memberGen = n.Rep.MembershipGen()
	n.removedKnown = map[uint64]bool{}
	for _, id := range n.Rep.RemovedIDs() {
		n.removedKnown[id] = true
	}
	if n.Rep.Removed() {
		c.retire(n)
	}
}

// retire stops a removed node for good (its data stay, unused).
func (c *Cluster) retire(n *Node) {
	if n.retired {
		return
	}
	c.lastFault = c.now
	c.noteTentative(n)
	if n.store != nil {
		_ = n.store.Close()
	}
	n.Rep, n.store, n.drv, n.kicked, n.crashAtSave = nil, nil, nil, false, false
	n.retired = true
	// Its clients lose the outcome of what they had outstanding there.
	n.crashes++
	c.Removals++
}

// addNode creates a node that joins the cluster: empty storage, started
// with Join and the ids of the current members as its peers.
func (c *Cluster) addNode(peers []uint64) *Node {
	id := uint64(len(c.Nodes) + 1)
	n := &Node{ID: id, fs: vfs.NewCrashableMem(), joined: true, peers: append(slices.Clone(peers), id)}
	if c.opt.Faults.Skew > 0 {
		n.skew = c.rng.Int64N(2*int64(c.opt.Faults.Skew)+1) - int64(c.opt.Faults.Skew)
	}
	for _, o := range c.ids {
		d := int64(c.opt.MinDelay) + c.rng.Int64N(int64(c.opt.MaxDelay-c.opt.MinDelay)+1)
		c.delay[[2]uint64{o, id}], c.delay[[2]uint64{id, o}] = d, d
	}
	c.Nodes = append(c.Nodes, n)
	c.ids = append(c.ids, id)
	return n
}

// scheduleMembers proposes a membership change every 0.5-1.5 s of virtual
// time while faults are on.
func (c *Cluster) scheduleMembers() {
	var step func()
	step = func() {
		if !c.faulty {
			return
		}
		c.changeMembers()
		c.At(time.Duration(500+c.rng.IntN(1000))*time.Millisecond, step)
	}
	c.At(300*time.Millisecond, step)
}

// changeMembers picks one change the current configuration allows and
// proposes it at the leader. Nothing happens without a leader or while a
// change is in progress (raft takes one at a time). A change that removes
// a replica drains it first, as member remove does (see removal).
func (c *Cluster) changeMembers() {
	lead := c.Leader()
	if lead == 0 {
		return
	}
	r := c.Node(lead).Rep
	if c.removal != nil {
		c.continueRemoval(c.Node(lead))
		return
	}
	if r.Joint() {
		return
	}
	var voters, learners []uint64
	for _, m := range r.Members() {
		if m.Learner {
			learners = append(learners, m.ID)
		} else {
			voters = append(voters, m.ID)
		}
	}
	canAdd := len(c.Nodes) < maxNodes
	var chs []replica.MemberChange
	var joiner *Node
	switch p := c.rng.IntN(4); {
	case p == 0 && canAdd && len(learners) == 0:
		joiner = c.addNode(memberIDsOf(r.Members()))
		chs = []replica.MemberChange{{Kind: replica.AddLearner, ID: joiner.ID, Addr: simAddr(joiner.ID)}}
	case p == 1 && len(learners) > 0:
		chs = []replica.MemberChange{{Kind: replica.Promote, ID: learners[c.rng.IntN(len(learners))]}}
	case p == 2 && (len(voters) > 3 || len(learners) > 0):
		// Keep at least three voters; a learner may always go.
		cands := slices.Clone(learners)
		if len(voters) > 3 {
			cands = append(cands, voters...)
		}
		c.startRemoval(c.Node(lead), cands[c.rng.IntN(len(cands))], false)
		return
	case p == 3 && canAdd:
		c.startRemoval(c.Node(lead), voters[c.rng.IntN(len(voters))], true)
		return
	default:
		return
	}
	c.proposeChange(c.Node(lead), chs, joiner)
}

// proposeChange proposes chs at the leader lead and starts joiner, the
// node chs add (if any).
func (c *Cluster) proposeChange(lead *Node, chs []replica.MemberChange, joiner *Node) {
	err := lead.Rep.ProposeMembers(chs)
	switch {
	case err == nil:
		c.MemberChanges++
		c.kick(lead)
	case errors.Is(err, replica.ErrBadMemberChange):
		c.fail(err) // the choice above is always valid
		return
	}
	if joiner != nil {
		// The new node starts whatever became of the proposal (an
		// operator starts it after member add; if the add is lost it
		// never hears from the cluster, and it is not a member).
		if err := c.start(joiner); err != nil {
			c.fail(err)
			return
		}
		c.scheduleTicks(joiner)
	}
}

// members returns the ids a live member that is not removed considers
// members and removed, from the node with the newest configuration (the
// highest membership generation is not comparable across nodes, so the one
// with the most applied entries wins).
func (c *Cluster) settledMembers() (members []uint64, removed map[uint64]bool) {
	var best *replica.Replica
	var bestApplied uint64
	for _, n := range c.Nodes {
		if n.Rep == nil {
			continue
		}
		if a, _, _ := n.Rep.Progress(); best == nil || a > bestApplied {
			best, bestApplied = n.Rep, a
		}
	}
	removed = map[uint64]bool{}
	if best == nil {
		return nil, removed
	}
	for _, id := range best.RemovedIDs() {
		removed[id] = true
	}
	return memberIDsOf(best.Members()), removed
}

// simAddr is the peer address a new node is announced with (the simulated
// network routes by id; the address is only carried).
func simAddr(id uint64) string { return fmt.Sprintf("sim-%d:7100", id) }

// noteTentative keeps the operations n holds tentatively as it goes down
// (Faults.Members only). A removed node never comes back, so its own weak
// operations that no other replica received are lost; the weak-view check
// still has to know them, since n's views included them.
func (c *Cluster) noteTentative(n *Node) {
	if !c.opt.Faults.Members || n.Rep == nil {
		return
	}
	if c.tentativeSeen == nil {
		c.tentativeSeen = map[history.OpID]history.Submitted{}
	}
	for _, id := range n.Rep.Tentative() {
		if q, ok := n.Rep.Op(id); ok {
			hid := history.OpID{Origin: id.Origin, Seq: id.Seq}
			c.tentativeSeen[hid] = history.Submitted{ID: hid, TS: q.TS, Op: q.Op}
		}
	}
}

// lostWith returns the operations that went down with removed nodes:
// seen tentatively, never committed, sorted by id.
func (c *Cluster) lostWith(committed []history.OpID) []history.Submitted {
	in := make(map[history.OpID]bool, len(committed))
	for _, id := range committed {
		in[id] = true
	}
	var out []history.Submitted
	for id, s := range c.tentativeSeen {
		if !in[id] {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b history.Submitted) int {
		return cmp.Or(cmp.Compare(a.ID.Origin, b.ID.Origin), cmp.Compare(a.ID.Seq, b.ID.Seq))
	})
	return out
}

// relaxForRemoved returns records for the durability check: a write whose
// origin was removed without confirming its drain (c.undrained: the
// removal went ahead after drainBound; removed holds the ids the cluster
// removed) and that was acknowledged only by its preliminary view is not
// required to survive (a weak operation is durable only at its origin
// until gossip or the log carries it elsewhere, and a removed origin never
// returns: the same rule as for a replica whose disk is lost). A drained
// origin's writes are all required. It also returns how many records it
// relaxed.
func (c *Cluster) relaxForRemoved(records []history.Record, committed []history.OpID, removed map[uint64]bool) ([]history.Record, int) {
	in := make(map[history.OpID]bool, len(committed))
	for _, id := range committed {
		in[id] = true
	}
	out := records
	relaxed := 0
	for i := range records {
		r := &records[i]
		if !r.Acked || r.Op.ReadOnly() || r.ID.IsZero() || in[r.ID] || !removed[r.ID.Origin] || !c.undrained[r.ID.Origin] {
			continue
		}
		if slices.ContainsFunc(r.Views, func(v history.View) bool { return v.Final }) {
			continue
		}
		if relaxed == 0 {
			out = slices.Clone(records)
		}
		out[i].Acked = false
		relaxed++
	}
	return out, relaxed
}

// drainBound is how long (virtual time) a removal waits for its replica
// to confirm its drain before it goes ahead without it, as member remove's
// default bound.
const drainBound = 10 * time.Second

// removal is a removal in progress: replica id drains (its drain marker
// committed, then its "drained" marker awaited), then the change is
// proposed (again every second until id is removed, since raft drops a
// change while another is in progress). replace adds a new voter in the
// same change (member replace), created when the change is first proposed.
type removal struct {
	id       uint64
	replace  bool
	since    int64 // virtual time the drain started
	chs      []replica.MemberChange
	joiner   *Node
	proposed int64 // virtual time of the last proposal of chs, 0 before
}

// startRemoval starts the removal of id through its drain.
func (c *Cluster) startRemoval(lead *Node, id uint64, replace bool) {
	c.removal = &removal{id: id, replace: replace, since: c.now}
	c.continueRemoval(lead)
}

// continueRemoval advances the removal in progress at the leader lead:
// proposes the drain marker until it is applied, then, once the replica is
// drained (or drainBound passed), the change.
func (c *Cluster) continueRemoval(lead *Node) {
	rm, r := c.removal, lead.Rep
	if slices.Contains(r.RemovedIDs(), rm.id) || !slices.Contains(memberIDsOf(r.Members()), rm.id) {
		c.removal = nil // done, or a change that is not valid any more
		return
	}
	if rm.chs == nil {
		switch {
		case r.Drained(rm.id):
		case c.now-rm.since >= int64(drainBound):
			if c.undrained == nil {
				c.undrained = map[uint64]bool{}
			}
			c.undrained[rm.id] = true
		default:
			if !r.Draining(rm.id) {
				if err := r.ProposeDrain(rm.id); errors.Is(err, replica.ErrBadMemberChange) {
					c.fail(err) // checked above
					return
				}
				c.kick(lead)
			}
			return
		}
		if r.Joint() {
			return
		}
		rm.chs = []replica.MemberChange{{Kind: replica.Remove, ID: rm.id}}
		if rm.replace {
			if len(c.Nodes) >= maxNodes {
				c.removal = nil
				return
			}
			rm.joiner = c.addNode(memberIDsOf(r.Members()))
			rm.chs = append(rm.chs, replica.MemberChange{Kind: replica.AddVoter, ID: rm.joiner.ID, Addr: simAddr(rm.joiner.ID)})
		}
	} else if r.Joint() || c.now-rm.proposed < int64(time.Second) {
		return
	}
	joiner := rm.joiner
	if rm.proposed != 0 {
		joiner = nil // started with the first proposal
	}
	rm.proposed = c.now
	c.proposeChange(lead, rm.chs, joiner)
}
