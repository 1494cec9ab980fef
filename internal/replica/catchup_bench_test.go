package replica

import (
	"fmt"
	"testing"

	"github.com/correctables/correctables/internal/state"
)

// BenchmarkPlaceUnderManyNewer: a restarted replica's stack holds many
// newer operations on a few keys while anti-entropy brings older ones, a
// few per message: each message rolls back and executes again what follows
// its operations on their keys (a fifth of the stack here). 3,000 newer
// appends over 5 keys, 100 messages of 2 older ones: 160 ms with rollbacks
// only where necessary, 233 ms when everything above the first conflict
// went (a24985b).
func BenchmarkPlaceUnderManyNewer(b *testing.B) {
	const newer, msgs, perMsg = 3000, 100, 2
	for b.Loop() {
		b.StopTimer()
		r := loneReplica(b)
		var ops []*Req
		for s := uint64(1); s <= newer; s++ {
			ops = append(ops, &Req{ID: OpID{2, s}, TS: 3e12 + s, Op: state.Op{Kind: state.OpAppend, Key: fmt.Sprint("k", s%5), Value: []byte("t")}})
		}
		if err := r.Step(Message{Type: MsgOps, From: 2, To: 1, Ops: ops}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		for m := range msgs {
			var old []*Req
			for i := range perMsg {
				s := uint64(m*perMsg + i + 1)
				old = append(old, &Req{ID: OpID{3, s}, TS: 2e12 + s, Op: state.Op{Kind: state.OpAppend, Key: fmt.Sprint("k", s%5), Value: []byte("c")}})
			}
			if err := r.Step(Message{Type: MsgOps, From: 3, To: 1, Ops: old}); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkGossipUnderNewer: the weak-put load of a busy replica. Its
// stack holds the newer operations of the last few milliseconds, over many
// keys, when a peer's gossip brings older ones: each message rolls back
// what follows its operations on their keys, a few operations, while the
// rest of the stack commutes with them and stays executed (Creek §4.4).
// 1,000 keys, 200 newer operations in the stack, messages of 30 older
// ones; the stack stays about that deep (its bottom commits). 122-128 us
// per message when what stays keeps its slot in the key index, 230-350 us
// when the index forgot and took back everything above the lowest
// rollback (go test -bench GossipUnderNewer -count 3, two cores).
func BenchmarkGossipUnderNewer(b *testing.B) {
	const keys, depth, perMsg = 1000, 200, 30
	r := loneReplica(b)
	key := func(s uint64) string { return fmt.Sprint("k", (s*7919)%keys) }
	var newSeq, oldSeq uint64
	push := func(n int) {
		var ops []*Req
		for range n {
			newSeq++
			ops = append(ops, &Req{ID: OpID{2, newSeq}, TS: 3e12 + 10*newSeq, Op: state.Op{Kind: state.OpPut, Key: key(newSeq), Value: []byte("t")}})
		}
		if err := r.Step(Message{Type: MsgOps, From: 2, To: 1, Ops: ops}); err != nil {
			b.Fatal(err)
		}
	}
	push(depth)
	for b.Loop() {
		var old []*Req
		for range perMsg {
			oldSeq++
			// Older than the newest depth operations of origin 2.
			old = append(old, &Req{ID: OpID{3, oldSeq}, TS: 3e12 + 10*(newSeq-depth) + 5, Op: state.Op{Kind: state.OpPut, Key: key(oldSeq*31 + 17), Value: []byte("c")}})
		}
		if err := r.Step(Message{Type: MsgOps, From: 3, To: 1, Ops: old}); err != nil {
			b.Fatal(err)
		}
		push(perMsg)
		// The bottom goes as it would commit: keep the stack about depth deep.
		if n := len(r.tentative); n > 2*depth {
			for _, e := range r.tentative[:n-2*depth] {
				r.keys.dropBottom(e.req)
				r.ntent--
			}
			r.dropBottom(n - 2*depth)
		}
	}
}
