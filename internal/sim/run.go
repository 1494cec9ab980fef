package sim

import (
	"container/heap"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/correctables/correctables/internal/history"
	"github.com/correctables/correctables/internal/replica"
)

// Result is what a run produced and what the checks found.
type Result struct {
	Seed      uint64
	Records   []history.Record
	Committed []history.OpID
	// Stats sums the replicas' counters.
	Stats    replica.Stats
	Messages int
	Dropped  int
	Crashes  int
	// PowerLosses counts the crashes that kept only synced data (the
	// others kept everything written).
	PowerLosses int
	// MidWriteCrashes counts the crashes inside a Save.
	MidWriteCrashes int
	// Snapshots counts snapshots taken by the replicas.
	Snapshots int
	// MemberChanges counts the membership changes proposed, Removals the
	// replicas that stopped because they were removed (Faults.Members).
	MemberChanges, Removals int
	// LostWithRemoved counts the writes of removed origins acknowledged
	// only by their preliminary view that did not survive (allowed, see
	// Cluster.relaxForRemoved).
	LostWithRemoved int
	// Undrained counts the removals that went ahead without the removed
	// replica's confirmed drain (it was down or cut off for drainBound).
	Undrained int
	// Err is the first failed check (nil if all passed).
	Err error
}

// maxEvents bounds a run, so that a livelock ends as a failure, not a hang.
const maxEvents = 5_000_000

// Run executes one seeded run and checks it.
func Run(opt Options) Result {
	c, err := New(opt)
	if err != nil {
		return Result{Seed: opt.Seed, Err: err}
	}
	return c.Run()
}

// Run executes the workload with faults, heals, waits for quiet, and checks.
func (c *Cluster) Run() Result {
	defer c.Close()
	res := Result{Seed: c.opt.Seed}
	c.faulty = true
	for _, n := range c.Nodes {
		c.scheduleTicks(n)
	}
	c.startClients()
	c.scheduleFaults()
	if c.opt.Faults.Members {
		c.scheduleMembers()
	}
	if c.opt.Hook != nil {
		c.opt.Hook(c)
	}
	events := 0
	workloadDone := func() bool {
		for _, cl := range c.clients {
			if !cl.done {
				return false
			}
		}
		return true
	}
	var quietUntil int64 = -1
	for c.err == nil {
		if quietUntil < 0 && workloadDone() {
			// Heal everything and let the cluster settle without faults.
			c.faulty = false
			c.do(func() {
				c.HealAll()
				for _, n := range c.Nodes {
					n.crashAtSave = false // a crash armed for the next Save is called off
					c.Restart(n.ID)       // not a removed one
				}
			})
			c.healAt = c.now
			quietUntil = c.now + int64(c.opt.Quiet)
		}
		if quietUntil >= 0 && c.now >= quietUntil {
			break
		}
		if len(c.queue) == 0 {
			c.err = errStalled
			break
		}
		ev := heap.Pop(&c.queue).(*event)
		c.now = ev.at
		c.do(ev.fn)
		if events++; events > maxEvents {
			c.err = fmt.Errorf("%w: more than %d events", errStalled, maxEvents)
		}
	}
	res.Messages, res.Dropped, res.Snapshots = c.Messages, c.Dropped, c.Snapshots
	res.MemberChanges, res.Removals, res.Undrained = c.MemberChanges, c.Removals, len(c.undrained)
	for _, n := range c.Nodes {
		res.Crashes += n.crashes
		if n.retired {
			res.Crashes-- // the stop of a removed node is not a crash
		}
		res.PowerLosses += n.powerLosses
		res.MidWriteCrashes += n.midWrites
		if n.Rep != nil {
			s := n.Rep.Stats()
			res.Stats.Executions += s.Executions
			res.Stats.Rollbacks += s.Rollbacks
			res.Stats.Committed += s.Committed
			res.Stats.StrongCommitted += s.StrongCommitted
			res.Stats.StrongAccurate += s.StrongAccurate
			res.Stats.TentativeMaxDepth = max(res.Stats.TentativeMaxDepth, s.TentativeMaxDepth)
		}
	}
	res.Records = c.rec.Records()
	if c.err != nil {
		res.Err = c.err
		return res
	}
	res.Err = c.check(&res)
	return res
}

