package replica

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/correctables/correctables/internal/state"
)

// TestInteraction runs the golden protocol traces in testdata/ (Creek
// Algorithm 1 as built here, driven step by step). Regenerate with
//
//	go test ./internal/replica/ -run Interaction -rewrite
//
// and review the diff: a change in a trace is a change in protocol behaviour.
//
// Commands (ids are replica ids 1..n):
//
//	add-replicas n=3 [election-ticks=10] [noop-ticks=5] [gossip-ticks=2] [retry-ticks=20]
//	campaign id=1            advance only raft's election timer of 1 until it campaigns
//	submit id=2 client=1 seq=1 weak|strong op=<kind> <operands...> [want=tentative|stable|both]
//	                         kinds: get k, put k v, delete k, incr k [d], append k v,
//	                         cas k old|- new, enqueue q v, dequeue q, scan prefix [limit], noop
//	process-ready [id=..]    drain Ready: persist, queue messages, collect views, Advance
//	deliver-msgs id=2 [type=ops|sync|raft] [from=1] [drop]
//	stabilize                process-ready and deliver-msgs until nothing moves
//	tick [id=..] [n=1]       Replica.Tick (raft, anti-entropy, no-op, retries); no Ready
//	partition 1 / 2 3        cut every link between groups (messages dropped at delivery)
//	heal
//	crash id=..              discard the replica and the messages queued to it; its
//	                         raft.MemoryStorage and persisted own ops survive
//	restart id=..
//	set-clock id=.. ms=..    the replica's physical clock, in ms (default 1000)
//	status                   per replica: raft role, term, commit, lists, VVs
//	stats                    per replica: replica.Stats()
//	views                    views delivered since the last `views`
//	view-counts              per client request: all views delivered so far
//	converged                whether live replicas agree on the committed order and state
//
// Timestamps print as the HLC's milliseconds, with "+n" for a logical part.
func TestInteraction(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		env := &interactionEnv{
			nodes:  map[uint64]*interactionNode{},
			cut:    map[[2]uint64]bool{},
			reqs:   map[[2]uint64]ClientRequest{},
			counts: map[[2]uint64]*viewCount{},
		}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return env.handle(t, d)
		})
	})
}

// interactionEnv is a cluster of replicas whose every step is a command.
type interactionEnv struct {
	ids   []uint64
	nodes map[uint64]*interactionNode
	cut   map[[2]uint64]bool
	tmpl  Config

	views  []View                      // delivered since the last `views`
	reqs   map[[2]uint64]ClientRequest // by (client, seq)
	counts map[[2]uint64]*viewCount
}

// interactionNode is one replica and what survives its crashes.
type interactionNode struct {
	id      uint64
	rep     *Replica // nil while crashed
	storage *raft.MemoryStorage
	own     []*Req // persisted own operations (Ready.Persist)
	clockMS int64
	inbox   []Message // queued to this replica, delivered on command
	starts  uint64    // incarnations, for the rand seed
}

type viewCount struct {
	id                OpID
	tentative, stable int
}

