package e2e

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/internal/history"
	"github.com/correctables/correctables/internal/netem"
)

const (
	bigSize     = 64 << 10
	healTimeout = 30 * time.Second // convergence after Heal
	majorityOps = 10
)

func TestPartitionHeal(t *testing.T) {
	addrs := freePorts(t, 3)
	// proxies[from][to] carries replica from's peer traffic to replica to.
	var proxies [3][3]*netem.Proxy
	for from := range 3 {
		for to := range 3 {
			if from == to {
				continue
			}
			p, err := netem.NewProxy(addrs[to], netem.Config{PartitionMode: netem.Blackhole})
			if err != nil {
				t.Fatal(err)
			}
			proxies[from][to] = p
		}
	}
	// Registered before the cluster's cleanup, so it runs after it: the
	// processes die first, then their links.
	t.Cleanup(func() {
		for from := range 3 {
			for to := range 3 {
				if p := proxies[from][to]; p != nil {
					p.Close()
				}
			}
		}
	})
	c := newCluster(t, addrs, func(from, to int) string { return proxies[from][to].Addr() })
	c.startAll()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Second)
	defer cancel()

	// Isolate a follower: the point is the minority replica's behaviour, and
	// a follower keeps the majority's leader (and the test's timing) stable.
	leader, err := c.leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	iso := leader%3 + 1
	var maj []string
	for _, p := range c.procs {
		if p.id != iso {
			maj = append(maj, p.addr)
		}
	}
	traces := &traceLog{}
	dial := func(eps ...string) *client.Client {
		cl, err := client.Dial(ctx, eps, client.WithProbeInterval(100*time.Millisecond), client.WithOpTrace(traces.add))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		return cl
	}
	clMaj, clIso := dial(maj...), dial(c.proc(iso).addr)
	clOther := []*client.Client{dial(maj[0]), dial(maj[1])}
	rec := newRecorder()
	const (
		cMaj = iota + 1
		cIso
		cIsoPending1
		cIsoPending2
		cCheck
	)
	must := func(o outcome, err error) outcome {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return o
	}

	// Before the partition: the big value the isolated replica's pending
	// put will see tentatively.
	before := bytes.Repeat([]byte("b"), bigSize)
	if o := must(invoke(ctx, rec, cMaj, clMaj, putOp("big", before), strongBoth)); o.err != nil {
		t.Fatalf("put before the partition: %v", o.err)
	}
	// The isolated replica must hold it before it is cut off.
	waitFor(t, ctx, "isolated replica holds the big value", func() (bool, string) {
		octx, cancelOp := context.WithTimeout(ctx, 3*time.Second)
		defer cancelOp()
		o := must(invoke(octx, nil, 0, clIso, getOp("big"), weakOnly))
		return o.err == nil && bytes.Equal(o.views[0].Value.Value, before), "not yet"
	})

	t.Logf("leader %d; cutting off replica %d", leader, iso)
	for i := range 3 {
		if i+1 == int(iso) {
			continue
		}
		proxies[i][iso-1].Partition()
		proxies[iso-1][i].Partition()
	}

	// Strong operations at the isolated replica: a preliminary view, then
	// nothing until the heal. One appends a token (to count how often it is
	// committed), one puts over the big value that the majority will
	// overwrite meanwhile (so its final result differs from its preliminary
	// one).
	type pending struct {
		name   string
		o      op
		client int
		out    chan outcome
	}
	token := []byte("iso-token;")
	pend := []*pending{
		{name: "append", o: appendOp("s-iso", token), client: cIsoPending1},
		{name: "put big", o: putOp("big", bytes.Repeat([]byte("i"), bigSize)), client: cIsoPending2},
	}
	for _, p := range pend {
		p.out = make(chan outcome, 1)
		go func() {
			o, err := invoke(ctx, rec, p.client, clIso, p.o, strongBoth)
			if err != nil {
				o.err = err
			}
			p.out <- o
		}()
	}

	// Weak operations at the isolated replica keep working.
	var weakKeys []string
	for i := range 5 {
		k, v := fmt.Sprintf("w-iso-%d", i), fmt.Appendf(nil, "v%d", i)
		octx, cancelOp := context.WithTimeout(ctx, opTimeout)
		o := must(invoke(octx, rec, cIso, clIso, putOp(k, v), weakOnly))
		cancelOp()
		if o.err != nil || len(o.views) != 1 {
			t.Fatalf("weak put %s at the isolated replica %d: %d views, %v", k, iso, len(o.views), o.err)
		}
		weakKeys = append(weakKeys, k)
	}
	if o := must(invoke(ctx, rec, cIso, clIso, getOp("w-iso-0"), weakOnly)); o.err != nil || string(o.views[0].Value.Value) != "v0" {
		t.Fatalf("weak read at the isolated replica: %+v, %v", o.views, o.err)
	}

	// The majority keeps committing.
	after := bytes.Repeat([]byte("m"), bigSize)
	if o := must(invoke(ctx, rec, cMaj, clMaj, putOp("big", after), strongBoth)); o.err != nil {
		t.Fatalf("majority put of the big value during the partition: %v", o.err)
	}
	for i := range majorityOps {
		octx, cancelOp := context.WithTimeout(ctx, 10*time.Second)
		o := must(invoke(octx, rec, cMaj, clMaj, incrOp("n", 1), strongBoth))
		cancelOp()
		v, ok := o.final()
		if !ok {
			t.Fatalf("majority increment %d during the partition: %v", i+1, o.err)
		}
		if v.Value.Int != int64(i+1) {
			t.Fatalf("majority increment %d during the partition returned %d", i+1, v.Value.Int)
		}
	}

	// The isolated replica's strong operations: preliminary view only.
	for _, p := range pend {
		select {
		case o := <-p.out:
			t.Fatalf("strong %s at the isolated replica closed during the partition: %d views, %v", p.name, len(o.views), o.err)
		default:
		}
	}

	waitFor(t, ctx, "preliminary views of the pending strong operations", func() (bool, string) {
		n := 0
		for _, r := range rec.Records() {
			if r.Client != cIsoPending1 && r.Client != cIsoPending2 {
				continue
			}
			if slices.ContainsFunc(r.Views, func(v history.View) bool { return v.Final }) {
				t.Fatalf("strong %v at the isolated replica got a final view during the partition: %+v", r.Op.Kind, r.Views)
			}
			if len(r.Views) > 0 {
				n++
			}
		}
		return n == len(pend), fmt.Sprintf("%d of %d have a preliminary view", n, len(pend))
	})

	t.Logf("healing")
	for i := range 3 {
		for j := range 3 {
			if i != j {
				proxies[i][j].Heal()
			}
		}
	}

	// The isolated replica converges: a strong read there sees the
	// majority's increments.
	waitFor(t, ctx, fmt.Sprintf("strong read of n at replica %d = %d", iso, majorityOps), func() (bool, string) {
		octx, cancelOp := context.WithTimeout(ctx, 3*time.Second)
		defer cancelOp()
		o := must(invoke(octx, rec, cCheck, clIso, getOp("n"), strongOnly))
		v, ok := o.final()
		if !ok {
			return false, fmt.Sprint(o.err)
		}
		return string(v.Value.Value) == fmt.Sprint(majorityOps), fmt.Sprintf("read %q", v.Value.Value)
	})
	// Its weak writes reach the others.
	for _, cl := range clOther {
		for i, k := range weakKeys {
			waitFor(t, ctx, "weak read of "+k+" at "+cl.Endpoints()[0].Address, func() (bool, string) {
				octx, cancelOp := context.WithTimeout(ctx, 3*time.Second)
				defer cancelOp()
				o := must(invoke(octx, nil, 0, cl, getOp(k), weakOnly))
				if o.err != nil {
					return false, o.err.Error()
				}
				return string(o.views[0].Value.Value) == fmt.Sprintf("v%d", i), fmt.Sprintf("read %q", o.views[0].Value.Value)
			})
		}
	}
	// Its pending strong operations complete.
	for _, p := range pend {
		select {
		case o := <-p.out:
			_, ok := o.final()
			if !ok {
				t.Fatalf("strong %s at replica %d failed after the heal: %d views, %v", p.name, iso, len(o.views), o.err)
			}
			if p.name == "put big" {
				checkDivergentPut(t, traces, o, before, after)
			}
		case <-time.After(healTimeout):
			t.Fatalf("strong %s at replica %d still pending %v after the heal", p.name, iso, healTimeout)
		}
	}
	// ... and the append was committed exactly once, as every replica sees.
	for _, cl := range append(clOther, clIso) {
		octx, cancelOp := context.WithTimeout(ctx, 10*time.Second)
		o := must(invoke(octx, rec, cCheck, cl, getOp("s-iso"), strongOnly))
		cancelOp()
		v, ok := o.final()
		if !ok || !bytes.Equal(v.Value.Value, token) {
			t.Errorf("strong read of s-iso at %s: %q (%v), want the token once: %q", cl.Endpoints()[0].Address, v.Value.Value, o.err, token)
		}
	}

	records := rec.Records()
	if err := history.CheckFinalOnce(records); err != nil {
		t.Error(err)
	}
	if res, err := history.CheckLinearizable(records, nil, 30*time.Second); res != porcupine.Ok {
		t.Errorf("linearizability: %v: %v", res, err)
	}
}