// do runs one event. A panic in a replica, its driver or its storage fails
// the run, as it fail-stops a server; the run ends at once.
func (c *Cluster) do(fn func()) {
	defer func() {
		if p := recover(); p != nil {
			c.fail(fmt.Errorf("%w at %v: %v\n%s", errPanic, c.Now(), p, debug.Stack()))
		}
	}()
	fn()
}

func (c *Cluster) scheduleTicks(n *Node) {
	offset := time.Duration(c.rng.Int64N(int64(c.opt.Tick)))
	var tick func()
	tick = func() {
		if n.Rep != nil {
			n.Rep.Tick()
			c.kick(n)
		}
		c.At(c.opt.Tick, tick)
	}
	c.At(offset, tick)
}

// scheduleFaults injects partitions and crashes at random while faults are
// on: every 100-400 ms something may change.
func (c *Cluster) scheduleFaults() {
	f := c.opt.Faults
	if !f.Partitions && !f.Crashes {
		return
	}
	var step func()
	step = func() {
		if !c.faulty {
			return
		}
		switch p := c.rng.IntN(10); {
		case f.Partitions && p < 2:
			// Isolate one node.
			c.Partition([]uint64{c.ids[c.rng.IntN(len(c.ids))]})
		case f.Partitions && p < 3:
			// A random split into two groups.
			var a []uint64
			for _, id := range c.ids {
				if c.rng.IntN(2) == 0 {
					a = append(a, id)
				}
			}
			c.Partition(a)
		case f.Partitions && p < 5:
			c.HealAll()
		case f.Crashes && p < 7:
			if c.down() < (len(c.ids)-1)/2 || (len(c.ids) <= 2 && c.down() == 0) {
				id := c.ids[c.rng.IntN(len(c.ids))]
				if f.MidWriteCrashes && c.rng.IntN(2) == 0 {
					c.Node(id).crashAtSave = true // dies at its next Save
				} else {
					c.Crash(id)
				}
			}
		case f.Crashes && p < 9:
			for _, n := range c.Nodes {
				if n.Rep == nil && c.rng.IntN(2) == 0 {
					c.Restart(n.ID)
				}
			}
		}
		c.At(time.Duration(100+c.rng.IntN(300))*time.Millisecond, step)
	}
	c.At(200*time.Millisecond, step)
}

// check runs every checker on the finished run.
func (c *Cluster) check(res *Result) error {
	var states []history.ReplicaState
	var ref *replica.Replica
	members, removed := c.settledMembers()
	for _, n := range c.Nodes {
		if !slices.Contains(members, n.ID) {
			// Removed, or added by a change that was lost: not a
			// member, so not one the checks hold to anything.
			if n.Rep != nil && removed[n.ID] && n.Rep.Removed() {
				return fmt.Errorf("replica %d applied its removal but still runs", n.ID)
			}
			c.noteTentative(n) // a removed node not told yet
			continue
		}
		if n.Rep == nil {
			return fmt.Errorf("replica %d still down after healing", n.ID)
		}
		ref = n.Rep
		states = append(states, history.ReplicaState{
			ID:        n.ID,
			Committed: toIDs(n.Rep.Committed()),
			StateHash: n.Rep.CommittedStateHash(),
			Tentative: toIDs(n.Rep.Tentative()),
		})
	}
	committed := ref.Committed()
	res.Committed = toIDs(committed)
	var submitted []history.Submitted
	for _, id := range committed {
		q, _ := ref.Op(id)
		submitted = append(submitted, history.Submitted{ID: history.OpID{Origin: id.Origin, Seq: id.Seq}, TS: q.TS, Op: q.Op})
	}
	var errs []error
	if err := history.CheckConverged(states); err != nil {
		errs = append(errs, fmt.Errorf("convergence: %w", err))
	}
	// Every member agrees on the membership: the members and the ids
	// removed for good (a replica that forgot a removed id would accept
	// it again).
	for _, n := range c.Nodes {
		if n.Rep == nil || !slices.Contains(members, n.ID) {
			continue
		}
		if got, want := n.Rep.RemovedIDs(), ref.RemovedIDs(); !slices.Equal(got, want) {
			errs = append(errs, fmt.Errorf("membership: replica %d has removed ids %v, replica %d %v", n.ID, got, ref.ID(), want))
		}
		if got, want := memberIDsOf(n.Rep.Members()), memberIDsOf(ref.Members()); !slices.Equal(got, want) {
			errs = append(errs, fmt.Errorf("membership: replica %d has members %v, replica %d %v", n.ID, got, ref.ID(), want))
		}
	}
	if len(ref.Tentative()) != 0 {
		errs = append(errs, fmt.Errorf("convergence: %d operations still tentative after %v quiet", len(ref.Tentative()), c.opt.Quiet))
	}
	if err := c.checkFinalDelivered(res.Records); err != nil {
		errs = append(errs, fmt.Errorf("final views: %w", err))
	} else if err := c.checkLiveness(res.Records); err != nil {
		errs = append(errs, fmt.Errorf("liveness: %w", err))
	}
	if err := history.CheckFinalOnce(res.Records); err != nil {
		errs = append(errs, fmt.Errorf("final once: %w", err))
	}
	durable, relaxed := c.relaxForRemoved(res.Records, res.Committed, removed)
	res.LostWithRemoved, c.lostWithRemoved = relaxed, relaxed
	if err := history.CheckDurable(durable, res.Committed); err != nil {
		errs = append(errs, fmt.Errorf("durability: %w", err))
	}
	// The weak views of a removed node may include its operations that
	// were lost with it.
	submitted = append(submitted, c.lostWith(res.Committed)...)
	if err := history.CheckWeakViews(res.Records, submitted, res.Committed); err != nil {
		errs = append(errs, fmt.Errorf("weak views: %w", err))
	}
	lin, err := history.CheckLinearizableWith(res.Records, res.Committed, history.LinearizableOptions{Timeout: 20 * time.Second, Submitted: submitted})
	if err != nil {
		errs = append(errs, fmt.Errorf("linearizability: %w", err))
	} else if lin != porcupine.Ok {
		errs = append(errs, fmt.Errorf("linearizability: porcupine could not decide (%v) within its time limit", lin))
	}
	return errors.Join(errs...)
}