func (e *interactionEnv) handle(t *testing.T, d *datadriven.TestData) string {
	var b strings.Builder
	switch d.Cmd {
	case "add-replicas":
		e.addReplicas(t, d, &b)
	case "campaign":
		n := e.live(t, d, argID(t, d))
		for i := 1; ; i++ {
			if i > 1000 {
				d.Fatalf(t, "replica %d did not campaign", n.id)
			}
			n.rep.node.Tick()
			if st := n.rep.node.Status().RaftState; st != raft.StateFollower {
				fmt.Fprintf(&b, "%d is %s after %d election ticks\n", n.id, st, i)
				break
			}
		}
	case "submit":
		e.submit(t, d, &b)
	case "process-ready":
		for _, id := range e.selected(t, d) {
			if n := e.nodes[id]; n.rep != nil {
				e.processReady(t, n, &b)
			}
		}
	case "deliver-msgs":
		var typ MsgType
		if d.HasArg("type") {
			var s string
			d.ScanArgs(t, "type", &s)
			for _, c := range []MsgType{MsgRaft, MsgOps, MsgSync} {
				if c.String() == s {
					typ = c
				}
			}
			if typ == 0 {
				d.Fatalf(t, "unknown message type %q", s)
			}
		}
		var from uint64
		d.MaybeScanArgs(t, "from", &from)
		e.deliver(e.node(t, d, argID(t, d)), typ, from, d.HasArg("drop"), &b)
	case "stabilize":
		e.stabilize(t, &b)
	case "tick":
		n := 1
		d.MaybeScanArgs(t, "n", &n)
		for range n {
			for _, id := range e.selected(t, d) {
				if nd := e.nodes[id]; nd.rep != nil {
					nd.rep.Tick()
				}
			}
		}
		b.WriteString("ok\n")
	case "partition":
		e.partition(t, d, &b)
	case "heal":
		clear(e.cut)
		b.WriteString("ok\n")
	case "crash":
		n := e.live(t, d, argID(t, d))
		n.rep = nil
		fmt.Fprintf(&b, "%d crashed: %d queued messages to it discarded; disk keeps log up to %d and %d own ops\n",
			n.id, len(n.inbox), lastIndex(t, n.storage), len(n.own))
		n.inbox = nil
	case "restart":
		n := e.node(t, d, argID(t, d))
		if n.rep != nil {
			d.Fatalf(t, "replica %d is running", n.id)
		}
		e.start(t, n)
		fmt.Fprintf(&b, "%d restarted with %d own ops\n", n.id, len(n.own))
	case "set-clock":
		n := e.node(t, d, argID(t, d))
		d.ScanArgs(t, "ms", &n.clockMS)
		b.WriteString("ok\n")
	case "status":
		e.status(&b)
	case "stats":
		for _, id := range e.ids {
			if n := e.nodes[id]; n.rep == nil {
				fmt.Fprintf(&b, "%d: down\n", id)
			} else {
				s := n.rep.Stats()
				fmt.Fprintf(&b, "%d: executions=%d reads=%d rollbacks=%d committed=%d strong-committed=%d strong-accurate=%d max-tentative=%d\n",
					id, s.Executions, s.Reads, s.Rollbacks, s.Committed, s.StrongCommitted, s.StrongAccurate, s.TentativeMaxDepth)
			}
		}
	case "views":
		if len(e.views) == 0 {
			b.WriteString("(none)\n")
		}
		for _, v := range e.views {
			b.WriteString(e.fmtView(v) + "\n")
		}
		e.views = nil
	case "view-counts":
		keys := slices.SortedFunc(func(yield func([2]uint64) bool) {
			for k := range e.counts {
				if !yield(k) {
					return
				}
			}
		}, func(a, b [2]uint64) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) })
		for _, k := range keys {
			c := e.counts[k]
			cr := e.reqs[k]
			fmt.Fprintf(&b, "c%d/%d %s %s %s: tentative=%d stable=%d\n",
				k[0], k[1], fmtID(c.id), strength(cr.Strong), fmtOp(cr.Op), c.tentative, c.stable)
		}
	case "converged":
		e.converged(&b)
	default:
		d.Fatalf(t, "unknown command %q", d.Cmd)
	}
	return b.String()
}

func argID(t *testing.T, d *datadriven.TestData) uint64 {
	var id uint64
	d.ScanArgs(t, "id", &id)
	return id
}

func (e *interactionEnv) node(t *testing.T, d *datadriven.TestData, id uint64) *interactionNode {
	n, ok := e.nodes[id]
	if !ok {
		d.Fatalf(t, "no replica %d", id)
	}
	return n
}

func (e *interactionEnv) live(t *testing.T, d *datadriven.TestData, id uint64) *interactionNode {
	n := e.node(t, d, id)
	if n.rep == nil {
		d.Fatalf(t, "replica %d is down", id)
	}
	return n
}

// selected is id=.. if given, else every replica.
func (e *interactionEnv) selected(t *testing.T, d *datadriven.TestData) []uint64 {
	if d.HasArg("id") {
		return []uint64{e.node(t, d, argID(t, d)).id}
	}
	return e.ids
}

