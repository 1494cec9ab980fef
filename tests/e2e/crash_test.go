package e2e

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/internal/history"
	"github.com/correctables/correctables/internal/state"
)

// The crash test's keys: puts and reads on putKeys, increments (delta 1) on
// incrKeys, appends of unique tokens on appendKeys, so that durability can
// be read off the final state.
var (
	putKeys    = []string{"p0", "p1"}
	incrKeys   = []string{"n0", "n1"}
	appendKeys = []string{"a0", "a1"}
)

const (
	loadClients = 4
	opTimeout   = 5 * time.Second // then the operation is left pending
)

func TestCrashRecovery(t *testing.T) {
	c := newCluster(t, freePorts(t, 3), nil)
	c.startAll()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	cl, err := client.Dial(ctx, c.addrs(), client.WithProbeInterval(100*time.Millisecond), client.WithProbeTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := c.leader(ctx); err != nil {
		t.Fatal(err)
	}

	rec := newRecorder()
	var (
		stop     atomic.Bool
		wg       sync.WaitGroup
		loadErrs = make([]error, loadClients)
	)
	// Clients 1-3 are pinned to one replica each, so that the kills cut
	// operations off mid-stream; client 4 routes over all and fails over.
	for i := range loadClients {
		lc := cl
		if i < len(c.procs) {
			pinned, err := client.Dial(ctx, []string{c.procs[i].addr}, client.WithProbeInterval(100*time.Millisecond), client.WithProbeTimeout(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer pinned.Close()
			lc = pinned
		}
		wg.Go(func() { loadErrs[i] = load(ctx, rec, i+1, lc, &stop) })
	}
	stopLoad := func() {
		stop.Store(true)
		wg.Wait()
	}
	defer stopLoad() // on a t.Fatal below

	crash := func(what string, pick func(leader uint64) uint64) {
		t.Helper()
		time.Sleep(1500 * time.Millisecond)
		l, err := c.leader(ctx)
		if err != nil {
			t.Fatalf("before killing the %s: %v", what, err)
		}
		victim := pick(l)
		t.Logf("leader is %d; kill -9 the %s, replica %d (%d records so far)", l, what, victim, rec.Len())
		if err := c.proc(victim).kill(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		if err := c.proc(victim).start(); err != nil {
			t.Fatalf("restarting replica %d: %v", victim, err)
		}
		t.Logf("replica %d restarted", victim)
	}
	crash("follower", func(l uint64) uint64 { return l%3 + 1 })
	crash("leader", func(l uint64) uint64 { return l })
	time.Sleep(1500 * time.Millisecond)
	stopLoad()
	for i, err := range loadErrs {
		if err != nil {
			t.Fatalf("load client %d: %v", i+1, err)
		}
	}

	if _, err := c.waitQuiet(ctx); err != nil {
		t.Fatal(err)
	}
	// Final strong reads, recorded: the model must explain them, which is
	// how lost or duplicated writes show up in the linearizability check.
	finals := map[string]client.Result{}
	for _, k := range slicesConcat(putKeys, incrKeys, appendKeys) {
		out, err := invoke(ctx, rec, loadClients+1, cl, getOp(k), strongOnly)
		if err != nil {
			t.Fatal(err)
		}
		v, ok := out.final()
		if !ok {
			t.Fatalf("final strong read of %s after quiet: %v", k, out.err)
		}
		finals[k] = v.Value
	}

	// Every replica's committed state must be the same: a strong read at
	// each one, pinned, returns what the final reads returned.
	for _, p := range c.procs {
		pc, err := client.Dial(ctx, []string{p.addr})
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range slicesConcat(putKeys, incrKeys, appendKeys) {
			out, err := invoke(ctx, nil, 0, pc, getOp(k), strongOnly)
			if err != nil {
				t.Fatal(err)
			}
			v, ok := out.final()
			if !ok {
				t.Errorf("strong read of %s at %s: %v", k, p.addr, out.err)
				continue
			}
			if !v.Value.Equal(finals[k]) {
				t.Errorf("replicas diverge: %s at %s is %v, the final read gave %v", k, p.addr, v.Value, finals[k])
			}
		}
		pc.Close()
	}

	records := rec.Records()
	dumpRecords(t, records)
	summarize(t, records, finals)
	if err := history.CheckFinalOnce(records); err != nil {
		t.Error(err)
	}
	checkDurable(t, records, finals)
	checkWeakReads(t, records)
	res, err := history.CheckLinearizable(records, nil, 60*time.Second)
	if res != porcupine.Ok {
		t.Errorf("linearizability: %v: %v", res, err)
	}
}

func slicesConcat(ss ...[]string) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s...)
	}
	return out
}

// load runs operations one at a time until stop, as client id.
func load(ctx context.Context, rec *history.Recorder, id int, cl *client.Client, stop *atomic.Bool) error {
	rng := rand.New(rand.NewPCG(uint64(id), uint64(time.Now().UnixNano())))
	for n := 0; !stop.Load() && ctx.Err() == nil; n++ {
		var (
			o op
			m = strongBoth
		)
		token := fmt.Appendf(nil, "%d.%d;", id, n)
		switch p := rng.IntN(100); {
		case p < 18:
			o = putOp(putKeys[rng.IntN(len(putKeys))], token)
		case p < 30:
			o = incrOp(incrKeys[rng.IntN(len(incrKeys))], 1)
		case p < 40:
			o = appendOp(appendKeys[rng.IntN(len(appendKeys))], token)
		case p < 58:
			o = getOp(slicesConcat(putKeys, incrKeys, appendKeys)[rng.IntN(6)])
		case p < 66:
			o, m = putOp(putKeys[rng.IntN(len(putKeys))], token), weakCommitted
		case p < 72:
			o, m = incrOp(incrKeys[rng.IntN(len(incrKeys))], 1), weakCommitted
		case p < 80:
			o, m = appendOp(appendKeys[rng.IntN(len(appendKeys))], token), weakCommitted
		default:
			o, m = getOp(slicesConcat(putKeys, incrKeys, appendKeys)[rng.IntN(6)]), weakOnly
		}
		octx, cancel := context.WithTimeout(ctx, opTimeout)
		out, err := invoke(octx, rec, id, cl, o, m)
		cancel()
		if err != nil {
			return err
		}
		if out.err != nil {
			// Cut off by a kill or an election: pending in the history.
			// Pause so that a dead endpoint is not hammered (and the
			// history does not fill with pending writes).
			time.Sleep(200 * time.Millisecond)
		}
	}
	return nil
}

// summarize logs what the load did.
func summarize(t *testing.T, records []history.Record, finals map[string]client.Result) {
	var final, weakReads, ackedPending, unacked int
	for _, r := range records {
		switch {
		case slices.ContainsFunc(r.Views, func(v history.View) bool { return v.Final }):
			final++
		case !r.Strong && r.Op.ReadOnly():
			weakReads++
		case r.Acked:
			ackedPending++
		default:
			unacked++
		}
	}
	t.Logf("%d records: %d with a final view, %d weak reads, %d acknowledged without a final view (pending), %d without any view (pending)",
		len(records), final, weakReads, ackedPending, unacked)
	for _, k := range slices.Sorted(maps.Keys(finals)) {
		v := finals[k].Value
		if len(v) > 40 {
			v = append(v[:40:40], "..."...)
		}
		t.Logf("at the end: %s = %q", k, v)
	}
}

// checkDurable reads durability off the final state: every acknowledged
// append's token is there exactly once and no token is there that was never
// appended; every acknowledged increment is counted and no more than were
// invoked.
func checkDurable(t *testing.T, records []history.Record, finals map[string]client.Result) {
	t.Helper()
	checkDurableKeys(t, records, finals, incrKeys, appendKeys)
}

// checkDurableKeys is checkDurable for the increments on incrKeys and the
// appends of unique tokens on appendKeys; operations on other keys are not
// looked at.
func checkDurableKeys(t *testing.T, records []history.Record, finals map[string]client.Result, incrKeys, appendKeys []string) {
	t.Helper()
	type tally struct{ acked, all int64 }
	incrs := map[string]*tally{}
	tokens := map[string]map[string]bool{} // key -> token -> acked
	for _, k := range incrKeys {
		incrs[k] = &tally{}
	}
	for _, k := range appendKeys {
		tokens[k] = map[string]bool{}
	}
	for _, r := range records {
		switch {
		case r.Op.Kind == state.OpIncr && incrs[r.Op.Key] != nil:
			incrs[r.Op.Key].all += r.Op.Delta
			if r.Acked {
				incrs[r.Op.Key].acked += r.Op.Delta
			}
		case r.Op.Kind == state.OpAppend && tokens[r.Op.Key] != nil:
			tokens[r.Op.Key][string(r.Op.Value)] = r.Acked
		}
	}
	for k, tl := range incrs {
		got := counterValue(finals[k])
		if !finals[k].Found && tl.acked > 0 {
			t.Errorf("durability: %s is absent at the end, but %d increments were acknowledged", k, tl.acked)
			continue
		}
		if got < tl.acked || got > tl.all {
			t.Errorf("durability: %s = %d at the end, want between %d (acknowledged increments) and %d (invoked)", k, got, tl.acked, tl.all)
		}
	}
	for k, want := range tokens {
		seen := map[string]int{}
		for tok := range strings.SplitAfterSeq(string(finals[k].Value), ";") {
			if tok != "" {
				seen[tok]++
			}
		}
		for tok, n := range seen {
			if _, ok := want[tok]; !ok {
				t.Errorf("durability: %s holds %q, which was never appended", k, tok)
			}
			if n > 1 {
				t.Errorf("durability: %s holds %q %d times: an append applied more than once", k, tok, n)
			}
		}
		for tok, acked := range want {
			if acked && seen[tok] == 0 {
				t.Errorf("durability: acknowledged append of %q to %s is lost (final value %q)", tok, k, finals[k].Value)
			}
		}
	}
}

// checkWeakReads checks that weak reads of put keys return only values some
// put wrote: a weak view may be stale, never invented.
func checkWeakReads(t *testing.T, records []history.Record) {
	t.Helper()
	written := map[string]bool{}
	for _, r := range records {
		if r.Op.Kind == state.OpPut {
			written[r.Op.Key+"="+string(r.Op.Value)] = true
		}
	}
	for i, r := range records {
		if r.Op.Kind != state.OpGet || r.Strong || !strings.HasPrefix(r.Op.Key, "p") {
			continue
		}
		for _, v := range r.Views {
			if v.Result.Found && !written[r.Op.Key+"="+string(v.Result.Value)] {
				t.Errorf("weak read (record %d) of %s returned %q, which no put wrote", i, r.Op.Key, v.Result.Value)
			}
		}
	}
}

// counterValue is the integer a read of a counter returned: its value's
// decimal digits, else its Int (0 if absent).
func counterValue(res client.Result) int64 {
	n := res.Int
	if s := string(res.Value); s != "" {
		fmt.Sscan(s, &n)
	}
	return n
}
