package storage

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Snapshot files. A snapshot holds the whole application state, which may be
// many times the size of anything else the Store writes; written through
// Pebble it went through the write-ahead log, a memtable, a flush and the
// compactions after it, and each of those held the replica's small writes
// up behind it. It is written instead to a file of its own in snapDir
// (named by its term and index), fsynced together with its directory
// before the small Pebble record that names it ("s" with the metadata only,
// "f" with the file name) commits; older files are removed after that
// commit, and at Open whatever the record does not name (a crash between
// the two) is removed. A file holds the marshalled raftpb.Snapshot followed
// by its CRC-32C (Castagnoli), which reading checks. Data directories
// written before snapshot files keep their snapshot in "s" (Data inline),
// which is still read.

// snapDir is the directory of snapshot files inside the data directory.
const snapDir = "snap"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func snapFileName(term, index uint64) string {
	return fmt.Sprintf("%016x-%016x.snap", term, index)
}

func (s *Store) snapPath(name string) string { return s.opts.FS.PathJoin(s.opts.Dir, snapDir, name) }

// writeSnapFile writes snap to its file, durably: the file through a
// temporary name, fsynced, renamed, and the directory fsynced. It returns
// the file's name.
//
// The snapshot is written as it is encoded, without an encoded copy: the
// data as field 1 of raftpb.Snapshot (tag, length, bytes) and then the
// metadata-only message, which proto decodes as one Snapshot. The file
// syncs its data every snapBytesPerSync bytes as it goes (sync_file_range,
// as Pebble syncs its tables): on ext4 a journal commit, which the
// replica's next WAL fsync waits for, writes back the dirty data of every
// file in it, so hundreds of MiB of a snapshot left dirty held a write of
// the replica up for as long.
func (s *Store) writeSnapFile(snap *raftpb.Snapshot) (string, error) {
	fs := s.opts.FS
	dir := fs.PathJoin(s.opts.Dir, snapDir) // made durable by Open (makeSnapDir)
	md := snap.GetMetadata()
	name := snapFileName(md.GetTerm(), md.GetIndex())
	tmp := fs.PathJoin(dir, fmt.Sprintf("%s.%d.tmp", name, s.tmpSeq.Add(1)))
	f, err := fs.Create(tmp, "")
	if err != nil {
		return "", fmt.Errorf("storage: snapshot file: %w", err)
	}
	f = vfs.NewSyncingFile(f, vfs.SyncingFileOptions{BytesPerSync: snapBytesPerSync})
	sum := uint32(0)
	// Written through a scratch chunk, not from the snapshot's own bytes:
	// the caller's snapshot stays as it was whatever the file does with
	// what it is given (Pebble's in-memory FS scrambles it in race builds,
	// to catch callers that reuse it).
	chunk := make([]byte, 0, snapBytesPerSync)
	write := func(b []byte) error {
		for len(b) > 0 {
			chunk = append(chunk[:0], b[:min(len(b), snapBytesPerSync)]...)
			sum = crc32.Update(sum, castagnoli, chunk)
			if _, err := f.Write(chunk); err != nil {
				return err
			}
			b = b[len(chunk):]
		}
		return nil
	}
	data := snap.GetData()
	head := protowire.AppendTag(nil, 1, protowire.BytesType)
	head = protowire.AppendVarint(head, uint64(len(data)))
	var werr error
	if data != nil { // absent stays absent (proto2 presence)
		werr = write(head)
		if werr == nil {
			werr = write(data)
		}
	}
	if werr == nil {
		werr = write(marshal(metaOnly(snap)))
	}
	if werr == nil {
		_, werr = f.Write(binary.BigEndian.AppendUint32(chunk[:0], sum))
	}
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = fs.Rename(tmp, fs.PathJoin(dir, name))
	}
	if werr == nil {
		werr = s.syncDir(dir)
	}
	if werr != nil {
		_ = fs.Remove(tmp)
		return "", fmt.Errorf("storage: snapshot file %s: %w", name, werr)
	}
	return name, nil
}

// snapBytesPerSync is how much of a snapshot file is written between two
// syncs of its data.
const snapBytesPerSync = 1 << 20