func (e *interactionEnv) addReplicas(t *testing.T, d *datadriven.TestData, b *strings.Builder) {
	if len(e.ids) > 0 {
		d.Fatalf(t, "replicas already added")
	}
	var n int
	d.ScanArgs(t, "n", &n)
	d.MaybeScanArgs(t, "election-ticks", &e.tmpl.ElectionTicks)
	d.MaybeScanArgs(t, "noop-ticks", &e.tmpl.NoopTicks)
	d.MaybeScanArgs(t, "gossip-ticks", &e.tmpl.GossipTicks)
	d.MaybeScanArgs(t, "retry-ticks", &e.tmpl.RetryTicks)
	for i := 1; i <= n; i++ {
		e.ids = append(e.ids, uint64(i))
	}
	for _, id := range e.ids {
		nd := &interactionNode{id: id, storage: raft.NewMemoryStorage(), clockMS: 1000}
		e.nodes[id] = nd
		e.start(t, nd)
		// The first Ready holds the bootstrap configuration entries; raft
		// does not campaign before they are applied. Nothing to show.
		e.processReady(t, nd, &strings.Builder{})
	}
	fmt.Fprintf(b, "added replicas %v; each bootstrapped with log 1..%d applied\n", e.ids, lastIndex(t, e.nodes[e.ids[0]].storage))
}

func (e *interactionEnv) start(t *testing.T, n *interactionNode) {
	n.starts++
	cfg := e.tmpl
	cfg.ID = n.id
	cfg.Peers = e.ids
	cfg.Storage = n.storage
	for _, q := range n.own {
		cfg.OwnOps = append(cfg.OwnOps, copyReq(t, q))
	}
	cfg.Clock = func() int64 { return n.clockMS * 1e6 }
	cfg.Rand = rand.New(rand.NewPCG(n.id, n.starts))
	rep, err := New(cfg)
	if err != nil {
		t.Fatalf("start replica %d: %v", n.id, err)
	}
	n.rep = rep
}

func (e *interactionEnv) submit(t *testing.T, d *datadriven.TestData, b *strings.Builder) {
	n := e.live(t, d, argID(t, d))
	var cr ClientRequest
	d.ScanArgs(t, "client", &cr.Client)
	d.ScanArgs(t, "seq", &cr.Seq)
	var kind, want string
	var operands []string
	for _, a := range d.CmdArgs {
		switch {
		case a.Key == "op":
			kind = a.SingleVal(t)
		case a.Key == "want":
			want = a.SingleVal(t)
		case len(a.Vals) > 0:
		case a.Key == "strong":
			cr.Strong = true
		case a.Key == "weak":
		default:
			operands = append(operands, a.Key)
		}
	}
	cr.Op = parseOp(t, d, kind, operands)
	switch want {
	case "":
		cr.Want = WantTentative | WantStable
		if cr.Op.ReadOnly() && !cr.Strong {
			cr.Want = WantTentative
		}
	case "tentative":
		cr.Want = WantTentative
	case "stable":
		cr.Want = WantStable
	case "both":
		cr.Want = WantTentative | WantStable
	default:
		d.Fatalf(t, "want=%s", want)
	}
	seqBefore := n.rep.seq
	if err := n.rep.Submit(cr); err != nil {
		fmt.Fprintf(b, "error: %v\n", err)
		return
	}
	e.reqs[[2]uint64{cr.Client, cr.Seq}] = cr
	if n.rep.seq == seqBefore {
		fmt.Fprintf(b, "%d: c%d/%d %s %s read-only (no id)\n", n.id, cr.Client, cr.Seq, strength(cr.Strong), fmtOp(cr.Op))
		return
	}
	q, _ := n.rep.Op(OpID{n.id, n.rep.seq})
	fmt.Fprintf(b, "%d: c%d/%d accepted as %s\n", n.id, cr.Client, cr.Seq, fmtReq(q))
}

