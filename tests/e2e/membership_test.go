package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/internal/history"
	"github.com/correctables/correctables/internal/state"
)

// TestMembershipUnderLoad changes the membership of a running cluster of
// `serve` processes while clients run the crash test's workload: it adds a
// fourth replica (learner from an empty directory, then promoted), removes
// a replica (the leader, when it is one of the first three; it exits by
// itself), and replaces a replica killed with
// SIGKILL by a new one from an empty directory (remove, add, join,
// promote, as README's "Replacing a dead host" says). Then it checks the
// history as TestCrashRecovery does: linearizability of the final views
// (porcupine), final views once, durability read off the final state, and
// weak reads.
func TestMembershipUnderLoad(t *testing.T) {
	addrs := freePorts(t, 5)
	c := newCluster(t, addrs[:3], nil)
	c.startAll()
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	if _, err := c.leader(ctx); err != nil {
		t.Fatal(err)
	}
	dialOpts := []client.Option{client.WithProbeInterval(100 * time.Millisecond), client.WithProbeTimeout(time.Second)}
	rec := newRecorder()

	// Load clients, each stopped on its own: one routed over the first
	// three replicas, and one pinned to each replica.
	type loader struct {
		stop atomic.Bool
		done chan error
	}
	loaders := map[int]*loader{}
	var wg sync.WaitGroup
	startLoad := func(id int, eps []string) {
		t.Helper()
		cl, err := client.Dial(ctx, eps, dialOpts...)
		if err != nil {
			t.Fatal(err)
		}
		l := &loader{done: make(chan error, 1)}
		loaders[id] = l
		wg.Go(func() {
			defer cl.Close()
			l.done <- load(ctx, rec, id, cl, &l.stop)
		})
	}
	stopLoad := func(id int) {
		t.Helper()
		l := loaders[id]
		if l == nil || l.stop.Load() {
			return
		}
		l.stop.Store(true)
		if err := <-l.done; err != nil {
			t.Errorf("load client %d: %v", id, err)
		}
	}
	defer func() {
		for id := range loaders {
			loaders[id].stop.Store(true)
		}
		wg.Wait()
	}()
	// Client ids: 10 routes over replicas 1-3; 10+i is pinned to replica i.
	startLoad(10, c.addrs())
	for id := uint64(1); id <= 3; id++ {
		startLoad(10+int(id), []string{c.proc(id).addr})
	}

	time.Sleep(1500 * time.Millisecond)

	// 1. Add replica 4: learner, joins from an empty directory, promoted
	//    once it has caught up.
	c.addMember(ctx, 4, addrs[3])
	startLoad(14, []string{c.proc(4).addr})
	time.Sleep(1500 * time.Millisecond)

	// 2. Remove the leader, if it is one of the first three (else replica
	//    2): it steps down, the others elect a new one, and it exits.
	lead, err := c.leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	removed := uint64(2)
	if lead <= 3 {
		removed = lead
	}
	t.Logf("leader: replica %d; removing replica %d", lead, removed)
	c.memberChange(ctx, fmt.Sprintf("remove %d", removed), func(cc api.ClusterClient) (*api.MemberListReply, error) {
		return cc.MemberRemove(ctx, &api.MemberRemoveRequest{Id: removed})
	})
	stopLoad(10 + int(removed))
	if err := c.proc(removed).waitExit(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	if lg := tail(c.proc(removed).log, 5); !strings.Contains(lg, "was removed from the cluster") {
		t.Fatalf("replica %d exited, but its log does not say it was removed:\n%s", removed, lg)
	}
	t.Logf("replica %d exited after its removal (%d records so far)", removed, rec.Len())
	time.Sleep(1500 * time.Millisecond)

	// 3. Another of the first three dies for good (SIGKILL); replace it:
	//    remove it, add 5 as a learner, start 5 from an empty directory,
	//    promote it.
	var killed, kept uint64
	for id := uint64(3); id >= 1; id-- {
		if id != removed && killed == 0 {
			killed = id
		} else if id != removed {
			kept = id
		}
	}
	c.logLeader(ctx)
	if err := c.proc(killed).kill(); err != nil {
		t.Fatal(err)
	}
	stopLoad(10 + int(killed))
	t.Logf("kill -9 replica %d (%d records so far)", killed, rec.Len())
	// It cannot drain (it is dead): the removal goes ahead after the
	// drain's bound, and says so.
	rl := c.memberChange(ctx, fmt.Sprintf("remove %d", killed), func(cc api.ClusterClient) (*api.MemberListReply, error) {
		return cc.MemberRemove(ctx, &api.MemberRemoveRequest{Id: killed, DrainTimeoutMs: 3000})
	})
	if !strings.Contains(rl.GetWarning(), fmt.Sprintf("replica %d did not confirm its drain", killed)) {
		t.Errorf("removal of dead replica %d: warning %q", killed, rl.GetWarning())
	}
	c.addMember(ctx, 5, addrs[4])
	startLoad(15, []string{c.proc(5).addr})
	time.Sleep(2 * time.Second)
	for id := range loaders {
		stopLoad(id)
	}

	live := []uint64{kept, 4, 5}
	gone := []uint64{min(removed, killed), max(removed, killed)}
	l := c.memberChange(ctx, "list", func(cc api.ClusterClient) (*api.MemberListReply, error) {
		return cc.MemberList(ctx, &api.MemberListRequest{})
	})
	var members []uint64
	for _, m := range l.GetMembers() {
		members = append(members, m.GetId())
		if m.GetLearner() {
			t.Errorf("replica %d is still a learner", m.GetId())
		}
	}
	if !slices.Equal(members, live) || !slices.Equal(l.GetRemoved(), gone) {
		t.Fatalf("members %v removed %v; want %v and %v", members, l.GetRemoved(), live, gone)
	}
	sts, err := c.waitQuietOf(ctx, live)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range sts {
		t.Logf("replica %d: applied %d, snapshot %d, %d committed ops, vv %v", st.GetId(), st.GetAppliedIndex(), st.GetSnapshotIndex(), st.GetCommittedOps(), st.GetVv())
	}

	var eps []string
	for _, id := range live {
		eps = append(eps, c.proc(id).addr)
	}
	cl, err := client.Dial(ctx, eps, dialOpts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	finals := map[string]client.Result{}
	for _, k := range slicesConcat(putKeys, incrKeys, appendKeys) {
		out, err := invoke(ctx, rec, 99, cl, getOp(k), strongOnly)
		if err != nil {
			t.Fatal(err)
		}
		v, ok := out.final()
		if !ok {
			t.Fatalf("final strong read of %s after quiet: %v", k, out.err)
		}
		finals[k] = v.Value
	}

	records := rec.Records()
	summarize(t, records, finals)
	if err := history.CheckFinalOnce(records); err != nil {
		t.Error(err)
	}
	// A weak operation is durable at its origin until gossip or the log
	// carries it elsewhere: the killed replica's data directory is gone with it, so
	// its weak operations acknowledged only by their preliminary view may
	// be lost. Everything with a final view, and everything acknowledged
	// by the other replicas, must be there.
	durable := slices.Clone(records)
	relaxed, appends, found := 0, 0, 0
	for i := range durable {
		r := &durable[i]
		if r.Client == 10+int(killed) && r.Acked && !r.Op.ReadOnly() && !slices.ContainsFunc(r.Views, func(v history.View) bool { return v.Final }) {
			r.Acked = false
			relaxed++
			if r.Op.Kind == state.OpAppend {
				appends++
				if strings.Contains(string(finals[r.Op.Key].Value), string(r.Op.Value)) {
					found++
				}
			}
		}
	}
	t.Logf("durability: %d writes acknowledged by killed replica %d only through a preliminary view are not required (of its %d such appends, %d are in the final state)", relaxed, killed, appends, found)
	checkDurable(t, durable, finals)
	checkWeakReads(t, records)
	res, err := history.CheckLinearizable(records, nil, 60*time.Second)
	if res != porcupine.Ok {
		t.Errorf("linearizability: %v: %v", res, err)
	}
}

// cluster returns a gRPC connection to the first live replica that answers
// Status, for the Cluster service.
func (c *cluster) clusterConn(ctx context.Context) (*grpc.ClientConn, uint64, error) {
	for _, p := range c.procs {
		if !p.alive() {
			continue
		}
		if _, err := status(ctx, p.addr); err != nil {
			continue
		}
		cc, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		return cc, p.id, err
	}
	return nil, 0, fmt.Errorf("no live replica answers")
}

// memberChange runs a Cluster call on a live replica, retrying (bounded)
// while it fails: a change waits for a leader and for the previous change.
func (c *cluster) memberChange(ctx context.Context, what string, call func(api.ClusterClient) (*api.MemberListReply, error)) *api.MemberListReply {
	c.t.Helper()
	var last error
	for attempt := 0; attempt < 10 && ctx.Err() == nil; attempt++ {
		cc, via, err := c.clusterConn(ctx)
		if err != nil {
			last = err
			time.Sleep(200 * time.Millisecond)
			continue
		}
		l, err := call(api.NewClusterClient(cc))
		cc.Close()
		if err == nil {
			c.t.Logf("member %s (via replica %d): members %v, removed %v", what, via, memberList(l), l.GetRemoved())
			return l
		}
		last = fmt.Errorf("via replica %d: %w", via, err)
	}
	c.t.Fatalf("member %s: %v", what, last)
	return nil
}

func memberList(l *api.MemberListReply) []string {
	var out []string
	for _, m := range l.GetMembers() {
		s := fmt.Sprint(m.GetId())
		if m.GetLearner() {
			s += "(learner)"
		}
		out = append(out, s)
	}
	return out
}

// addMember adds replica id at addr as a learner, starts it with --join on
// an empty directory (its --peers: itself and the live replicas), waits
// until it has applied what the leader had committed when it was added,
// and promotes it.
func (c *cluster) addMember(ctx context.Context, id uint64, addr string) {
	c.t.Helper()
	c.memberChange(ctx, fmt.Sprintf("add %d (learner)", id), func(cc api.ClusterClient) (*api.MemberListReply, error) {
		return cc.MemberAdd(ctx, &api.MemberAddRequest{Id: id, PeerAddr: addr, Learner: true})
	})
	peers := fmt.Sprintf("%d=%s", id, addr)
	for _, p := range c.procs {
		if p.alive() {
			peers += fmt.Sprintf(",%d=%s", p.id, p.addr)
		}
	}
	dir := filepath.Dir(c.procs[0].dir)
	p := &proc{id: id, addr: addr, peers: peers, join: true,
		dir: filepath.Join(dir, fmt.Sprintf("r%d", id)), log: filepath.Join(dir, fmt.Sprintf("r%d.log", id))}
	c.procs = append(c.procs, p)
	if c.proc(id) != p {
		c.t.Fatalf("replica %d is not at position %d of the cluster", id, id)
	}
	if err := p.start(); err != nil {
		c.t.Fatal(err)
	}
	from, err := c.leader(ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	ref, err := status(ctx, c.proc(from).addr)
	if err != nil {
		c.t.Fatal(err)
	}
	want := ref.GetCommitIndex()
	deadline := time.Now().Add(quietTimeout)
	for {
		st, err := status(ctx, addr)
		if err == nil && st.GetAppliedIndex() >= want {
			c.t.Logf("replica %d caught up: applied %d (snapshot at %d) of %d", id, st.GetAppliedIndex(), st.GetSnapshotIndex(), want)
			break
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("replica %d did not catch up to %d within %v (status %v, err %v)", id, want, quietTimeout, st, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.memberChange(ctx, fmt.Sprintf("promote %d", id), func(cc api.ClusterClient) (*api.MemberListReply, error) {
		return cc.MemberPromote(ctx, &api.MemberPromoteRequest{Id: id})
	})
}

// logLeader logs the leader the live replicas agree on.
func (c *cluster) logLeader(ctx context.Context) {
	c.t.Helper()
	l, err := c.leader(ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Logf("leader: replica %d", l)
}

// waitExit waits until the current incarnation exits by itself.
func (p *proc) waitExit(d time.Duration) error {
	p.mu.Lock()
	exited := p.exited
	p.mu.Unlock()
	select {
	case <-exited:
		return nil
	case <-time.After(d):
		return fmt.Errorf("replica %d still runs %v after its removal (log %s)", p.id, d, p.log)
	}
}

// waitQuietOf is waitQuiet over the given replicas.
func (c *cluster) waitQuietOf(ctx context.Context, ids []uint64) ([]*api.StatusReply, error) {
	ctx, cancel := context.WithTimeout(ctx, quietTimeout)
	defer cancel()
	var last string
	for {
		var sts []*api.StatusReply
		for _, id := range ids {
			st, err := status(ctx, c.proc(id).addr)
			if err != nil {
				last = fmt.Sprintf("replica %d: %v", id, err)
				break
			}
			sts = append(sts, st)
		}
		if len(sts) == len(ids) {
			if why := diverged(sts); why == "" {
				return sts, nil
			} else {
				last = why
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("replicas %v not quiet within %v: %s", ids, quietTimeout, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
