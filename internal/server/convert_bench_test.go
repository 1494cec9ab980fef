package server

import (
	"testing"

	"github.com/correctables/correctables/internal/replica"
	"github.com/correctables/correctables/internal/state"
)

// BenchmarkViewToAPI measures converting a put's final view for the wire.
func BenchmarkViewToAPI(b *testing.B) {
	v := replica.View{
		ID: replica.OpID{Origin: 2, Seq: 77}, Stable: true, Last: true,
		Result: state.Result{Found: true, Value: make([]byte, 100)},
		Stamp:  replica.Stamp{Replica: 2, AppliedIndex: 900, CommittedCount: 800, VV: replica.VV{1: 300, 2: 77, 3: 410}, StableTime: 1 << 40},
	}
	b.ReportAllocs()
	for b.Loop() {
		if out := viewToAPI(v, false); len(out.GetStamp().GetVv()) != 3 {
			b.Fatal(out)
		}
	}
}