// checkFinalDelivered: every operation that asked for a stable view got
// one, unless the replica it was submitted to crashed before answering (a
// crash loses the connection, as a real client would see).
func (c *Cluster) checkFinalDelivered(records []history.Record) error {
	var errs []error
	for _, ca := range c.calls {
		if ca.read && !ca.strong {
			continue
		}
		rec := records[ca.h.Index()]
		final := false
		for _, v := range rec.Views {
			final = final || v.Final
		}
		if !final && c.Node(ca.node).crashes == ca.crashes {
			errs = append(errs, fmt.Errorf("record %d (%v at replica %d): no final view, and the replica did not crash", ca.h.Index(), rec.Op.Kind, ca.node))
		}
	}
	return errors.Join(errs...)
}

// checkLiveness: once the faults healed, every operation still waiting got
// the view it waits for (the stable one, or the tentative one of a weak
// read) within Options.Liveness of the heal (or of its invocation, if
// later), unless its replica crashed after it was submitted (then the
// client lost its connection and the outcome). The heal is the end of the
// workload phase, or the last fault a hook injected after it.
func (c *Cluster) checkLiveness(records []history.Record) error {
	heal := max(c.healAt, c.lastFault)
	var errs []error
	for _, ca := range c.calls {
		if c.Node(ca.node).crashes != ca.crashes {
			continue
		}
		rec := records[ca.h.Index()]
		deadline := max(heal, rec.Invoke) + int64(c.opt.Liveness)
		weakRead := ca.read && !ca.strong
		at := int64(-1)
		for _, v := range rec.Views {
			if v.Final || weakRead {
				at = v.At
				break
			}
		}
		if at < 0 || at > deadline {
			got := "none"
			if at >= 0 {
				got = fmt.Sprintf("at %v, %v after the heal", time.Duration(at), time.Duration(at-heal))
			}
			errs = append(errs, fmt.Errorf("record %d (%v at replica %d, invoked at %v): the view it waits for did not arrive within %v of the heal at %v (got: %s)",
				ca.h.Index(), rec.Op.Kind, ca.node, time.Duration(rec.Invoke), c.opt.Liveness, time.Duration(heal), got))
		}
	}
	return errors.Join(errs...)
}

func toIDs(ids []replica.OpID) []history.OpID {
	out := make([]history.OpID, len(ids))
	for i, id := range ids {
		out[i] = history.OpID{Origin: id.Origin, Seq: id.Seq}
	}
	return out
}
