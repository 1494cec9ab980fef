package replica

import (
	"maps"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/correctables/correctables/internal/state"
)

// A replica keeps one ReadIndex request in flight: the strong reads that
// arrive while one is out wait and share the next, which is asked once the
// first is answered (Raft thesis §6.4). Before, every Ready with a new
// read asked for its own index, and each request cost the leader a round
// of heartbeats to every follower.
func TestStrongReadsShareTheReadIndexInFlight(t *testing.T) {
	tr := newTrio(t, nil)
	tr.elect()
	f := tr.r[1].Leader()%3 + 1
	if err := tr.r[f].Submit(ClientRequest{Client: 1, Seq: 1, Strong: true, Want: WantStable,
		Op: state.Op{Kind: state.OpPut, Key: "k", Value: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	for i := 0; tr.stable[f] < 1; i++ {
		if i > 100 {
			t.Fatal("the put did not commit in 100 ticks")
		}
		tr.mustDrive(f)
		tr.deliver()
		tr.tick()
	}
	readIndexes := func() int {
		n := 0
		for _, m := range tr.q {
			if m.From == f && m.Type == MsgRaft && m.Raft.GetType() == raftpb.MsgReadIndex {
				n++
			}
		}
		return n
	}
	get := state.Op{Kind: state.OpGet, Key: "k"}
	tr.q = nil
	reads := tr.r[f].Stats().Reads
	// Three reads in three Readies, nothing delivered in between: one
	// request goes out, the other two wait for its answer.
	for seq := uint64(2); seq <= 4; seq++ {
		if err := tr.r[f].Submit(ClientRequest{Client: 1, Seq: seq, Strong: true, Want: WantStable, Op: get}); err != nil {
			t.Fatal(err)
		}
		tr.mustDrive(f)
	}
	if n := readIndexes(); n != 1 {
		t.Fatalf("%d ReadIndex requests for three reads while the first is in flight; want 1", n)
	}
	// The answer to the first releases the next request, for the other two.
	for i := 0; tr.stable[f] < 4; i++ {
		if i > 100 {
			t.Fatalf("%d of 3 reads answered after 100 ticks", tr.stable[f]-1)
		}
		tr.deliver()
		tr.tick()
	}
	// A read that asks for the final view only executes once, on the
	// committed state: the tentative state's result would serve nothing.
	if n := tr.r[f].Stats().Reads - reads; n != 3 {
		t.Errorf("%d executions for three strong reads of the final view; want 3", n)
	}
}

// ReadNow serves a weak read off the Ready cycle only when every operation
// of the state it reads has been handed out in a Ready to persist: a put
// submitted since the last Ready makes it decline (the owner submits the
// read as usual), and once that Ready is taken it serves the put's value,
// the same view Submit would emit. It declines strong reads, reads that
// ask for a final view, updates and an uncovered min_vv, and refuses what
// Submit refuses.
func TestReadNowOnlyReadsWhatAReadyHandedOut(t *testing.T) {
	tr := newTrio(t, nil)
	tr.elect()
	r := tr.r[2]
	get := ClientRequest{Client: 1, Seq: 9, Want: WantTentative, Op: state.Op{Kind: state.OpGet, Key: "k"}}
	if err := r.Submit(ClientRequest{Client: 1, Seq: 1, Want: WantTentative, Op: state.Op{Kind: state.OpPut, Key: "k", Value: []byte("v1")}}); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := r.ReadNow(get, nil); ok || err != nil {
		t.Fatalf("ReadNow served a read (ok %v, err %v) while a put it would read waits for its Ready", ok, err)
	}
	rd, err := r.Ready() // the driver persists rd.Persist (the put) next
	if err != nil {
		t.Fatal(err)
	}
	if len(rd.Persist) != 1 {
		t.Fatalf("the Ready persists %d operations; want the put", len(rd.Persist))
	}
	v, ok, err := r.ReadNow(get, nil)
	if !ok || err != nil {
		t.Fatalf("ReadNow declined (ok %v, err %v) once the put's Ready was handed out", ok, err)
	}
	if !v.Result.Found || string(v.Result.Value) != "v1" || !v.Last || v.Stable || v.Client != 1 || v.Seq != 9 {
		t.Fatalf("view %+v; want the put's value v1, tentative, last, for client 1 seq 9", v)
	}
	if v.Stamp.VV[2] != 1 {
		t.Fatalf("the view's stamp counts %d operations of replica 2; want 1 (the put)", v.Stamp.VV[2])
	}
	r.Advance(rd)
	// The same read through Submit gives the same view.
	if err := r.Submit(get); err != nil {
		t.Fatal(err)
	}
	rd, err = r.Ready()
	if err != nil {
		t.Fatal(err)
	}
	if len(rd.Views) != 1 || string(rd.Views[0].Result.Value) != "v1" || !rd.Views[0].Last {
		t.Fatalf("Submit's views %+v; want one, the put's value", rd.Views)
	}
	r.Advance(rd)
	for _, c := range []struct {
		name  string
		cr    ClientRequest
		minVV VV
	}{
		{"a strong read", ClientRequest{Strong: true, Want: WantTentative, Op: get.Op}, nil},
		{"a read that asks for a final view", ClientRequest{Want: WantTentative | WantStable, Op: get.Op}, nil},
		{"a put", ClientRequest{Want: WantTentative, Op: state.Op{Kind: state.OpPut, Key: "k", Value: []byte("x")}}, nil},
		{"a min_vv not covered", get, VV{3: 1}},
	} {
		if _, ok, err := r.ReadNow(c.cr, c.minVV); ok || err != nil {
			t.Errorf("%s: ReadNow served it (ok %v, err %v); want it declined", c.name, ok, err)
		}
	}
	if _, ok, err := r.ReadNow(get, VV{2: 1}); !ok || err != nil {
		t.Errorf("a covered min_vv: ok %v, err %v; want it served", ok, err)
	}
	bad := ClientRequest{Want: WantTentative, Op: state.Op{Kind: state.OpGet, Key: string(make([]byte, 1<<20))}}
	_, ok, err = r.ReadNow(bad, nil)
	if subErr := r.Submit(bad); ok || err == nil || subErr == nil || err.Error() != subErr.Error() {
		t.Fatalf("an oversized key: ReadNow ok %v err %v, Submit %v; want the same refusal", ok, err, subErr)
	}
	if r.Stats().Reads != 3 {
		t.Fatalf("%d reads counted; want 3 (two off the cycle, one submitted)", r.Stats().Reads)
	}
}

// A read that asks for it gets, in its tentative view's stamp, ReadVV: what
// its result depends on, which is every committed operation and the
// tentative operations of the keys it reads, not those of other keys (a
// quorum read compares answers by it: client.Stamp.ReadVV). A Scan's is
// the whole VV. Through Submit and ReadNow alike; nil unless asked.
func TestReadVVCountsCommittedOpsAndTheReadsKeys(t *testing.T) {
	tr := newTrio(t, nil)
	tr.elect()
	seq := uint64(0)
	put := func(id uint64, k, v string) {
		seq++
		if err := tr.r[id].Submit(ClientRequest{Client: 1, Seq: seq, Want: WantTentative,
			Op: state.Op{Kind: state.OpPut, Key: k, Value: []byte(v)}}); err != nil {
			t.Fatal(err)
		}
		tr.mustDrive(id)
		tr.deliver()
	}
	r := tr.r[2]
	put(1, "a", "a1") // 1:1, committed below
	put(1, "b", "b1") // 1:2, committed below
	for i := 0; r.committedVV[1] < 2; i++ {
		if i > 1000 {
			t.Fatal("replica 1's puts not committed at replica 2 after 1000 ticks")
		}
		tr.tick()
	}
	put(1, "b", "b2") // 1:3, tentative
	put(3, "a", "a2") // 3:1, tentative
	put(3, "c", "c1") // 3:2, tentative
	if r.committedVV[1] != 2 || r.committedVV[3] != 0 || r.vv[1] != 3 || r.vv[3] != 2 {
		t.Fatalf("replica 2 committed %v and received %v; want {1:2} and {1:3 3:2}", r.committedVV, r.vv)
	}
	for _, c := range []struct {
		name string
		op   state.Op
		want VV // entries that must be non-zero; every other origin of vv at 0
	}{
		{"get a", state.Op{Kind: state.OpGet, Key: "a"}, VV{1: 2, 3: 1}},
		{"get b", state.Op{Kind: state.OpGet, Key: "b"}, VV{1: 3}},
		{"get c", state.Op{Kind: state.OpGet, Key: "c"}, VV{1: 2, 3: 2}},
		{"get of a key nobody wrote", state.Op{Kind: state.OpGet, Key: "z"}, VV{1: 2}},
		{"a read-only txn guarding b", state.Op{Kind: state.OpTxn, Txn: &state.Txn{Guards: []state.Guard{{Key: "b", Cmp: state.CmpExists}}}}, VV{1: 3}},
		{"scan", state.Op{Kind: state.OpScan, Key: "a", Limit: 10}, VV{1: 3, 3: 2}},
	} {
		want := VV{}
		for o := range r.vv {
			want[o] = c.want[o]
		}
		seq++
		cr := ClientRequest{Client: 1, Seq: seq, Want: WantTentative, Op: c.op, ReadVV: true}
		now, ok, err := r.ReadNow(cr, nil)
		if !ok || err != nil {
			t.Fatalf("%s: ReadNow declined (%v, %v)", c.name, ok, err)
		}
		if err := r.Submit(cr); err != nil {
			t.Fatal(err)
		}
		rd, err := r.Ready()
		if err != nil {
			t.Fatal(err)
		}
		r.Advance(rd)
		if len(rd.Views) != 1 {
			t.Fatalf("%s: %d views, want 1", c.name, len(rd.Views))
		}
		for how, got := range map[string]VV{"ReadNow": now.Stamp.ReadVV, "Submit": rd.Views[0].Stamp.ReadVV} {
			if !maps.Equal(got, want) {
				t.Errorf("%s through %s: ReadVV %v, want %v (vv %v, committed %v)", c.name, how, got, want, r.vv, r.committedVV)
			}
			if !r.vv.Covers(got) {
				t.Errorf("%s through %s: ReadVV %v over the vv %v", c.name, how, got, r.vv)
			}
		}
		cr.ReadVV = false
		if v, _, _ := r.ReadNow(cr, nil); v.Stamp.ReadVV != nil {
			t.Errorf("%s not asking for it: ReadVV %v, want nil", c.name, v.Stamp.ReadVV)
		}
	}
}