func (s *Store) syncDir(dir string) error {
	d, err := s.opts.FS.OpenDir(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// readSnapFile reads and checks the snapshot file name.
func (s *Store) readSnapFile(name string) (*raftpb.Snapshot, error) {
	f, err := s.opts.FS.Open(s.snapPath(name))
	if err != nil {
		return nil, fmt.Errorf("%w: snapshot file %s: %w", ErrCorrupt, name, err)
	}
	return readSnapFrom(f, name)
}

// readSnapFrom reads, checks and decodes the snapshot file f, named name,
// and closes it.
func readSnapFrom(f vfs.File, name string) (*raftpb.Snapshot, error) {
	defer f.Close()
	var b []byte
	fi, err := f.Stat()
	if err == nil && fi.Size() > 0 {
		b = make([]byte, fi.Size())
		_, err = io.ReadFull(f, b)
	} else {
		b, err = io.ReadAll(f)
	}
	if err != nil {
		return nil, fmt.Errorf("storage: read snapshot file %s: %w", name, err)
	}
	if len(b) < 4 {
		return nil, fmt.Errorf("%w: snapshot file %s of %d bytes", ErrCorrupt, name, len(b))
	}
	body, tail := b[:len(b)-4], b[len(b)-4:]
	want := binary.BigEndian.Uint32(tail)
	if got := crc32.Checksum(body, castagnoli); got != want {
		return nil, fmt.Errorf("%w: snapshot file %s: checksum %08x, recorded %08x", ErrCorrupt, name, got, want)
	}
	snap := new(raftpb.Snapshot)
	if err := proto.Unmarshal(body, snap); err != nil {
		return nil, fmt.Errorf("%w: snapshot file %s: %w", ErrCorrupt, name, err)
	}
	return raftpb.EnsureSnapshot(snap), nil
}

// removeOlderSnapFiles removes the snapshot files of snapDir whose index
// is below keep's: a newer one may be being written, for a record still
// to come, and temporary files are another writer's.
func (s *Store) removeOlderSnapFiles(keep string) {
	if _, keepIndex, ok := parseSnapFileName(keep); ok {
		s.removeSnapFilesIf(func(n string) bool {
			_, i, ok := parseSnapFileName(n)
			return ok && i < keepIndex
		})
	}
}

// removeSnapFiles removes every file of snapDir but keep (the one the
// record names; "" for none): at Open, where nothing else writes.
func (s *Store) removeSnapFiles(keep string) {
	s.removeSnapFilesIf(func(n string) bool {
		return n != keep && (strings.HasSuffix(n, ".snap") || strings.HasSuffix(n, ".tmp"))
	})
}

// removeSnapFilesIf removes the files of snapDir that drop names.
func (s *Store) removeSnapFilesIf(drop func(name string) bool) {
	fs := s.opts.FS
	dir := fs.PathJoin(s.opts.Dir, snapDir)
	names, err := fs.List(dir)
	if err != nil {
		return // no directory yet
	}
	for _, n := range names {
		if !drop(n) {
			continue
		}
		if err := fs.Remove(fs.PathJoin(dir, n)); err != nil {
			s.opts.Logger.Warn("storage: removing an old snapshot file", "file", n, "err", err)
		}
	}
}

// parseSnapFileName returns the term and index of a snapshot file's name.
func parseSnapFileName(name string) (term, index uint64, ok bool) {
	var t, i uint64
	if n, err := fmt.Sscanf(name, "%016x-%016x.snap", &t, &i); err != nil || n != 2 || snapFileName(t, i) != name {
		return 0, 0, false
	}
	return t, i, true
}

// metaOnly returns snap without its data: what the "s" record holds when
// the data is in a file.
func metaOnly(snap *raftpb.Snapshot) *raftpb.Snapshot {
	return &raftpb.Snapshot{Metadata: snap.GetMetadata()}
}

// makeSnapDir creates snapDir if it is missing, durably (the data
// directory is fsynced after).
func (s *Store) makeSnapDir() error {
	fs := s.opts.FS
	dir := fs.PathJoin(s.opts.Dir, snapDir)
	if _, err := fs.Stat(dir); err == nil {
		return nil
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("storage: snapshot directory: %w", err)
	}
	if err := s.syncDir(s.opts.Dir); err != nil {
		return fmt.Errorf("storage: snapshot directory: %w", err)
	}
	return nil
}

// snapForSend is the snapshot Snapshot reads in the background for raft
// to send (Options.AsyncSnapshotReads).
type snapForSend struct {
	snap    *raftpb.Snapshot // read, of file name; nil if none
	name    string
	used    time.Time // when raft last asked for it
	loading string    // the file being read, "" if none
	failed  time.Time // when the last read failed
}

// snapKeep is how long a snapshot read for sending is kept after raft last
// asked for it, and snapRetry how long after a failed read the next starts.
const (
	snapKeep  = time.Minute
	snapRetry = time.Second
)

// snapshotForSend returns the snapshot of the current file if it was read,
// and otherwise starts reading it on a goroutine of its own and returns
// raft.ErrSnapshotTemporarilyUnavailable. s.mu is held.
func (s *Store) snapshotForSend() (*raftpb.Snapshot, error) {
	now := time.Now()
	if s.send.snap != nil && s.send.name == s.snapFile {
		s.send.used = now
		return s.send.snap, nil
	}
	s.send.snap = nil // an older snapshot's
	if s.send.loading != "" || now.Sub(s.send.failed) < snapRetry {
		return nil, raft.ErrSnapshotTemporarilyUnavailable
	}
	name := s.snapFile
	// Opened under mu: the file is removed only under mu, once a newer
	// record has committed, and an open file stays readable.
	f, err := s.opts.FS.Open(s.snapPath(name))
	if err != nil {
		return nil, fmt.Errorf("%w: snapshot file %s: %w", ErrCorrupt, name, err)
	}
	s.send.loading = name
	go func() {
		start := time.Now()
		snap, err := readSnapFrom(f, name)
		s.mu.Lock()
		defer s.mu.Unlock()
		s.send.loading = ""
		if err != nil {
			s.send.failed = time.Now()
			s.opts.Logger.Error("storage: reading a snapshot to send", "file", name, "err", err)
			return
		}
		if name != s.snapFile {
			return // overtaken: raft's next ask reads the newer one
		}
		s.send.snap, s.send.name, s.send.used = snap, name, time.Now()
		s.opts.Logger.Info("storage: snapshot read for sending", "index", snap.GetMetadata().GetIndex(),
			"bytes", len(snap.GetData()), "took", time.Since(start).Round(time.Millisecond))
	}()
	return nil, raft.ErrSnapshotTemporarilyUnavailable
}

// dropStaleSend forgets a snapshot read for sending that a newer one
// replaced or that raft has not asked for in snapKeep. s.mu is held.
func (s *Store) dropStaleSend() {
	if s.send.snap != nil && (s.send.name != s.snapFile || time.Since(s.send.used) > snapKeep) {
		s.send.snap = nil
	}
}
