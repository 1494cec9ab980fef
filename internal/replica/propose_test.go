package replica

import (
	"fmt"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/correctables/correctables/internal/state"
)

// The strong operations a follower accepts between two Readies go to the
// leader in one proposal, one entry holding all of them (with their
// contexts), and every one of them commits.
func TestStrongOperationsOfOneReadyShareAnEntry(t *testing.T) {
	tr := newTrio(t, nil)
	for i := 0; tr.r[1].Leader() == 0 || tr.r[2].Leader() == 0 || tr.r[3].Leader() == 0; i++ {
		if i > 1000 {
			t.Fatal("no leader after 1000 ticks")
		}
		tr.tick()
	}
	f := tr.r[1].Leader()%3 + 1
	const n = 5
	for i := range n {
		if err := tr.r[f].Submit(ClientRequest{Client: 1, Seq: uint64(i + 1), Strong: true, Want: WantStable,
			Op: state.Op{Kind: state.OpPut, Key: fmt.Sprint("k", i), Value: []byte("v")}}); err != nil {
			t.Fatal(err)
		}
	}
	tr.q = nil
	tr.mustDrive(f)
	var props []*raftpb.Entry
	for _, m := range tr.q {
		if m.Type == MsgRaft && m.Raft.GetType() == raftpb.MsgProp {
			props = append(props, m.Raft.GetEntries()...)
		}
	}
	if len(props) != 1 {
		t.Fatalf("%d entries proposed for %d strong operations of one Ready; want 1", len(props), n)
	}
	e, err := decodeEntry(props[0].GetData())
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Ops) != n {
		t.Fatalf("the entry holds %d operations; want the %d strong ones", len(e.Ops), n)
	}
	for i := 0; tr.stable[f] < n; i++ {
		if i > 100 {
			t.Fatalf("%d of %d committed after 100 ticks", tr.stable[f], n)
		}
		tr.deliver()
		tr.tick()
	}
}
