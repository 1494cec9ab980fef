package sim

import (
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/correctables/correctables/internal/history"
	"github.com/correctables/correctables/internal/replica"
	"github.com/correctables/correctables/internal/state"
)

// client issues operations one at a time, each to its home replica (or, if
// that one is down, to another), and waits for the view it needs: the
// stable view of strong operations and of weak writes, the tentative view
// of weak reads.
type client struct {
	id   uint64
	home uint64
	left int
	seq  uint64
	// done: the client issued all its operations.
	done   bool
	active *call
	// handles of every request, by seq, so that late views are recorded.
	handles map[uint64]*history.Handle
}

type call struct {
	seq  uint64
	node uint64
	// crashes of node when the call was made: a call may lose its final
	// view only if its node crashed after that.
	crashes int
	h       *history.Handle
	strong  bool
	read    bool
	closed  bool
}

func (c *Cluster) startClients() {
	for i := 0; i < c.opt.Clients; i++ {
		cl := &client{id: uint64(i + 1), home: c.ids[i%len(c.ids)], left: c.opt.OpsPerClient, handles: map[uint64]*history.Handle{}}
		c.clients = append(c.clients, cl)
		c.At(time.Duration(c.rng.Int64N(int64(50*time.Millisecond))), func() { c.next(cl) })
	}
}

func (c *Cluster) next(cl *client) {
	if cl.left == 0 {
		cl.done = true
		return
	}
	target := c.Node(cl.home)
	if !c.serving(target) {
		var up []*Node
		for _, n := range c.Nodes {
			if c.serving(n) {
				up = append(up, n)
			}
		}
		if len(up) == 0 {
			c.At(100*time.Millisecond, func() { c.next(cl) })
			return
		}
		target = up[c.rng.IntN(len(up))]
	}
	op := c.opt.Workload(c.rng, c.opt.Keys)
	strong := c.rng.Float64() < c.opt.StrongFraction
	want := replica.WantTentative | replica.WantStable
	if op.ReadOnly() && !strong {
		want = replica.WantTentative
	}
	cl.seq++
	err := target.Rep.Submit(replica.ClientRequest{Client: cl.id, Seq: cl.seq, Op: op, Strong: strong, Want: want})
	if err != nil {
		// Busy or invalid: nothing happened; try again later.
		c.At(50*time.Millisecond, func() { c.next(cl) })
		return
	}
	// The workload phase ends once every client issued its last
	// operation, so the last ones are still in flight when the faults heal
	// (the liveness check then bounds how long they take).
	if cl.left--; cl.left == 0 {
		cl.done = true
	}
	ca := &call{seq: cl.seq, node: target.ID, crashes: target.crashes, strong: strong, read: op.ReadOnly()}
	c.calls = append(c.calls, ca)
	ca.h = c.rec.Invoke(int(cl.id), op, strong)
	cl.active = ca
	cl.handles[cl.seq] = ca.h
	c.kick(target)
	c.At(c.opt.ClientTimeout, func() {
		if cl.active == ca && !ca.closed {
			// Gave up: the record stays without a final view.
			ca.closed = true
			cl.active = nil
			c.next(cl)
		}
	})
}

// serving reports whether clients may send to n: it runs, it does not
// drain before its removal (it would refuse, and a client goes to another
// replica), and if it joined the cluster it has learnt the cluster's state
// (an operator gives clients a new replica's address once it has joined).
func (c *Cluster) serving(n *Node) bool {
	if n.Rep == nil || n.Rep.Draining(n.ID) {
		return false
	}
	if n.joined {
		applied, _, _ := n.Rep.Progress()
		return applied > 0
	}
	return true
}

// deliverView hands a view to its client after the client link's delay.
func (c *Cluster) deliverView(v replica.View) {
	if int(v.Client) < 1 || int(v.Client) > len(c.clients) {
		return
	}
	cl := c.clients[v.Client-1]
	c.At(time.Millisecond, func() {
		ca := cl.active
		h := c.handleFor(cl, v.Seq)
		if h == nil {
			return
		}
		if !v.ID.IsZero() {
			h.SetID(history.OpID{Origin: v.ID.Origin, Seq: v.ID.Seq})
		}
		h.View(history.View{Result: v.Result, Final: v.Stable, Stamp: toStamp(v.Stamp)})
		if ca != nil && ca.seq == v.Seq && !ca.closed && (v.Stable || (ca.read && !ca.strong)) {
			ca.closed = true
			cl.active = nil
			c.At(time.Duration(c.rng.Int64N(int64(20*time.Millisecond))), func() { c.next(cl) })
		}
	})
}

// handleFor finds the record of a client's request, also after the client
// gave up on it (late views are still recorded).
func (c *Cluster) handleFor(cl *client, seq uint64) *history.Handle {
	return cl.handles[seq]
}

func toStamp(s replica.Stamp) history.Stamp {
	return history.Stamp{Replica: s.Replica, CommittedCount: s.CommittedCount, VV: map[uint64]uint64(s.VV)}
}

// Mixed is the default workload: every operation kind of the state machine,
// on few keys and one contended queue.
func Mixed(r *rand.Rand, keys int) state.Op {
	key := func() string { return string(rune('a' + r.IntN(keys))) }
	val := func() []byte { return []byte{byte('0' + r.IntN(10))} }
	switch p := r.IntN(100); {
	case p < 20:
		return state.Op{Kind: state.OpGet, Key: key()}
	case p < 35:
		return state.Op{Kind: state.OpPut, Key: key(), Value: val()}
	case p < 45:
		return state.Op{Kind: state.OpIncr, Key: "n" + key(), Delta: int64(1 + r.IntN(3))}
	case p < 52:
		return state.Op{Kind: state.OpCAS, Key: key(), Expected: val(), Value: val()}
	case p < 58:
		return state.Op{Kind: state.OpAppend, Key: "l" + key(), Value: val()}
	case p < 62:
		return state.Op{Kind: state.OpScan, Key: ""}
	case p < 72:
		return state.Op{Kind: state.OpEnqueue, Key: "tickets", Value: val()}
	case p < 87:
		return state.Op{Kind: state.OpDequeue, Key: "tickets"}
	case p < 92:
		return state.Op{Kind: state.OpDelete, Key: key()}
	default:
		k := key()
		return state.Op{Kind: state.OpTxn, Txn: &state.Txn{
			Guards: []state.Guard{{Key: k, Cmp: state.CmpEqual, Value: val()}},
			Then:   []state.Write{{Key: key(), Value: val()}},
			Else:   []state.Write{{Key: k, Value: val()}},
		}}
	}
}

// KV is a workload of single-key operations only (get, put, incr, CAS),
// with no queue and no scan: with many keys, operations rarely conflict.
func KV(r *rand.Rand, keys int) state.Op {
	key := "k" + strconv.Itoa(r.IntN(keys))
	val := []byte{byte('0' + r.IntN(10))}
	switch p := r.IntN(100); {
	case p < 40:
		return state.Op{Kind: state.OpGet, Key: key}
	case p < 70:
		return state.Op{Kind: state.OpPut, Key: key, Value: val}
	case p < 90:
		return state.Op{Kind: state.OpIncr, Key: "n" + key, Delta: 1}
	default:
		return state.Op{Kind: state.OpCAS, Key: key, Expected: val, Value: []byte{byte('0' + r.IntN(10))}}
	}
}