func parseOp(t *testing.T, d *datadriven.TestData, kind string, args []string) state.Op {
	arg := func(i int) string {
		if i >= len(args) {
			d.Fatalf(t, "op=%s: missing operand %d", kind, i+1)
		}
		return args[i]
	}
	num := func(i int, def int64) int64 {
		if i >= len(args) {
			return def
		}
		v, err := strconv.ParseInt(args[i], 10, 64)
		if err != nil {
			d.Fatalf(t, "op=%s: %v", kind, err)
		}
		return v
	}
	switch kind {
	case "get":
		return state.Op{Kind: state.OpGet, Key: arg(0)}
	case "put":
		return state.Op{Kind: state.OpPut, Key: arg(0), Value: []byte(arg(1))}
	case "delete":
		return state.Op{Kind: state.OpDelete, Key: arg(0)}
	case "incr":
		return state.Op{Kind: state.OpIncr, Key: arg(0), Delta: num(1, 1)}
	case "append":
		return state.Op{Kind: state.OpAppend, Key: arg(0), Value: []byte(arg(1))}
	case "cas":
		op := state.Op{Kind: state.OpCAS, Key: arg(0), Value: []byte(arg(2))}
		if arg(1) == "-" {
			op.ExpectAbsent = true
		} else {
			op.Expected = []byte(arg(1))
		}
		return op
	case "enqueue":
		return state.Op{Kind: state.OpEnqueue, Key: arg(0), Value: []byte(arg(1))}
	case "dequeue":
		return state.Op{Kind: state.OpDequeue, Key: arg(0)}
	case "scan":
		return state.Op{Kind: state.OpScan, Key: arg(0), Limit: int(num(1, 0))}
	case "noop":
		return state.Op{Kind: state.OpNoop}
	}
	d.Fatalf(t, "unknown op %q", kind)
	return state.Op{}
}

// processReady drains one replica's Ready as a driver must: persist hard
// state, entries and own operations first, then queue the messages and
// deliver the views, then Advance.
func (e *interactionEnv) processReady(t *testing.T, n *interactionNode, b *strings.Builder) {
	for i := 0; n.rep.HasReady(); i++ {
		if i > 100 {
			t.Fatalf("replica %d: Ready does not drain", n.id)
		}
		rd, err := n.rep.Ready()
		if err := n.rep.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(b, "> %d handling Ready\n", n.id)
		if err != nil {
			fmt.Fprintf(b, "  error: %v\n", err)
			return
		}
		for _, m := range rd.Early {
			fmt.Fprintf(b, "  %s (before the write)\n", fmtMsg(m))
			to := e.nodes[m.To]
			to.inbox = append(to.inbox, copyMsg(t, m))
		}
		if !raft.IsEmptyHardState(rd.HardState) {
			hs := rd.HardState
			fmt.Fprintf(b, "  HardState term=%d vote=%d commit=%d\n", hs.GetTerm(), hs.GetVote(), hs.GetCommit())
			if err := n.storage.SetHardState(proto.Clone(hs).(*raftpb.HardState)); err != nil {
				t.Fatal(err)
			}
		}
		if rd.Snapshot != nil && !raft.IsEmptySnap(rd.Snapshot) {
			fmt.Fprintf(b, "  Snapshot index=%d\n", rd.Snapshot.GetMetadata().GetIndex())
			if err := n.storage.ApplySnapshot(rd.Snapshot); err != nil {
				t.Fatal(err)
			}
		}
		if len(rd.Entries) > 0 {
			b.WriteString("  Entries:\n")
			for _, ent := range rd.Entries {
				fmt.Fprintf(b, "    %s\n", fmtEntry(ent))
			}
			if err := n.storage.Append(rd.Entries); err != nil {
				t.Fatal(err)
			}
		}
		for _, q := range rd.Persist {
			fmt.Fprintf(b, "  Persist %s\n", fmtReq(q))
			n.own = append(n.own, copyReq(t, q))
		}
		if rd.raft != nil && len(rd.raft.CommittedEntries) > 0 {
			var ids []string
			for _, ent := range rd.raft.CommittedEntries {
				ids = append(ids, fmt.Sprintf("%d/%d", ent.GetTerm(), ent.GetIndex()))
			}
			fmt.Fprintf(b, "  Applied %s\n", strings.Join(ids, " "))
		}
		for _, m := range rd.Messages {
			fmt.Fprintf(b, "  %s\n", fmtMsg(m))
			to := e.nodes[m.To]
			to.inbox = append(to.inbox, copyMsg(t, m))
		}
		for _, v := range rd.Views {
			fmt.Fprintf(b, "  View %s\n", e.fmtView(v))
			e.views = append(e.views, v)
			k := [2]uint64{v.Client, v.Seq}
			c := e.counts[k]
			if c == nil {
				c = &viewCount{}
				e.counts[k] = c
			}
			c.id = v.ID
			if v.Stable {
				c.stable++
			} else {
				c.tentative++
			}
		}
		n.rep.Advance(rd)
	}
}

