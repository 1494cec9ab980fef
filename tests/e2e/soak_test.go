package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/internal/history"
	"github.com/correctables/correctables/internal/state"
)

// The soak: many rounds of kill -9 (mostly of the leader), restart and
// SIGSTOP under a mixed load, through the public client only. Long, so only
// on demand: CORRECTABLES_E2E_SOAK=<rounds>.
const soakEnv = "CORRECTABLES_E2E_SOAK"

// acceptBound is how long after a restart every replica must take updates
// again. Generous: the machine is shared and slow; the times are printed.
const acceptBound = 30 * time.Second

// longDown is how long a replica stays down in one round of four leader
// kills and one of two follower kills, or in every kill with
// CORRECTABLES_E2E_SOAK_LONG set (CORRECTABLES_E2E_SOAK_DOWN, a duration,
// says otherwise).
var longDown = func() time.Duration {
	d, err := time.ParseDuration(os.Getenv("CORRECTABLES_E2E_SOAK_DOWN"))
	if err != nil || d <= 0 {
		return 10 * time.Second
	}
	return d
}()

// The soak's keys. The linearizable ones (soakLinBases, each with a suffix
// per soakEpoch: soakKeyring) get strong and weak-committed operations and
// strong reads, and go through the linearizability check; soakWeakAppend
// and soakWeakIncr get weak writes that ask for their preliminary view
// only, and soakProbeKey the appends that probe whether a replica takes
// updates. Those three are only read at the end: every acknowledged write
// on them must be there (their records, all pending, would make the
// linearizability search explode and add nothing to it).
var (
	soakPutKeys    = []string{"p0", "p1"}
	soakIncrKey    = "n0"
	soakAppendKey  = "a0"
	soakCASKey     = "c0"
	soakWeakAppend = "w0"
	soakWeakIncr   = "wn"
	soakProbeKey   = "f0"
	soakLinBases   = []string{"p0", "p1", "n0", "a0", "c0"}
	soakWeakKeys   = []string{"w0", "wn", "f0"}
)

// soakEpoch is how long the load uses one generation of the linearizable
// keys before it moves to the next. Linearizability is checked per key
// (it is local: a history is linearizable iff each key's is), and the
// search's cost grows steeply with a key's operations and the pending ones
// among them (every kill leaves some): one generation of keys for a whole
// soak of 18,000 records once kept porcupine busy for 53 minutes and 24 GB
// without an answer, where the same run checked in 10 s another time. An
// epoch of 3 s keeps each key to about a thousand records (the load makes
// about 2,000 a second) and still spans most kills and the restarts after
// them, so a write lost or resurrected by a restart is read back on the
// same key (and every acknowledged append and increment is checked at the
// end in any case).
const soakEpoch = 3 * time.Second

// soakKeyring names the generation of each linearizable key in use now, and
// remembers every one handed out for the final reads.
type soakKeyring struct {
	start time.Time
	mu    sync.Mutex
	used  map[string]bool
}

func newSoakKeyring() *soakKeyring {
	return &soakKeyring{start: time.Now(), used: map[string]bool{}}
}

// key returns base's generation now.
func (k *soakKeyring) key(base string) string {
	name := fmt.Sprintf("%s.%d", base, time.Since(k.start)/soakEpoch)
	k.mu.Lock()
	k.used[name] = true
	k.mu.Unlock()
	return name
}

