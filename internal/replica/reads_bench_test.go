package replica

import (
	"testing"

	"github.com/correctables/correctables/internal/state"
)

// BenchmarkServeReads measures what every Ready spends on strong reads
// while 256 of them wait for their read index and none or 16 have theirs
// applied (`bench load --workload c --modes strong --concurrency 256`).
func BenchmarkServeReads(b *testing.B) {
	b.Run("due=0", func(b *testing.B) { benchServeReads(b, 0) })
	b.Run("due=16", func(b *testing.B) { benchServeReads(b, 16) })
}

func benchServeReads(b *testing.B, due int) {
	s := newSingle(&testing.T{}, -1)
	r := s.r
	op := state.Op{Kind: state.OpGet, Key: "k0"}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		for i := range uint64(256 + due) {
			pr := &pendingRead{req: ClientRequest{Client: 2, Seq: i + 1, Op: op}}
			if due > 0 && i%17 == 0 {
				pr.index = max(r.applied, 1)
			}
			r.reads[1000+i] = pr
		}
		r.applied = max(r.applied, 1)
		b.StartTimer()
		r.serveReads()
		b.StopTimer()
		if len(r.out.Views) != due || len(r.reads) != 256 {
			b.Fatalf("%d views, %d reads left", len(r.out.Views), len(r.reads))
		}
		r.out.Views = nil
		clear(r.reads)
		b.StartTimer()
	}
}