// deliver steps the messages queued to n (those of type typ and sender from,
// if non-zero) into it, or drops them.
func (e *interactionEnv) deliver(n *interactionNode, typ MsgType, from uint64, drop bool, b *strings.Builder) int {
	var keep, take []Message
	for _, m := range n.inbox {
		if (typ == 0 || m.Type == typ) && (from == 0 || m.From == from) {
			take = append(take, m)
		} else {
			keep = append(keep, m)
		}
	}
	n.inbox = keep
	if len(take) == 0 {
		return 0
	}
	fmt.Fprintf(b, "> %d receiving messages\n", n.id)
	for _, m := range take {
		switch {
		case drop:
			fmt.Fprintf(b, "  %s dropped\n", fmtMsg(m))
		case e.cut[[2]uint64{m.From, m.To}]:
			fmt.Fprintf(b, "  %s dropped (partition)\n", fmtMsg(m))
		case n.rep == nil:
			fmt.Fprintf(b, "  %s dropped (down)\n", fmtMsg(m))
		default:
			fmt.Fprintf(b, "  %s\n", fmtMsg(m))
			if err := n.rep.Step(m); err != nil {
				fmt.Fprintf(b, "  error: %v\n", err)
			}
		}
	}
	return len(take)
}

// stabilize handles Ready and delivers messages until neither has anything.
func (e *interactionEnv) stabilize(t *testing.T, b *strings.Builder) {
	for i := 0; ; i++ {
		if i > 1000 {
			t.Fatal("stabilize does not settle")
		}
		moved := false
		for _, id := range e.ids {
			if n := e.nodes[id]; n.rep != nil && n.rep.HasReady() {
				e.processReady(t, n, b)
				moved = true
			}
		}
		for _, id := range e.ids {
			if e.deliver(e.nodes[id], 0, 0, false, b) > 0 {
				moved = true
			}
		}
		if !moved {
			return
		}
	}
}

func (e *interactionEnv) partition(t *testing.T, d *datadriven.TestData, b *strings.Builder) {
	var groups [][]uint64
	cur := []uint64{}
	for _, a := range d.CmdArgs {
		if a.Key == "/" {
			groups = append(groups, cur)
			cur = []uint64{}
			continue
		}
		id, err := strconv.ParseUint(a.Key, 10, 64)
		if err != nil {
			d.Fatalf(t, "partition: %v", err)
		}
		e.node(t, d, id)
		cur = append(cur, id)
	}
	groups = append(groups, cur)
	var cuts []string
	for i, g := range groups {
		for _, h := range groups[i+1:] {
			for _, x := range g {
				for _, y := range h {
					e.cut[[2]uint64{x, y}] = true
					e.cut[[2]uint64{y, x}] = true
					cuts = append(cuts, fmt.Sprintf("%d-%d", min(x, y), max(x, y)))
				}
			}
		}
	}
	slices.Sort(cuts)
	fmt.Fprintf(b, "cut %s\n", strings.Join(cuts, " "))
}

func (e *interactionEnv) status(b *strings.Builder) {
	for _, id := range e.ids {
		n := e.nodes[id]
		if n.rep == nil {
			fmt.Fprintf(b, "%d: down\n", id)
			continue
		}
		r := n.rep
		st := r.node.Status()
		fmt.Fprintf(b, "%d: %s term=%d lead=%d commit=%d applied=%d\n",
			id, st.RaftState, st.GetTerm(), st.Lead, st.GetCommit(), st.Applied)
		fmt.Fprintf(b, "   committed: %s\n", fmtIDs(r.Committed()))
		fmt.Fprintf(b, "   tentative: %s\n", fmtIDs(r.Tentative()))
		fmt.Fprintf(b, "   vv=%s committed-vv=%s\n", r.vv, r.committedVV)
	}
}

