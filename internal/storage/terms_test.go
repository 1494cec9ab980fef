package storage

import (
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// TestTermRuns: the terms of the log are known in memory as runs, found at
// Open by binary search and kept by Save (a conflicting suffix replaced)
// and Compact, so that Term never decodes an entry (terms.go). The
// equivalence test checks Term against raft.MemoryStorage under random
// histories; this one checks the runs themselves.
func TestTermRuns(t *testing.T) {
	fs := vfs.NewMem()
	opts := memOptions(fs)
	opts.TailCacheEntries = -1 // every Term past the runs would read Pebble
	s := mustOpen(t, opts)
	terms := []uint64{1, 1, 1, 2, 2, 5, 5, 5, 5, 7}
	var ents []*raftpb.Entry
	for i, tm := range terms {
		ents = append(ents, ent(uint64(i+1), tm, "data"))
	}
	if err := s.Save(nil, ents, nil, nil); err != nil {
		t.Fatal(err)
	}
	want := []termRun{{1, 1}, {4, 2}, {6, 5}, {10, 7}}
	if !slices.Equal(s.runs, want) {
		t.Fatalf("runs after Save %v, want %v", s.runs, want)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, opts)
	defer s.Close()
	if !slices.Equal(s.runs, want) {
		t.Fatalf("runs after Open %v, want %v", s.runs, want)
	}
	for i, tm := range terms {
		if got, err := s.Term(uint64(i + 1)); err != nil || got != tm {
			t.Fatalf("Term(%d) = %d, %v; want %d", i+1, got, err, tm)
		}
	}
	// A new leader's entries replace the suffix from 7 on.
	if err := s.Save(nil, []*raftpb.Entry{ent(7, 8, "x"), ent(8, 8, "y")}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if want := []termRun{{1, 1}, {4, 2}, {6, 5}, {7, 8}}; !slices.Equal(s.runs, want) {
		t.Fatalf("runs after a conflicting append %v, want %v", s.runs, want)
	}
	if err := s.Compact(5); err != nil {
		t.Fatal(err)
	}
	if want := []termRun{{6, 5}, {7, 8}}; !slices.Equal(s.runs, want) {
		t.Fatalf("runs after Compact(5) %v, want %v", s.runs, want)
	}
	snap := &raftpb.Snapshot{Data: []byte("s"), Metadata: &raftpb.SnapshotMetadata{
		Index: proto.Uint64(20), Term: proto.Uint64(9), ConfState: &raftpb.ConfState{Voters: []uint64{1}}}}
	if err := s.Save(nil, []*raftpb.Entry{ent(21, 9, "z")}, snap, nil); err != nil {
		t.Fatal(err)
	}
	if want := []termRun{{21, 9}}; !slices.Equal(s.runs, want) {
		t.Fatalf("runs after a snapshot %v, want %v", s.runs, want)
	}
	if got, err := s.Term(21); err != nil || got != 9 {
		t.Fatalf("Term(21) = %d, %v; want 9", got, err)
	}
}

func TestEntryTerm(t *testing.T) {
	for _, e := range []*raftpb.Entry{ent(3, 7, "payload"), ent(1, 1, ""), {Data: []byte("no term")}} {
		b, err := proto.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := entryTerm(b); err != nil || got != e.GetTerm() {
			t.Fatalf("entryTerm(%v) = %d, %v; want %d", e, got, err, e.GetTerm())
		}
	}
	if _, err := entryTerm([]byte{0x12, 0xff}); err == nil {
		t.Fatal("entryTerm of a truncated field: no error")
	}
}