// checkDivergentPut checks the put whose preliminary result (the value
// before the partition, at the isolated replica) differs from its committed
// one (the majority's value): the final view must carry the result, so the
// operation receives both payloads.
func checkDivergentPut(t *testing.T, traces *traceLog, o outcome, before, after []byte) {
	t.Helper()
	if len(o.views) != 2 {
		t.Errorf("divergent put: %d views, want a preliminary and a final one", len(o.views))
		return
	}
	pre, fin := o.views[0], o.views[1]
	if !bytes.Equal(pre.Value.Value, before) || !bytes.Equal(fin.Value.Value, after) {
		t.Errorf("divergent put: preliminary result %d bytes of %q, final %d bytes of %q; want the value before (b) then the majority's (m)",
			len(pre.Value.Value), first(pre.Value.Value), len(fin.Value.Value), first(fin.Value.Value))
	}
	if fin.Confirmed {
		t.Errorf("divergent put: final view is a confirmation, but its result differs from the preliminary one")
	}
	tr, ok := traces.wait(func(tr client.OpTrace) bool { return tr.Views == 2 && !tr.Confirmed && tr.BytesReceived > 2*bigSize })
	if !ok {
		t.Errorf("divergent put: no trace of an operation that received both payloads (> %d bytes)", 2*bigSize)
		return
	}
	t.Logf("divergent put: received %d bytes for two %d-byte results", tr.BytesReceived, bigSize)
}

func first(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return string(b[:1])
}

// waitFor polls cond until it holds, failing the test with cond's last
// explanation after healTimeout.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(healTimeout)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("%s: not within %v: %s", what, healTimeout, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