func (e *interactionEnv) converged(b *strings.Builder) {
	var ref *Replica
	ok := true
	for _, id := range e.ids {
		r := e.nodes[id].rep
		if r == nil {
			continue
		}
		if len(r.Tentative()) > 0 {
			fmt.Fprintf(b, "%d: tentative not empty: %s\n", id, fmtIDs(r.Tentative()))
			ok = false
		}
		if ref == nil {
			ref = r
			continue
		}
		if !slices.Equal(r.Committed(), ref.Committed()) {
			fmt.Fprintf(b, "%d: committed %s differs from %d: %s\n", id, fmtIDs(r.Committed()), ref.ID(), fmtIDs(ref.Committed()))
			ok = false
		} else if r.CommittedStateHash() != ref.CommittedStateHash() {
			fmt.Fprintf(b, "%d: committed state differs from %d\n", id, ref.ID())
			ok = false
		}
	}
	if ok && ref != nil {
		fmt.Fprintf(b, "converged: every live replica committed %s, same state, nothing tentative\n", fmtIDs(ref.Committed()))
	}
}

// copyMsg gives the receiver its own copy, as a wire would: replicas share
// no memory.
func copyMsg(t *testing.T, m Message) Message {
	c := m
	c.VV = m.VV.Clone()
	c.Ops = nil
	for _, q := range m.Ops {
		c.Ops = append(c.Ops, copyReq(t, q))
	}
	if m.Raft != nil {
		c.Raft = proto.Clone(m.Raft).(*raftpb.Message)
	}
	return c
}

func copyReq(t *testing.T, q *Req) *Req {
	c, rest, err := DecodeReq(AppendReq(nil, q))
	if err != nil || len(rest) != 0 {
		t.Fatalf("copy %v: %v", q.ID, err)
	}
	return c
}

func lastIndex(t *testing.T, s *raft.MemoryStorage) uint64 {
	i, err := s.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	return i
}

func strength(strong bool) string {
	if strong {
		return "strong"
	}
	return "weak"
}

func fmtTS(ts uint64) string {
	ms, logical := TSMillis(ts), ts&(1<<hlcLogicalBits-1)
	if logical == 0 {
		return strconv.FormatInt(ms, 10)
	}
	return fmt.Sprintf("%d+%d", ms, logical)
}

func fmtID(id OpID) string {
	if id.IsZero() {
		return "-"
	}
	return id.String()
}

func fmtIDs(ids []OpID) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = id.String()
	}
	return "[" + strings.Join(s, " ") + "]"
}

func fmtOp(o state.Op) string {
	switch o.Kind {
	case state.OpGet, state.OpDelete, state.OpDequeue:
		return fmt.Sprintf("%s(%s)", o.Kind, o.Key)
	case state.OpPut, state.OpAppend, state.OpEnqueue:
		return fmt.Sprintf("%s(%s,%s)", o.Kind, o.Key, o.Value)
	case state.OpIncr:
		return fmt.Sprintf("incr(%s,%d)", o.Key, o.Delta)
	case state.OpCAS:
		exp := string(o.Expected)
		if o.ExpectAbsent {
			exp = "-"
		}
		return fmt.Sprintf("cas(%s,%s,%s)", o.Key, exp, o.Value)
	case state.OpScan:
		return fmt.Sprintf("scan(%s,%d)", o.Key, o.Limit)
	}
	return o.Kind.String()
}

func fmtReq(q *Req) string {
	s := fmt.Sprintf("%s %s %s ts=%s", q.ID, strength(q.Strong), fmtOp(q.Op), fmtTS(q.TS))
	if q.Strong {
		s += " ctx=" + q.Ctx.String()
	}
	return s
}

func fmtReqs(qs []*Req) string {
	s := make([]string, len(qs))
	for i, q := range qs {
		s[i] = fmtReq(q)
	}
	return "[" + strings.Join(s, "; ") + "]"
}

