package replica

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/correctables/correctables/internal/state"
)

// wireTrio is three replicas in one process, their messages encoded and
// decoded as on the wire, raft's log in memory: the replica's own work per
// operation, without storage or transport.
type wireTrio struct {
	rs    map[uint64]*Replica
	stors map[uint64]*raft.MemoryStorage
	inbox []Message
	views int
}

func newWireTrio(tb testing.TB) *wireTrio {
	peers := []uint64{1, 2, 3}
	t := &wireTrio{rs: map[uint64]*Replica{}, stors: map[uint64]*raft.MemoryStorage{}}
	for _, id := range peers {
		t.stors[id] = raft.NewMemoryStorage()
		r, err := New(Config{ID: id, Peers: peers, Storage: t.stors[id], Clock: func() int64 { return 1e12 },
			Rand: rand.New(rand.NewPCG(id, 1))})
		if err != nil {
			tb.Fatal(err)
		}
		t.rs[id] = r
	}
	for i := 0; !t.rs[1].IsLeader(); i++ {
		if i > 1000 {
			tb.Fatal("no leader in 1000 ticks")
		}
		t.rs[1].Tick()
		t.drive(tb)
	}
	return t
}

// drive hands out every Ready and delivers every message until all three
// replicas are quiet.
func (t *wireTrio) drive(tb testing.TB) {
	for busy := true; busy; {
		busy = false
		for _, id := range []uint64{1, 2, 3} {
			r := t.rs[id]
			for r.HasReady() {
				busy = true
				rd, err := r.Ready()
				if err != nil {
					tb.Fatal(err)
				}
				if hs := rd.HardState; hs != nil && !raft.IsEmptyHardState(hs) {
					if err := t.stors[id].SetHardState(proto.Clone(hs).(*raftpb.HardState)); err != nil {
						tb.Fatal(err)
					}
				}
				if err := t.stors[id].Append(rd.Entries); err != nil {
					tb.Fatal(err)
				}
				for _, ms := range [][]Message{rd.Early, rd.Messages} {
					for _, m := range ms {
						b, err := EncodeMessage(m)
						if err != nil {
							tb.Fatal(err)
						}
						dm, err := DecodeMessage(b)
						if err != nil {
							tb.Fatal(err)
						}
						t.inbox = append(t.inbox, dm)
					}
				}
				for _, v := range rd.Views {
					if v.Stable {
						t.views++
					}
				}
				r.Advance(rd)
			}
		}
		for len(t.inbox) > 0 {
			busy = true
			in := t.inbox
			t.inbox = nil
			for _, m := range in {
				if err := t.rs[m.To].Step(m); err != nil {
					tb.Fatal(err)
				}
			}
		}
	}
}

// BenchmarkPuts measures the replicas' work for 64 puts submitted over
// the three replicas (strong: ordered by raft, and weak: gossiped and
// committed by the periodic proposal) until every stable view is out; one
// op is one batch of 64, so allocs/op / 64 is the allocations per put over
// the three replicas.
func BenchmarkPuts(b *testing.B) {
	for _, strong := range []bool{true, false} {
		b.Run(fmt.Sprintf("strong=%t", strong), func(b *testing.B) {
			t := newWireTrio(b)
			const batch = 64
			seq := uint64(0)
			b.ReportAllocs()
			for b.Loop() {
				want := t.views + batch
				for i := range batch {
					seq++
					r := t.rs[uint64(1+i%3)]
					err := r.Submit(ClientRequest{Client: 1, Seq: seq, Strong: strong, Want: WantTentative | WantStable,
						Op: state.Op{Kind: state.OpPut, Key: fmt.Sprint("k", seq%1000), Value: make([]byte, 100)}})
					if err != nil {
						b.Fatal(err)
					}
				}
				for i := 0; t.views < want; i++ {
					if i > 10_000 {
						b.Fatalf("%d stable views of %d", t.views, want)
					}
					t.drive(b)
					if t.views < want {
						for _, r := range t.rs {
							r.Tick()
						}
					}
				}
			}
		})
	}
}
