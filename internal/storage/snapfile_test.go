package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// snapStore opens a Store on fs with entries 1..n of term 1.
func snapStore(t *testing.T, fs vfs.FS, n uint64) *Store {
	t.Helper()
	s := mustOpen(t, memOptions(fs))
	var ents []*raftpb.Entry
	for i := uint64(1); i <= n; i++ {
		ents = append(ents, ent(i, 1, "e"))
	}
	if err := s.Save(nil, ents, nil, nil); err != nil {
		t.Fatal(err)
	}
	return s
}

func snapFiles(t *testing.T, fs vfs.FS) []string {
	t.Helper()
	names, err := fs.List(fs.PathJoin("db", snapDir))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	return names
}

// TestSnapshotFiles: a snapshot's data lives in a file of its own, which
// a restart reads back whole; a newer snapshot (created here, or arrived
// through Save) replaces it and its file; files no record names (a crash
// between the file and its record) are removed at Open; a file damaged on
// disk is reported as corrupt, not returned.
func TestSnapshotFiles(t *testing.T) {
	fs := vfs.NewMem()
	s := snapStore(t, fs, 10)
	big := bytes.Repeat([]byte("0123456789abcdef"), 3*snapBytesPerSync/16+5) // several sync chunks
	if _, err := s.CreateSnapshot(4, &raftpb.ConfState{Voters: []uint64{1}}, big); err != nil {
		t.Fatal(err)
	}
	if got := snapFiles(t, fs); !slices.Equal(got, []string{snapFileName(1, 4)}) {
		t.Fatalf("snapshot files %v, want one for index 4", got)
	}
	// The record in Pebble holds the metadata only.
	if v, _, _ := s.get(keySnapshot); len(v) > 100 {
		t.Fatalf("the snapshot record holds %d bytes; want the metadata only", len(v))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Leftovers of a crash between a file and its record.
	for _, n := range []string{snapFileName(1, 9), snapFileName(1, 9) + ".tmp"} {
		f, err := fs.Create(fs.PathJoin("db", snapDir, n), "")
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	s = mustOpen(t, memOptions(fs))
	if got := snapFiles(t, fs); !slices.Equal(got, []string{snapFileName(1, 4)}) {
		t.Fatalf("after Open: snapshot files %v, want only the recorded one", got)
	}
	snap, err := s.Snapshot()
	if err != nil || snap.GetMetadata().GetIndex() != 4 || !bytes.Equal(snap.GetData(), big) ||
		!slices.Equal(snap.GetMetadata().GetConfState().GetVoters(), []uint64{1}) {
		t.Fatalf("Snapshot after restart: index %d, %d bytes, %v; want index 4 with its data", snap.GetMetadata().GetIndex(), len(snap.GetData()), err)
	}
	// A snapshot from the leader, through Save.
	leader := &raftpb.Snapshot{Data: []byte("leader's"), Metadata: &raftpb.SnapshotMetadata{
		Index: proto.Uint64(20), Term: proto.Uint64(2), ConfState: &raftpb.ConfState{Voters: []uint64{1, 2}}}}
	if err := s.Save(nil, nil, leader, nil); err != nil {
		t.Fatal(err)
	}
	if got := snapFiles(t, fs); !slices.Equal(got, []string{snapFileName(2, 20)}) {
		t.Fatalf("after a snapshot through Save: files %v, want the new one only", got)
	}
	if snap, err := s.Snapshot(); err != nil || string(snap.GetData()) != "leader's" || snap.GetMetadata().GetIndex() != 20 {
		t.Fatalf("Snapshot = %v, %v; want the leader's", snap, err)
	}
	// An empty snapshot's data stays absent (proto2 presence).
	if err := s.Save(nil, []*raftpb.Entry{ent(21, 2, "x")}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateSnapshot(21, nil, nil); err != nil {
		t.Fatal(err)
	}
	if snap, err := s.Snapshot(); err != nil || snap.Data != nil || snap.GetMetadata().GetIndex() != 21 {
		t.Fatalf("Snapshot without data = %v, %v; want index 21, no data", snap, err)
	}
	// A damaged file.
	path := fs.PathJoin("db", snapDir, snapFileName(2, 21))
	f, err := fs.OpenReadWrite(path, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xff}, 2); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := s.Snapshot(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Snapshot of a damaged file: %v, want ErrCorrupt", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestSnapshotInlineFormat: a data directory of format 1 keeps its snapshot
// inline, in the "s" record; it is still read, and the first snapshot
// written moves the directory to format 2.
func TestSnapshotInlineFormat(t *testing.T) {
	fs := vfs.NewMem()
	s := snapStore(t, fs, 10)
	inline := &raftpb.Snapshot{Data: []byte("inline state"), Metadata: &raftpb.SnapshotMetadata{
		Index: proto.Uint64(3), Term: proto.Uint64(1), ConfState: &raftpb.ConfState{Voters: []uint64{1}}}}
	// What format 1 wrote.
	if err := s.db.Set(keyVersion, binary.BigEndian.AppendUint64(nil, formatVersionInline), nil); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Set(keySnapshot, marshal(inline), nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, memOptions(fs))
	if snap, err := s.Snapshot(); err != nil || string(snap.GetData()) != "inline state" || snap.GetMetadata().GetIndex() != 3 {
		t.Fatalf("format 1 snapshot = %v, %v; want the inline one", snap, err)
	}
	if _, err := s.CreateSnapshot(6, nil, []byte("state@6")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, memOptions(fs))
	defer s.Close()
	if v, _, _ := s.get(keyVersion); binary.BigEndian.Uint64(v) != formatVersion {
		t.Fatalf("format %d after a snapshot file, want %d", binary.BigEndian.Uint64(v), formatVersion)
	}
	if snap, err := s.Snapshot(); err != nil || string(snap.GetData()) != "state@6" || snap.GetMetadata().GetIndex() != 6 {
		t.Fatalf("Snapshot = %v, %v; want state@6 at 6", snap, err)
	}
}

// TestCreateSnapshotWhileSaving: CreateSnapshot writes its file without the
// Store's lock, so it runs on another goroutine while the replica's Saves
// and raft's reads go on (run with -race).
func TestCreateSnapshotWhileSaving(t *testing.T) {
	fs := vfs.NewMem()
	s := snapStore(t, fs, 10)
	defer s.Close()
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := uint64(2); i <= 10; i++ {
			if _, err := s.CreateSnapshot(i, nil, bytes.Repeat([]byte{byte(i)}, 1<<16)); err != nil {
				t.Error(err)
				return
			}
		}
	})
	for i := uint64(11); i <= 200; i++ {
		if err := s.Save(nil, []*raftpb.Entry{ent(i, 1, "e")}, nil, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Term(i); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	snap, err := s.Snapshot()
	if err != nil || snap.GetMetadata().GetIndex() != 10 || len(snap.GetData()) != 1<<16 {
		t.Fatalf("Snapshot at %d (%d bytes, %v), want the last, at 10", snap.GetMetadata().GetIndex(), len(snap.GetData()), err)
	}
	if last, _ := s.LastIndex(); last != 200 {
		t.Fatalf("LastIndex %d, want 200", last)
	}
}

// heldFS holds the creation of the first temporary snapshot file until
// release is closed: a snapshot whose file takes long to write.
type heldFS struct {
	vfs.FS
	held             atomic.Bool
	started, release chan struct{}
}

func (h *heldFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if strings.HasSuffix(name, ".tmp") && h.held.CompareAndSwap(false, true) {
		close(h.started)
		<-h.release
	}
	return h.FS.Create(name, c)
}

// TestLeaderSnapshotDuringABackgroundOne: a snapshot from the leader
// (through Save, on the replica's loop) does not wait for the replica's
// own snapshot being written in the background; the own one, overtaken,
// is refused as out of date when its write ends and leaves no file.
func TestLeaderSnapshotDuringABackgroundOne(t *testing.T) {
	h := &heldFS{FS: vfs.NewMem(), started: make(chan struct{}), release: make(chan struct{})}
	s := snapStore(t, h, 10)
	defer s.Close()
	own := make(chan error, 1)
	go func() {
		_, err := s.CreateSnapshot(5, nil, []byte("own@5"))
		own <- err
	}()
	<-h.started
	leader := &raftpb.Snapshot{Data: []byte("leader@30"), Metadata: &raftpb.SnapshotMetadata{
		Index: proto.Uint64(30), Term: proto.Uint64(2), ConfState: &raftpb.ConfState{Voters: []uint64{1}}}}
	saved := make(chan error, 1)
	go func() { saved <- s.Save(nil, nil, leader, nil) }()
	select {
	case err := <-saved:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Save of the leader's snapshot waited for the replica's own snapshot's write")
	}
	close(h.release)
	if err := <-own; !errors.Is(err, raft.ErrSnapOutOfDate) {
		t.Fatalf("the overtaken snapshot: %v, want ErrSnapOutOfDate", err)
	}
	if got := snapFiles(t, h); !slices.Equal(got, []string{snapFileName(2, 30)}) {
		t.Fatalf("snapshot files %v, want the leader's only", got)
	}
	if snap, err := s.Snapshot(); err != nil || string(snap.GetData()) != "leader@30" {
		t.Fatalf("Snapshot = %v, %v; want the leader's", snap, err)
	}
}

// TestSnapshotRecordSyncedWithoutFsync: with Options.NoSync a crash may
// lose writes, but not leave a snapshot record naming a file already
// removed: the record is synced before the file it replaces goes.
func TestSnapshotRecordSyncedWithoutFsync(t *testing.T) {
	fs := vfs.NewCrashableMem()
	opts := memOptions(fs)
	opts.NoSync = true
	s := mustOpen(t, opts)
	var ents []*raftpb.Entry
	for i := uint64(1); i <= 10; i++ {
		ents = append(ents, ent(i, 1, "e"))
	}
	if err := s.Save(nil, ents, nil, nil); err != nil {
		t.Fatal(err)
	}
	for i := uint64(3); i <= 9; i += 3 {
		if _, err := s.CreateSnapshot(i, &raftpb.ConfState{Voters: []uint64{1}}, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	s.Close()
	opts.FS = crashed
	r := mustOpen(t, opts)
	defer r.Close()
	if snap, err := r.Snapshot(); err != nil || snap.GetMetadata().GetIndex() != 9 || !bytes.Equal(snap.GetData(), []byte{9}) {
		t.Fatalf("after a crash: Snapshot = %v, %v; want the last, at 9", snap, err)
	}
}

// TestAsyncSnapshotReads: with AsyncSnapshotReads, Snapshot (what raft
// calls on its owner's loop to send a snapshot) never reads a file: it
// answers raft.ErrSnapshotTemporarilyUnavailable while a goroutine reads
// it, then the snapshot read, until a newer snapshot replaces it (then the
// newer one is read the same way). ReadSnapshot reads at once; a damaged
// file is reported by ReadSnapshot and, at Snapshot, by the log and by no
// snapshot ever being returned.
func TestAsyncSnapshotReads(t *testing.T) {
	fs := vfs.NewMem()
	opts := memOptions(fs)
	opts.AsyncSnapshotReads = true
	s := mustOpen(t, opts)
	defer s.Close()
	var ents []*raftpb.Entry
	for i := uint64(1); i <= 10; i++ {
		ents = append(ents, ent(i, 1, "e"))
	}
	if err := s.Save(nil, ents, nil, nil); err != nil {
		t.Fatal(err)
	}
	if snap, err := s.Snapshot(); err != nil || !raft.IsEmptySnap(snap) {
		t.Fatalf("Snapshot before any = %v, %v; want the empty one", snap, err)
	}
	// waitFor calls Snapshot until it returns a snapshot at index.
	waitFor := func(index uint64, data []byte) {
		t.Helper()
		first := true
		deadline := time.Now().Add(10 * time.Second)
		for {
			snap, err := s.Snapshot()
			if errors.Is(err, raft.ErrSnapshotTemporarilyUnavailable) {
				first = false
				if time.Now().After(deadline) {
					t.Fatalf("snapshot %d still unavailable after 10 s", index)
				}
				time.Sleep(time.Millisecond)
				continue
			}
			if err != nil || snap.GetMetadata().GetIndex() != index || !bytes.Equal(snap.GetData(), data) {
				t.Fatalf("Snapshot = index %d, %d bytes, %v; want index %d, %d bytes", snap.GetMetadata().GetIndex(), len(snap.GetData()), err, index, len(data))
			}
			if first {
				t.Fatalf("Snapshot returned snapshot %d at once; want it read in the background first", index)
			}
			return
		}
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 3*snapBytesPerSync/16+5)
	if _, err := s.CreateSnapshot(4, &raftpb.ConfState{Voters: []uint64{1}}, big); err != nil {
		t.Fatal(err)
	}
	if snap, err := s.ReadSnapshot(); err != nil || snap.GetMetadata().GetIndex() != 4 || !bytes.Equal(snap.GetData(), big) {
		t.Fatalf("ReadSnapshot = index %d, %v; want index 4 with its data", snap.GetMetadata().GetIndex(), err)
	}
	waitFor(4, big)
	if snap, err := s.Snapshot(); err != nil || snap.GetMetadata().GetIndex() != 4 {
		t.Fatalf("Snapshot once read = %v, %v; want snapshot 4 again", snap.GetMetadata(), err)
	}
	// A newer snapshot replaces the one read.
	if _, err := s.CreateSnapshot(8, &raftpb.ConfState{Voters: []uint64{1}}, []byte("newer")); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	kept := s.send.snap != nil
	s.mu.Unlock()
	if kept {
		t.Fatal("the snapshot read for sending is kept after a newer one was stored")
	}
	waitFor(8, []byte("newer"))
	// A damaged file.
	if _, err := s.CreateSnapshot(9, &raftpb.ConfState{Voters: []uint64{1}}, []byte("damaged")); err != nil {
		t.Fatal(err)
	}
	f, err := fs.OpenReadWrite(fs.PathJoin("db", snapDir, snapFileName(1, 9)), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xff}, 2); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := s.ReadSnapshot(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("ReadSnapshot of a damaged file: %v, want ErrCorrupt", err)
	}
	for range 50 {
		if snap, err := s.Snapshot(); !errors.Is(err, raft.ErrSnapshotTemporarilyUnavailable) {
			t.Fatalf("Snapshot of a damaged file = %v, %v; want it never available", snap.GetMetadata(), err)
		}
		time.Sleep(time.Millisecond)
	}
}