func fmtResult(r state.Result) string {
	var f []string
	if r.Err != state.CodeOK {
		f = append(f, "err="+r.Err.String())
	}
	if r.OK {
		f = append(f, "ok")
	}
	if r.Found {
		f = append(f, "found")
	}
	if len(r.Value) > 0 {
		f = append(f, "value="+string(r.Value))
	}
	if r.Int != 0 {
		f = append(f, fmt.Sprintf("int=%d", r.Int))
	}
	if r.Len != 0 {
		f = append(f, fmt.Sprintf("len=%d", r.Len))
	}
	if len(r.Items) > 0 {
		items := make([]string, len(r.Items))
		for i, kv := range r.Items {
			items[i] = kv.Key + "=" + string(kv.Value)
		}
		f = append(f, "items=["+strings.Join(items, " ")+"]")
	}
	return "{" + strings.Join(f, " ") + "}"
}

func (e *interactionEnv) fmtView(v View) string {
	kind := "tentative"
	if v.Stable {
		kind = "stable"
		if v.Confirmed {
			kind = "stable confirmed"
		}
	}
	cr := e.reqs[[2]uint64{v.Client, v.Seq}]
	return fmt.Sprintf("c%d/%d %s %s %s: %s %s (at %d: committed=%d vv=%s)",
		v.Client, v.Seq, fmtID(v.ID), strength(cr.Strong), fmtOp(cr.Op), kind, fmtResult(v.Result),
		v.Stamp.Replica, v.Stamp.CommittedCount, v.Stamp.VV)
}

func fmtEntry(ent *raftpb.Entry) string {
	s := fmt.Sprintf("%d/%d", ent.GetTerm(), ent.GetIndex())
	switch {
	case ent.GetType() != raftpb.EntryNormal:
		return s + " " + ent.GetType().String()
	case len(ent.GetData()) == 0:
		return s + " empty"
	}
	en, err := decodeEntry(ent.GetData())
	if err != nil {
		return fmt.Sprintf("%s undecodable: %v", s, err)
	}
	return fmt.Sprintf("%s proposer=%d ops=%s", s, en.Proposer, fmtReqs(en.Ops))
}

func fmtMsg(m Message) string {
	prefix := fmt.Sprintf("%d->%d", m.From, m.To)
	switch m.Type {
	case MsgRaft:
		return prefix + " " + fmtRaft(m.Raft)
	case MsgOps:
		return fmt.Sprintf("%s MsgOps %s", prefix, fmtReqs(m.Ops))
	case MsgSync:
		return fmt.Sprintf("%s MsgSync vv=%s clock=%s", prefix, m.VV, fmtTS(m.Clock))
	}
	return prefix + " " + m.Type.String()
}

func fmtRaft(m *raftpb.Message) string {
	s := fmt.Sprintf("%s term=%d", m.GetType(), m.GetTerm())
	switch m.GetType() {
	case raftpb.MsgApp:
		s += fmt.Sprintf(" idx=%d logterm=%d entries=%d commit=%d", m.GetIndex(), m.GetLogTerm(), len(m.GetEntries()), m.GetCommit())
	case raftpb.MsgAppResp:
		s += fmt.Sprintf(" idx=%d", m.GetIndex())
		if m.GetReject() {
			s += fmt.Sprintf(" rejected hint=%d", m.GetRejectHint())
		}
	case raftpb.MsgVote, raftpb.MsgPreVote:
		s += fmt.Sprintf(" idx=%d logterm=%d", m.GetIndex(), m.GetLogTerm())
	case raftpb.MsgVoteResp, raftpb.MsgPreVoteResp:
		if m.GetReject() {
			s += " rejected"
		}
	case raftpb.MsgHeartbeat:
		s += fmt.Sprintf(" commit=%d", m.GetCommit())
	case raftpb.MsgProp:
		s += fmt.Sprintf(" entries=%d", len(m.GetEntries()))
	case raftpb.MsgSnap:
		s += fmt.Sprintf(" snapshot=%d", m.GetSnapshot().GetMetadata().GetIndex())
	case raftpb.MsgReadIndexResp:
		s += fmt.Sprintf(" idx=%d", m.GetIndex())
	}
	return s
}
