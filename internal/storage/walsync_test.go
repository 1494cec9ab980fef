package storage

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3/raftpb"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
)

// TestWALFilesSyncRaw checks which write-ahead log files get raw syncs
// (walFile): those of the operating system's file system with two Ps or
// more, and no others: not other files, not with PlainWALSync, not with
// one P, not through a wrapping file system (whose SyncData may do more
// than the system call, as errorfs's injects errors).
func TestWALFilesSyncRaw(t *testing.T) {
	if !rawSyncSupported {
		t.Skip("raw syncs are made on Linux only")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	dir := t.TempDir()
	n := 0
	create := func(p preallocFS, category vfs.DiskWriteCategory) vfs.File {
		t.Helper()
		n++
		f, err := p.Create(filepath.Join(dir, "f"+string(rune('a'+n))), category)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	isRaw := func(f vfs.File) bool { _, ok := f.(walFile); return ok }

	if f := create(preallocFS{FS: vfs.Default, size: 1 << 20}, walCategory); !isRaw(f) {
		t.Errorf("a log file of vfs.Default with 2 Ps: %T, want walFile", f)
	}
	if f := create(preallocFS{FS: vfs.Default, size: 1 << 20}, vfs.WriteCategoryUnspecified); isRaw(f) {
		t.Error("a file that is not a log got raw syncs")
	}
	if f := create(preallocFS{FS: vfs.Default, size: 1 << 20, plainSync: true}, walCategory); isRaw(f) {
		t.Error("PlainWALSync: the log got raw syncs")
	}
	if f := create(preallocFS{FS: wrappingFS{vfs.Default}}, walCategory); isRaw(f) {
		t.Error("a log through a wrapping file system got raw syncs")
	}
	mem := vfs.NewMem()
	if err := mem.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if f := create(preallocFS{FS: mem, size: 1 << 20}, walCategory); isRaw(f) {
		t.Error("an in-memory log got raw syncs")
	}
	runtime.GOMAXPROCS(1)
	if f := create(preallocFS{FS: vfs.Default, size: 1 << 20}, walCategory); isRaw(f) {
		t.Error("one P: the log got raw syncs (a sync would stop the whole process)")
	}
}

// wrappingFS is a file system over another, as errorfs or a disk health
// checker is.
type wrappingFS struct{ vfs.FS }

// TestRawFdatasyncReportsErrors: a raw sync's failure is an error, not
// dropped (a log sync that failed must fail the write).
func TestRawFdatasyncReportsErrors(t *testing.T) {
	if !rawSyncSupported {
		t.Skip("raw syncs are made on Linux only")
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	fd := f.Fd()
	if err := rawFdatasync(fd); err != nil {
		t.Fatalf("fdatasync of an open file: %v", err)
	}
	f.Close()
	if err := rawFdatasync(fd); !errors.Is(err, unix.EBADF) {
		t.Fatalf("fdatasync of a closed descriptor: %v, want EBADF", err)
	}
}

// TestStoreWithRawWALSyncsRestarts writes through a Store whose log syncs
// raw (two Ps, a real directory) and reads everything back after reopening.
func TestStoreWithRawWALSyncsRestarts(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	dir := t.TempDir()
	s := mustOpen(t, Options{Dir: dir, Logger: quietLogger()})
	data := make([]byte, 300)
	for i := uint64(1); i <= 200; i++ {
		hs := &raftpb.HardState{Term: proto.Uint64(1), Commit: proto.Uint64(i)}
		e := &raftpb.Entry{Index: proto.Uint64(i), Term: proto.Uint64(1), Data: data}
		if err := s.Save(hs, []*raftpb.Entry{e}, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, Options{Dir: dir, Logger: quietLogger()})
	defer s.Close()
	if last, _ := s.LastIndex(); last != 200 {
		t.Fatalf("last index after reopening: %d, want 200", last)
	}
	hs, _, err := s.InitialState()
	if err != nil || hs.GetCommit() != 200 {
		t.Fatalf("hard state after reopening: %v, %v", hs, err)
	}
	ents, err := s.Entries(1, 201, 1<<30)
	if err != nil || len(ents) != 200 {
		t.Fatalf("entries after reopening: %d, %v", len(ents), err)
	}
}