// keys returns every generation handed out of the bases (all: nil), sorted.
func (k *soakKeyring) keys(bases ...string) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for name := range k.used {
		if len(bases) == 0 || slices.ContainsFunc(bases, func(b string) bool { return strings.HasPrefix(name, b+".") }) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

func soakRounds(t *testing.T) int {
	s := os.Getenv(soakEnv)
	if s == "" {
		t.Skipf("set %s=<rounds> to run the kill/restart soak", soakEnv)
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a number of rounds", soakEnv, s)
	}
	return n
}

func casOp(key string, expected, v []byte) op {
	if expected == nil {
		return op{client.CASAbsent(key, v), state.Op{Kind: state.OpCAS, Key: key, ExpectAbsent: true, Value: v}}
	}
	return op{client.CAS(key, expected, v), state.Op{Kind: state.OpCAS, Key: key, Expected: expected, Value: v}}
}

// soakLoad runs operations one at a time until stop, as client id: puts,
// increments and appends with every kind of view, compare-and-swaps on
// the value last seen, strong and weak reads.
func soakLoad(ctx context.Context, rec *history.Recorder, ks *soakKeyring, id int, cl *client.Client, stop *atomic.Bool) error {
	rng := rand.New(rand.NewPCG(uint64(id), uint64(time.Now().UnixNano())))
	var (
		casKey  string // the generation of soakCASKey casSeen is of
		casSeen []byte // its value this client last saw; nil: absent
	)
	for n := 0; !stop.Load() && ctx.Err() == nil; n++ {
		var (
			o op
			m = strongOnly
		)
		token := fmt.Appendf(nil, "%d.%d;", id, n)
		put := ks.key(soakPutKeys[rng.IntN(len(soakPutKeys))])
		lin := ks.key(soakLinBases[rng.IntN(len(soakLinBases))])
		incrKey, appendKey := ks.key(soakIncrKey), ks.key(soakAppendKey)
		if k := ks.key(soakCASKey); k != casKey {
			casKey, casSeen = k, nil // a new generation starts absent
		}
		switch p := rng.IntN(100); {
		case p < 10:
			o = putOp(put, token)
		case p < 16:
			o, m = putOp(put, token), strongBoth
		case p < 22:
			o, m = putOp(put, token), weakCommitted
		case p < 30:
			o = incrOp(incrKey, 1)
		case p < 34:
			o, m = incrOp(incrKey, 1), weakCommitted
		case p < 42:
			o = appendOp(appendKey, token)
		case p < 46:
			o, m = appendOp(appendKey, token), weakCommitted
		case p < 54:
			o = casOp(casKey, casSeen, token)
		case p < 68:
			o = getOp(lin)
		case p < 72:
			o, m = getOp(lin), strongBoth
		case p < 84:
			o, m = appendOp(soakWeakAppend, token), weakOnly
		case p < 92:
			o, m = incrOp(soakWeakIncr, 1), weakOnly
		default:
			o, m = getOp(put), weakOnly
		}
		octx, cancel := context.WithTimeout(ctx, opTimeout)
		out, err := invoke(octx, rec, id, cl, o, m)
		cancel()
		if err != nil {
			return err
		}
		if v, ok := out.final(); ok && o.s.Key == casKey {
			switch {
			case o.s.Kind == state.OpGet && v.Value.Found:
				casSeen = v.Value.Value
			case o.s.Kind == state.OpGet:
				casSeen = nil
			case v.Value.OK:
				casSeen = o.s.Value
			}
		}
		if out.err != nil {
			// Cut off by a kill or an election: pending in the history.
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// acceptance is how a replica took updates again after a restart.
type acceptance struct {
	id       uint64
	after    time.Duration // from the restarted replica's ready line
	attempts int
	busy     int // refusals as overloaded: the restart fence (or a full replica)
	errs     []string
}

// probeAccept appends to soakProbeKey through replica p alone, with the
// preliminary view only, until one is acknowledged or acceptBound has
// passed since from. A fresh client: gRPC's reconnection backoff of a
// long-lived one would be measured, not the replica.
func probeAccept(ctx context.Context, rec *history.Recorder, clientID int, p *proc, from time.Time) acceptance {
	a := acceptance{id: p.id}
	ctx, cancel := context.WithDeadline(ctx, from.Add(acceptBound))
	defer cancel()
	var pc *client.Client
	for pc == nil {
		// A replica that answers no probe within the dial timeout (a slow
		// start on a loaded machine) is dialed again.
		var err error
		if pc, err = client.Dial(ctx, []string{p.addr}, client.WithProbeInterval(100*time.Millisecond), client.WithProbeTimeout(time.Second)); err != nil {
			if len(a.errs) < 3 {
				a.errs = append(a.errs, err.Error())
			}
			if ctx.Err() != nil {
				a.after = -1
				return a
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	defer pc.Close()
	for ctx.Err() == nil {
		a.attempts++
		token := fmt.Appendf(nil, "probe%d.%d.%d;", p.id, from.UnixNano(), a.attempts)
		octx, ocancel := context.WithTimeout(ctx, 3*time.Second)
		out, err := invoke(octx, rec, clientID, pc, appendOp(soakProbeKey, token), weakOnly)
		ocancel()
		if err == nil && len(out.views) > 0 && out.views[0].Value.Err == nil {
			a.after = time.Since(from)
			return a
		}
		if err == nil {
			err = out.err
		}
		if errors.Is(err, context.DeadlineExceeded) && a.attempts == 2 && os.Getenv("CORRECTABLES_E2E_SOAK_DUMP") != "" {
			_ = p.signal(syscall.SIGQUIT) // its goroutines into its log, mid-stall
		}
		if errors.Is(err, client.ErrOverloaded) {
			a.busy++
		} else if len(a.errs) < 3 {
			a.errs = append(a.errs, fmt.Sprint(err))
		}
		time.Sleep(20 * time.Millisecond)
	}
	a.after = -1
	return a
}

// signal sends sig to p's running incarnation.
func (p *proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd == nil {
		return fmt.Errorf("replica %d not started", p.id)
	}
	return cmd.Process.Signal(sig)
}

// TestSoakLeaderKills: three serve processes under soakLoad from a client
// over every replica and one pinned to each; in each round the leader is
// killed with SIGKILL and restarted (two rounds in four), a follower is
// (one in four), or the leader is stopped with SIGSTOP for 2 s (one in
// four). After each restart every replica must take updates again within
// acceptBound (a restarted leader must not stay fenced), and a restarted
// follower of a stable cluster must not refuse them at all. At the end:
// every acknowledged append and increment (preliminary-only weak ones
// included) is in the final state, and the strong and committed results
// are linearizable.
func TestSoakLeaderKills(t *testing.T) {
	rounds := soakRounds(t)
	c := newCluster(t, freePorts(t, 3), nil)
	c.startAll()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rounds)*time.Minute+5*time.Minute)
	defer cancel()
	opts := []client.Option{client.WithProbeInterval(100 * time.Millisecond), client.WithProbeTimeout(time.Second)}
	cl, err := client.Dial(ctx, c.addrs(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := c.leader(ctx); err != nil {
		t.Fatal(err)
	}

	rec := newRecorder()
	ks := newSoakKeyring()
	const loaders = 6
	var (
		stop     atomic.Bool
		wg       sync.WaitGroup
		loadErrs = make([]error, loaders)
	)
	// Loaders 1-3 are pinned to one replica each; 4-6 route over all.
	for i := range loaders {
		lc := cl
		if i < len(c.procs) {
			pinned, err := client.Dial(ctx, []string{c.procs[i].addr}, opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer pinned.Close()
			lc = pinned
		}
		wg.Go(func() { loadErrs[i] = soakLoad(ctx, rec, ks, i+1, lc, &stop) })
	}
	stopLoad := func() {
		stop.Store(true)
		wg.Wait()
	}
	defer stopLoad()

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	probeClient := loaders + 1
	var worst acceptance
	worstRound := 0
	kinds := map[string]int{}
	for round := 1; round <= rounds; round++ {
		time.Sleep(time.Duration(500+rng.IntN(1500)) * time.Millisecond)
		l, err := c.leader(ctx)
		if err != nil {
			for _, p := range c.procs {
				_ = p.signal(syscall.SIGQUIT) // goroutines into the logs
			}
			t.Fatalf("round %d: %v", round, err)
		}
		kind := [...]string{"leader", "leader", "follower", "stop leader"}[round%4]
		kinds[kind]++
		victim := l
		if kind == "follower" {
			victim = (l+uint64(rng.IntN(2)))%3 + 1
		}
		p := c.proc(victim)
		var from time.Time
		var down time.Duration
		if kind == "stop leader" {
			if err := p.signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2 * time.Second)
			if err := p.signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			from = time.Now()
		} else {
			if err := p.kill(); err != nil {
				t.Fatal(err)
			}
			down = time.Duration(rng.IntN(2000)) * time.Millisecond
			if round%8 == 0 || round%8 == 6 || os.Getenv("CORRECTABLES_E2E_SOAK_LONG") != "" {
				// Long enough that the others' connections to it back off.
				down = longDown
			}
			time.Sleep(down)
			if err := p.start(); err != nil {
				t.Fatalf("round %d: restarting replica %d: %v", round, victim, err)
			}
			from = time.Now()
		}
		var accs [3]acceptance
		var pwg sync.WaitGroup
		for i, q := range c.procs {
			pwg.Go(func() { accs[i] = probeAccept(ctx, rec, probeClient, q, from) })
		}
		pwg.Wait()
		line := fmt.Sprintf("round %d: %s, replica %d (leader %d), down %v; updates taken again after", round, kind, victim, l, down)
		for _, a := range accs {
			line += fmt.Sprintf(" r%d %v (%d attempts, %d busy)", a.id, a.after.Round(time.Millisecond), a.attempts, a.busy)
			if a.after < 0 {
				// Its goroutines into its log, for the report below.
				_ = c.proc(a.id).signal(syscall.SIGQUIT)
				t.Errorf("round %d: replica %d took no update within %v of the %s %s: %d busy refusals, errors %v",
					round, a.id, acceptBound, kind, "restart/resume", a.busy, a.errs)
				continue
			}
			if a.after > worst.after {
				worst, worstRound = a, round
			}
		}
		t.Log(line)
		if kind == "follower" && accs[victim-1].busy > 0 {
			t.Errorf("round %d: follower %d restarted in a stable cluster refused %d updates as busy (fenced?)", round, victim, accs[victim-1].busy)
		}
	}
	time.Sleep(time.Second)
	stopLoad()
	for i, err := range loadErrs {
		if err != nil {
			t.Fatalf("load client %d: %v", i+1, err)
		}
	}
	t.Logf("%d rounds %v; worst time to take updates again: replica %d, %v after round %d's restart (%d attempts, %d busy)",
		rounds, kinds, worst.id, worst.after, worstRound, worst.attempts, worst.busy)

	soakFinalChecks(ctx, t, c, cl, rec, ks, loaders+2)
}

// soakFinalChecks waits for the replicas to agree, reads every key, checks
// that each replica holds the same, that no acknowledged write is lost,
// and that the strong and committed results are linearizable.
func soakFinalChecks(ctx context.Context, t *testing.T, c *cluster, cl *client.Client, rec *history.Recorder, ks *soakKeyring, clientID int) {
	t.Helper()
	linKeys := ks.keys()
	allKeys := append(slices.Clone(linKeys), soakWeakKeys...)
	if _, err := c.waitQuiet(ctx); err != nil {
		t.Fatal(err)
	}
	finals := map[string]client.Result{}
	for _, k := range allKeys {
		out, err := invoke(ctx, rec, clientID, cl, getOp(k), strongOnly)
		if err != nil {
			t.Fatal(err)
		}
		v, ok := out.final()
		if !ok {
			t.Fatalf("final strong read of %s after quiet: %v", k, out.err)
		}
		finals[k] = v.Value
	}
	for _, p := range c.procs {
		pc, err := client.Dial(ctx, []string{p.addr})
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range allKeys {
			out, err := invoke(ctx, nil, 0, pc, getOp(k), strongOnly)
			if err != nil {
				t.Fatal(err)
			}
			if v, ok := out.final(); !ok {
				t.Errorf("strong read of %s at %s: %v", k, p.addr, out.err)
			} else if !v.Value.Equal(finals[k]) {
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
	checkDurableKeys(t, records, finals, append(ks.keys(soakIncrKey), soakWeakIncr), append(ks.keys(soakAppendKey), soakWeakAppend, soakProbeKey))
	if os.Getenv("CORRECTABLES_E2E_SOAK_NOLIN") != "" {
		t.Log("linearizability not checked (CORRECTABLES_E2E_SOAK_NOLIN)")
		return
	}
	var lin []history.Record
	perKey := map[string]int{}
	for _, r := range records {
		if slices.Contains(linKeys, r.Op.Key) {
			lin = append(lin, r)
			perKey[r.Op.Key]++
		}
	}
	lin, dropped := dropWithoutEffect(lin, finals)
	largest := 0
	for _, n := range perKey {
		largest = max(largest, n)
	}
	start := time.Now()
	res, err := history.CheckLinearizable(lin, nil, 5*time.Minute)
	t.Logf("linearizability of %d records on %d keys (at most %d on one; %d writes without a final view left out, shown to have had no effect): %v in %v",
		len(lin), len(perKey), largest, dropped, res, time.Since(start).Round(time.Millisecond))
	if res != porcupine.Ok {
		t.Errorf("linearizability: %v: %v", res, err)
	}
}

// TestSoakSingleReplicaRestart: one serve process, its own cluster, killed
// with SIGKILL under load and restarted, round after round: it must take
// updates again (it leads the next term alone), and lose no acknowledged
// write.
func TestSoakSingleReplicaRestart(t *testing.T) {
	rounds := soakRounds(t)
	c := newCluster(t, freePorts(t, 1), nil)
	c.startAll()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rounds)*time.Minute+5*time.Minute)
	defer cancel()
	cl, err := client.Dial(ctx, c.addrs(), client.WithProbeInterval(100*time.Millisecond), client.WithProbeTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rec := newRecorder()
	ks := newSoakKeyring()
	const loaders = 3
	var worst time.Duration
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
	for round := 1; round <= rounds; round++ {
		var (
			stop atomic.Bool
			wg   sync.WaitGroup
			errs = make([]error, loaders)
		)
		for i := range loaders {
			// A client id per round: the tokens (id.n) stay unique.
			wg.Go(func() { errs[i] = soakLoad(ctx, rec, ks, round*loaders+i, cl, &stop) })
		}
		time.Sleep(time.Duration(300+rng.IntN(1000)) * time.Millisecond)
		if err := c.procs[0].kill(); err != nil {
			t.Fatal(err)
		}
		stop.Store(true)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("load client %d: %v", i+1, err)
			}
		}
		if err := c.procs[0].start(); err != nil {
			t.Fatalf("round %d: restarting: %v", round, err)
		}
		a := probeAccept(ctx, rec, 0, c.procs[0], time.Now())
		if a.after < 0 {
			t.Fatalf("round %d: the restarted single replica took no update within %v: %d busy refusals, errors %v", round, acceptBound, a.busy, a.errs)
		}
		worst = max(worst, a.after)
		t.Logf("round %d: updates taken again %v after the restart (%d attempts, %d busy)", round, a.after.Round(time.Millisecond), a.attempts, a.busy)
	}
	t.Logf("%d rounds; worst time to take updates again: %v", rounds, worst)
	soakFinalChecks(ctx, t, c, cl, rec, ks, (rounds+1)*loaders)
}

// dropWithoutEffect leaves out of the linearizability check the writes
// without a final view (cut off by a kill: porcupine must try each at every
// point after its invocation, as having taken effect or not, and a few
// dozen of them on one key made its search take gigabytes in seconds) that
// the rest of the history shows to have changed nothing a read could see:
//
//   - an append whose token is not in its key's final value: the soak's
//     append keys only ever get appends, so it never took effect;
//   - increments (delta 1) of a key whose final value counts exactly the
//     increments that have a final view: none of the others took effect;
//   - a put of a token that no view returned (reads return the value, puts
//     the value they replace), on a key of puts and reads only: if it took
//     effect, nothing observed it, and a linearization with it exists iff
//     one without it does (put it just before the next write after its
//     invocation, or last).
//
// It returns the records kept and the number left out.
func dropWithoutEffect(records []history.Record, finals map[string]client.Result) ([]history.Record, int) {
	hasFinal := func(r *history.Record) bool {
		return slices.ContainsFunc(r.Views, func(v history.View) bool { return v.Final })
	}
	finalIncrs := map[string]int64{}
	seen := map[string]bool{} // key + "\x00" + a value some view returned
	for i := range records {
		r := &records[i]
		if r.Op.Kind == state.OpIncr && hasFinal(r) {
			finalIncrs[r.Op.Key] += r.Op.Delta
		}
		// Reads return the value, and puts the one they replaced.
		for _, v := range r.Views {
			seen[r.Op.Key+"\x00"+string(v.Result.Value)] = true
		}
	}
	base := func(key string) string { b, _, _ := strings.Cut(key, "."); return b }
	kept := records[:0:0]
	for i := range records {
		r := &records[i]
		if !hasFinal(r) {
			f := finals[r.Op.Key]
			switch {
			case r.Op.Kind == state.OpAppend && base(r.Op.Key) == soakAppendKey && !strings.Contains(string(f.Value), string(r.Op.Value)):
				continue
			case r.Op.Kind == state.OpIncr && base(r.Op.Key) == soakIncrKey && counterValue(f) == finalIncrs[r.Op.Key]:
				continue
			case r.Op.Kind == state.OpPut && slices.Contains(soakPutKeys, base(r.Op.Key)) && !seen[r.Op.Key+"\x00"+string(r.Op.Value)]:
				continue
			}
		}
		kept = append(kept, *r)
	}
	return kept, len(records) - len(kept)
}

// dropWithoutEffect leaves out exactly the pending writes shown to have had
// no effect, and keeps every other record.
func TestDropWithoutEffect(t *testing.T) {
	final := func(res state.Result) []history.View { return []history.View{{Result: res, Final: true}} }
	rec := func(kind state.Kind, key, value string, views []history.View) history.Record {
		return history.Record{Op: state.Op{Kind: kind, Key: key, Value: []byte(value), Delta: 1}, Strong: true, Views: views, Acked: len(views) > 0}
	}
	records := []history.Record{
		rec(state.OpAppend, "a0.1", "1.1;", final(state.Result{Int: 4})),
		rec(state.OpAppend, "a0.1", "1.2;", nil), // not in the final value: dropped
		rec(state.OpAppend, "a0.1", "2.1;", nil), // in it: kept
		rec(state.OpIncr, "n0.1", "", final(state.Result{Int: 1})),
		rec(state.OpIncr, "n0.1", "", nil), // n0.1 ends at 1, one final increment: dropped
		rec(state.OpIncr, "n0.2", "", final(state.Result{Int: 1})),
		rec(state.OpIncr, "n0.2", "", nil),    // n0.2 ends at 2: kept
		rec(state.OpPut, "p0.1", "3.1;", nil), // never read: dropped
		rec(state.OpPut, "p0.1", "3.2;", nil), // read: kept
		rec(state.OpGet, "p0.1", "", final(state.Result{Found: true, Value: []byte("3.2;")})),
		rec(state.OpGet, "a0.1", "", nil),     // a read without a view: the checker skips it, kept here
		rec(state.OpPut, "p1.1", "4.1;", nil), // never read, but a put replaced it: kept
		rec(state.OpPut, "p1.1", "4.2;", final(state.Result{Found: true, Value: []byte("4.1;")})),
	}
	finals := map[string]client.Result{
		"a0.1": {Found: true, Value: []byte("1.1;2.1;")},
		"n0.1": {Found: true, Value: []byte("1")},
		"n0.2": {Found: true, Value: []byte("2")},
		"p0.1": {Found: true, Value: []byte("3.2;")},
	}
	kept, n := dropWithoutEffect(records, finals)
	if n != 3 || len(kept) != len(records)-3 {
		t.Fatalf("dropped %d, kept %d of %d; want 3 dropped", n, len(kept), len(records))
	}
	for _, i := range []int{1, 4, 7} {
		r := records[i]
		if slices.ContainsFunc(kept, func(k history.Record) bool {
			return k.Op.Key == r.Op.Key && k.Op.Kind == r.Op.Kind && string(k.Op.Value) == string(r.Op.Value) && len(k.Views) == 0
		}) {
			t.Errorf("record %d (%v %s %q, pending) kept; want it dropped", i, r.Op.Kind, r.Op.Key, r.Op.Value)
		}
	}
}
