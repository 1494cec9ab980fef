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
