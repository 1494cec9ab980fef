package correctable_test

import (
	"context"
	"testing"

	"github.com/correctables/correctables/correctable"
)

// deep uses about n KiB of stack, as an RPC client's call path does.
//
//go:noinline
func deep(n int) byte {
	var frame [1024]byte
	frame[n%len(frame)] = byte(n)
	if n <= 1 {
		return frame[0]
	}
	return deep(n-1) + frame[n%len(frame)]
}

// BenchmarkInvokeStrongDeep measures an InvokeStrong and its wait for the
// final view through a binding whose Submit needs 16 KiB of stack, with 64
// invocations outstanding: the cost of the goroutine that runs each Submit.
func BenchmarkInvokeStrongDeep(b *testing.B) {
	bind := funcBinding{levels: twoLevels, submit: func(ctx context.Context, op int, levels []correctable.Level, emit correctable.Emitter[int]) error {
		return emit(correctable.View[int]{Value: op + int(deep(16)), Level: levels[0]})
	}}
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(32) // 64 goroutines on 2 CPUs
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := correctable.InvokeStrong(ctx, bind, 1).Final(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
