package replica

import (
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
