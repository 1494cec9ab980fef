package storage

import (
	"fmt"
	"math"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// BenchmarkSave measures one Save of a hard state and one 256-byte entry,
// the common Ready, in a real temporary directory: with fsync (the
// production setting) and without, and with the write-ahead log's size set
// before it is written (the default, preallocFS) and without (prealloc=off:
// each synced write appends).
func BenchmarkSave(b *testing.B) {
	for _, c := range []struct {
		noSync   bool
		prealloc int64
	}{{false, 0}, {false, -1}, {true, 0}} {
		name := fmt.Sprintf("sync=%t", !c.noSync)
		if c.prealloc < 0 {
			name += "/prealloc=off"
		}
		b.Run(name, func(b *testing.B) {
			s := mustOpen(b, Options{Dir: b.TempDir(), NoSync: c.noSync, WALPreallocBytes: c.prealloc, Logger: quietLogger()})
			defer s.Close()
			data := make([]byte, 256)
			b.SetBytes(int64(len(data)))
			b.ResetTimer()
			for i := uint64(1); i <= uint64(b.N); i++ {
				hs := &raftpb.HardState{Term: proto.Uint64(1), Commit: proto.Uint64(i)}
				e := &raftpb.Entry{Index: proto.Uint64(i), Term: proto.Uint64(1), Data: data}
				if err := s.Save(hs, []*raftpb.Entry{e}, nil, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEntries measures reading 64 entries of 256 bytes from the middle
// of a 10,000-entry log: from Pebble (tail cache off) and from the tail
// cache.
func BenchmarkEntries(b *testing.B) {
	const n, batch = 10_000, 64
	for _, cached := range []bool{false, true} {
		b.Run(fmt.Sprintf("cache=%t", cached), func(b *testing.B) {
			opts := Options{Dir: b.TempDir(), NoSync: true, Logger: quietLogger(), TailCacheEntries: -1}
			if cached {
				opts.TailCacheEntries, opts.TailCacheBytes = n, 64<<20
			}
			s := mustOpen(b, opts)
			defer s.Close()
			data := make([]byte, 256)
			var ents []*raftpb.Entry
			for i := uint64(1); i <= n; i++ {
				ents = append(ents, &raftpb.Entry{Index: proto.Uint64(i), Term: proto.Uint64(1), Data: data})
				if len(ents) == 1000 {
					if err := s.Save(nil, ents, nil, nil); err != nil {
						b.Fatal(err)
					}
					ents = nil
				}
			}
			b.SetBytes(batch * 256)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				lo := uint64(1 + (i*batch)%(n-batch))
				got, err := s.Entries(lo, lo+batch, math.MaxUint64)
				if err != nil || len(got) != batch {
					b.Fatalf("Entries: %d entries, %v", len(got), err)
				}
			}
		})
	}
}

// BenchmarkTerm measures Term on an entry outside the tail cache (a Pebble
// point read) and inside it.
func BenchmarkTerm(b *testing.B) {
	s := mustOpen(b, Options{Dir: b.TempDir(), NoSync: true, Logger: quietLogger(), TailCacheEntries: 100})
	defer s.Close()
	var ents []*raftpb.Entry
	for i := uint64(1); i <= 1000; i++ {
		ents = append(ents, &raftpb.Entry{Index: proto.Uint64(i), Term: proto.Uint64(1), Data: make([]byte, 64)})
	}
	if err := s.Save(nil, ents, nil, nil); err != nil {
		b.Fatal(err)
	}
	for _, idx := range []uint64{500, 990} {
		b.Run(fmt.Sprintf("index=%d", idx), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := s.Term(idx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
