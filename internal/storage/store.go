package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/correctables/correctables/internal/replica"
)

// Errors of the Store besides raft's (raft.ErrCompacted, raft.ErrUnavailable,
// raft.ErrSnapOutOfDate), which it returns as raft.MemoryStorage does.
var (
	// ErrClosed is returned by every method after Close.
	ErrClosed = errors.New("storage: closed")
	// ErrFailed wraps the cause of a failed write. Once a write failed,
	// every method returns it: Close the Store and Open it again.
	ErrFailed = errors.New("storage: failed after a write error; reopen to recover")
	// ErrCorrupt means the data on disk is not what this package writes.
	ErrCorrupt = errors.New("storage: corrupt data")
	// ErrFormat means the data directory has a layout version this code does
	// not know.
	ErrFormat = errors.New("storage: unknown format version")
	// ErrInvalid means an argument breaks the contract (a gap in the log, an
	// index past the end); nothing was written.
	ErrInvalid = errors.New("storage: invalid argument")
	// ErrLocked means Open found the directory's lock held: another
	// replica (in this process or another) has it open.
	ErrLocked = errors.New("storage: data directory in use")
)

// Store is a replica's durable storage. It implements raft.Storage. All
// methods are safe for concurrent use; each holds the Store's lock, so a
// reader waits for a Save in progress.
type Store struct {
	opts Options
	db   *pebble.DB
	wo   *pebble.WriteOptions

	// tmpSeq numbers the temporary files of snapshots being written: the
	// writers of snapshots (CreateSnapshot, Save with one) write their file
	// before they take mu, so two may write at once (the replica's own in
	// the background, a leader's through Save), and neither waits for the
	// other; which one's record stays is decided under mu.
	tmpSeq atomic.Uint64
	// version is the data directory's format version.
	version uint64

	mu sync.Mutex
	// err is sticky: ErrClosed after Close, ErrFailed after a failed write.
	err error
	// The caches below reflect exactly what committed.
	hs       *raftpb.HardState // nil until one was saved
	trunc    truncated
	last     uint64
	snapMeta *raftpb.SnapshotMetadata // never nil; Index 0 means no snapshot
	snapFile string                   // the snapshot's file; "" if none or inline (format 1)
	// tail holds the entries (tail[0].Index, last], contiguous, or nothing.
	// Entries returned from it are capped with a full slice expression and
	// an overwrite copies the slice, so callers never see it change.
	tail      []*raftpb.Entry
	tailBytes int
	// lastRead is the last read of Entries from Pebble that stopped at
	// maxSize (see Entries), or empty; any change to the log at or below
	// its end empties it.
	lastRead struct {
		lo, maxSize uint64
		ents        []*raftpb.Entry
	}
	// runs holds the terms of the log (trunc.Index, last] (terms.go).
	runs []termRun
	// send is the snapshot read for raft to send (AsyncSnapshotReads).
	send snapForSend
	// buf is Save's scratch for keys and encoded values: Pebble's Batch.Set
	// copies both, so one buffer serves every record of every Save.
	buf []byte
}

// maxScratch bounds the scratch buffer a Store keeps between Saves.
const maxScratch = 1 << 20

var _ raft.Storage = (*Store)(nil)

// Open opens the Store in opts.Dir, creating it if needed, and restores the
// hard state, log, snapshot and own operations that were saved.
func Open(opts Options) (*Store, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if err := opts.FS.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("storage: create %s: %w", opts.Dir, err)
	}
	var db *pebble.DB
	err := catchFatal(func() (err error) {
		db, err = pebble.Open(opts.Dir, &pebble.Options{
			FS:           preallocFS{FS: opts.FS, size: opts.WALPreallocBytes, plainSync: opts.PlainWALSync},
			Logger:       pebbleLogger{opts.Logger},
			CacheSize:    opts.CacheSize,
			MemTableSize: opts.MemTableSize,
		})
		return err
	})
	if err != nil {
		if lockHeld(err) {
			return nil, fmt.Errorf("%w: %s is in use by another running replica (its lock file %s is held, %v): stop that one first, or give another data directory",
				ErrLocked, opts.Dir, filepath.Join(opts.Dir, "LOCK"), err)
		}
		return nil, fmt.Errorf("storage: open %s: %w", opts.Dir, err)
	}
	s := &Store{opts: opts, db: db, wo: pebble.Sync}
	if opts.NoSync {
		s.wo = pebble.NoSync
	}
	if err := catchFatal(s.load); err != nil {
		_ = db.Close()
		return nil, err
	}
	opts.Logger.Debug("storage: opened", "dir", opts.Dir, "first", s.trunc.Index+1,
		"last", s.last, "snapshot", s.snapMeta.GetIndex())
	return s, nil
}

// lockHeld reports whether Pebble could not open a directory because its
// lock is held: by another process (flock: EAGAIN) or by another Store of
// this process.
func lockHeld(err error) bool {
	return errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK) ||
		strings.Contains(err.Error(), "lock held by current process")
}

// load fills the caches from Pebble; a fresh directory gets its version key.
func (s *Store) load() error {
	v, ok, err := s.get(keyVersion)
	switch {
	case err != nil:
		return err
	case !ok:
		if err := s.db.Set(keyVersion, binary.BigEndian.AppendUint64(nil, formatVersion), pebble.Sync); err != nil {
			return fmt.Errorf("storage: write format version: %w", err)
		}
		s.version = formatVersion
	case len(v) != 8:
		return fmt.Errorf("%w: version of %d bytes", ErrCorrupt, len(v))
	case binary.BigEndian.Uint64(v) != formatVersion && binary.BigEndian.Uint64(v) != formatVersionInline:
		return fmt.Errorf("%w: %d (this code reads %d and %d)", ErrFormat, binary.BigEndian.Uint64(v), formatVersionInline, formatVersion)
	default:
		s.version = binary.BigEndian.Uint64(v)
	}

	if v, ok, err := s.get(keyHardState); err != nil {
		return err
	} else if ok {
		s.hs = new(raftpb.HardState)
		if err := proto.Unmarshal(v, s.hs); err != nil {
			return fmt.Errorf("%w: hard state: %w", ErrCorrupt, err)
		}
	}
	if v, ok, err := s.get(keyTruncated); err != nil {
		return err
	} else if ok {
		if s.trunc, err = decodeTruncated(v); err != nil {
			return err
		}
	}
	s.snapMeta = raftpb.EnsureSnapshotMetadata(nil)
	if v, ok, err := s.get(keySnapshot); err != nil {
		return err
	} else if ok {
		snap := new(raftpb.Snapshot)
		if err := proto.Unmarshal(v, snap); err != nil {
			return fmt.Errorf("%w: snapshot: %w", ErrCorrupt, err)
		}
		s.snapMeta = raftpb.EnsureSnapshot(snap).GetMetadata()
	}
	if v, ok, err := s.get(keySnapFile); err != nil {
		return err
	} else if ok {
		s.snapFile = string(v)
	}
	if err := s.makeSnapDir(); err != nil {
		return err
	}
	s.removeSnapFiles(s.snapFile) // left by a crash before their record

	// The log is (trunc.Index, last]: check both ends.
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: logKey(0), UpperBound: logEnd()})
	if err != nil {
		return fmt.Errorf("storage: read log: %w", err)
	}
	defer it.Close()
	s.last = s.trunc.Index
	if it.Last() {
		if s.last, err = decodeIndexedKey(prefixLog, it.Key()); err != nil {
			return err
		}
		it.First()
		first, err := decodeIndexedKey(prefixLog, it.Key())
		if err != nil {
			return err
		}
		if first != s.trunc.Index+1 || s.last < first {
			return fmt.Errorf("%w: log [%d, %d] after truncated index %d", ErrCorrupt, first, s.last, s.trunc.Index)
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("storage: read log: %w", err)
	}
	return s.loadRuns()
}

// get returns a copy of the value at key.
func (s *Store) get(key []byte) ([]byte, bool, error) {
	v, closer, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("storage: get %q: %w", key, err)
	}
	defer closer.Close()
	return append([]byte(nil), v...), true, nil
}

// Close closes the Store. Later calls return ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if errors.Is(s.err, ErrClosed) {
		return ErrClosed
	}
	s.err = ErrClosed
	s.tail = nil
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("storage: close: %w", err)
	}
	return nil
}

// InitialState implements raft.Storage: the saved hard state (nil if none
// was saved) and the ConfState of the latest snapshot.
func (s *Store) InitialState() (*raftpb.HardState, *raftpb.ConfState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil, nil, s.err
	}
	var hs *raftpb.HardState
	if s.hs != nil {
		hs = proto.Clone(s.hs).(*raftpb.HardState)
	}
	return hs, s.confState(), nil
}

// ConfState returns the ConfState of the latest snapshot (empty if none).
func (s *Store) ConfState() (*raftpb.ConfState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil, s.err
	}
	return s.confState(), nil
}

func (s *Store) confState() *raftpb.ConfState {
	return raftpb.EnsureConfState(proto.Clone(s.snapMeta.GetConfState()).(*raftpb.ConfState))
}

// HardState returns the saved hard state, nil if none was saved.
func (s *Store) HardState() (*raftpb.HardState, error) {
	hs, _, err := s.InitialState()
	return hs, err
}

// FirstIndex implements raft.Storage.
func (s *Store) FirstIndex() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return 0, s.err
	}
	return s.trunc.Index + 1, nil
}

// LastIndex implements raft.Storage.
func (s *Store) LastIndex() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return 0, s.err
	}
	return s.last, nil
}

// Term implements raft.Storage: the term of entry i for i in
// [FirstIndex()-1, LastIndex()], ErrCompacted below and ErrUnavailable above.
func (s *Store) Term(i uint64) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return 0, s.err
	}
	return s.term(i)
}

func (s *Store) term(i uint64) (uint64, error) {
	switch {
	case i < s.trunc.Index:
		return 0, raft.ErrCompacted
	case i == s.trunc.Index:
		return s.trunc.Term, nil
	case i > s.last:
		return 0, raft.ErrUnavailable
	}
	if len(s.tail) > 0 && i >= s.tail[0].GetIndex() {
		return s.tail[i-s.tail[0].GetIndex()].GetTerm(), nil
	}
	if t, ok := s.runTerm(i); ok {
		return t, nil
	}
	return s.readTerm(i)
}

// Entries implements raft.Storage: the entries [lo, hi), at least one and
// then as many as fit in maxSize bytes (protobuf size). ErrCompacted if lo
// was compacted; ErrUnavailable if the log holds no entries. Where
// raft.MemoryStorage panics (hi past LastIndex()+1, lo > hi) it returns an
// error wrapping ErrInvalid and raft.ErrUnavailable.
func (s *Store) Entries(lo, hi, maxSize uint64) ([]*raftpb.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil, s.err
	}
	if lo <= s.trunc.Index {
		return nil, raft.ErrCompacted
	}
	if hi > s.last+1 || lo > hi {
		return nil, fmt.Errorf("%w: entries [%d, %d) out of bounds, last index %d: %w", ErrInvalid, lo, hi, s.last, raft.ErrUnavailable)
	}
	if s.last == s.trunc.Index {
		return nil, raft.ErrUnavailable
	}
	if lo == hi {
		return []*raftpb.Entry{}, nil
	}

	tailFirst := uint64(math.MaxUint64)
	if len(s.tail) > 0 {
		tailFirst = s.tail[0].GetIndex()
	}
	if lo >= tailFirst {
		ents := limitSize(s.tail[lo-tailFirst:hi-tailFirst], maxSize)
		return ents[:len(ents):len(ents)], nil
	}

	// raft's leader asks for the same entries again while it probes a
	// follower (each heartbeat reply makes it resend the append it waits
	// on; consensus.Node leaves the entries out of the repeat): a read that
	// stopped at maxSize is kept and answered again, not read and decoded
	// from Pebble once a heartbeat.
	if r := &s.lastRead; len(r.ents) > 0 && r.lo == lo && r.maxSize == maxSize && lo+uint64(len(r.ents)) < hi {
		return r.ents[:len(r.ents):len(r.ents)], nil
	}

	// Read [lo, min(hi, tailFirst)) from Pebble, then go on in the tail.
	var (
		ents []*raftpb.Entry
		size uint64
	)
	full := func(e *raftpb.Entry) bool {
		if maxSize == math.MaxUint64 {
			return false // raft's "no limit"; skip the sizing
		}
		size += uint64(proto.Size(e))
		return len(ents) > 0 && size > maxSize
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: logKey(lo), UpperBound: logKey(min(hi, tailFirst))})
	if err != nil {
		return nil, fmt.Errorf("storage: read log: %w", err)
	}
	next := lo
	for ok := it.First(); ok; ok = it.Next() {
		e := new(raftpb.Entry)
		if err := proto.Unmarshal(it.Value(), e); err != nil {
			it.Close()
			return nil, fmt.Errorf("%w: entry %d: %w", ErrCorrupt, next, err)
		}
		if e.GetIndex() != next {
			it.Close()
			return nil, fmt.Errorf("%w: entry %d found at index %d", ErrCorrupt, e.GetIndex(), next)
		}
		if full(e) {
			if err := it.Close(); err != nil {
				return nil, fmt.Errorf("storage: read log: %w", err)
			}
			s.lastRead.lo, s.lastRead.maxSize, s.lastRead.ents = lo, maxSize, ents
			return ents[:len(ents):len(ents)], nil
		}
		ents = append(ents, e)
		next++
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return nil, fmt.Errorf("storage: read log: %w", err)
	}
	if next != min(hi, tailFirst) {
		return nil, fmt.Errorf("%w: log ends at %d, want %d", ErrCorrupt, next, min(hi, tailFirst))
	}
	for ; next < hi; next++ {
		e := s.tail[next-tailFirst]
		if full(e) {
			break
		}
		ents = append(ents, e)
	}
	return ents, nil
}

// limitSize returns the longest prefix of ents of at most maxSize bytes, and
// at least one entry: raft's rule.
func limitSize(ents []*raftpb.Entry, maxSize uint64) []*raftpb.Entry {
	if len(ents) == 0 || maxSize == math.MaxUint64 {
		return ents
	}
	size := uint64(proto.Size(ents[0]))
	for n := 1; n < len(ents); n++ {
		size += uint64(proto.Size(ents[n]))
		if size > maxSize {
			return ents[:n]
		}
	}
	return ents
}

// Snapshot implements raft.Storage: the latest snapshot, or an empty one
// (with Options.AsyncSnapshotReads, raft.ErrSnapshotTemporarilyUnavailable
// until a snapshot kept in a file has been read in the background).
func (s *Store) Snapshot() (*raftpb.Snapshot, error) { return s.snapshot(s.opts.AsyncSnapshotReads) }

// ReadSnapshot returns the latest snapshot, read now (what a replica
// restores at start).
func (s *Store) ReadSnapshot() (*raftpb.Snapshot, error) { return s.snapshot(false) }

func (s *Store) snapshot(async bool) (*raftpb.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil, s.err
	}
	switch {
	case s.snapMeta.GetIndex() == 0:
		return raftpb.EnsureSnapshot(nil), nil
	case s.snapFile == "":
		return s.readInline()
	case async:
		return s.snapshotForSend()
	}
	// Read under mu: the file is removed only under mu, once a newer record
	// has committed.
	return s.readSnapFile(s.snapFile)
}

// readInline reads a snapshot kept inline in Pebble (format 1). s.mu is
// held.
func (s *Store) readInline() (*raftpb.Snapshot, error) {
	v, ok, err := s.get(keySnapshot)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: snapshot %d missing", ErrCorrupt, s.snapMeta.GetIndex())
	}
	snap := new(raftpb.Snapshot)
	if err := proto.Unmarshal(v, snap); err != nil {
		return nil, fmt.Errorf("%w: snapshot: %w", ErrCorrupt, err)
	}
	return raftpb.EnsureSnapshot(snap), nil
}

// Save persists one Ready in one atomic batch, fsynced unless
// Options.NoSync: the hard state (if non-nil and not empty), a snapshot (if
// non-nil and not empty: it replaces the whole log, like
// raft.MemoryStorage.ApplySnapshot), then the entries (like
// raft.MemoryStorage.Append: entries at or below the compaction point are
// skipped and a conflicting suffix of the log is dropped), and the replica's
// own new operations. When Save returns nil all of it is durable, except a
// hard state that changes only the commit index: like etcd's raft.MustSync,
// such a write is not fsynced on its own (it becomes durable with the next
// synced write; losing it on power loss only moves the commit index back to
// one raft learns again). A bad
// argument (an old snapshot, entries that leave a gap) returns an error and
// writes nothing; a failed write fails the Store (see ErrFailed).
func (s *Store) Save(hs *raftpb.HardState, ents []*raftpb.Entry, snap *raftpb.Snapshot, own []*replica.Req) error {
	snapName := ""
	if snap != nil && !raft.IsEmptySnap(snap) {
		if err := s.snapOutOfDate(snap.GetMetadata().GetIndex()); err != nil {
			return err
		}
		var err error
		if snapName, err = s.writeSnapFile(snap); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropStaleSend()
	recorded := false
	if snapName != "" {
		defer func() {
			if !recorded {
				s.dropSnapFile(snapName) // refused or failed: nothing names it
			}
		}()
	}
	if s.err != nil {
		return s.err
	}
	b := s.db.NewBatch()
	defer b.Close()

	trunc, last, snapMeta := s.trunc, s.last, s.snapMeta
	resetTail := false
	if snapName != "" {
		snap = raftpb.EnsureSnapshot(proto.Clone(snap).(*raftpb.Snapshot))
		idx := snap.GetMetadata().GetIndex()
		if cur := s.snapMeta.GetIndex(); cur != 0 && cur >= idx {
			return raft.ErrSnapOutOfDate
		}
		if err := s.setSnapRecord(b, snap, snapName); err != nil {
			return err
		}
		if err := b.DeleteRange(logKey(0), logEnd(), nil); err != nil {
			return err
		}
		trunc = truncated{Index: idx, Term: snap.GetMetadata().GetTerm()}
		if err := b.Set(keyTruncated, trunc.encode(), nil); err != nil {
			return err
		}
		last, snapMeta, resetTail = idx, snap.GetMetadata(), true
	}

	entBytes := 0 // encoded size of the entries written (proto.Size of each)
	if len(ents) > 0 {
		for k, e := range ents {
			if e.GetIndex() != ents[0].GetIndex()+uint64(k) {
				return fmt.Errorf("%w: entry %d at position %d after index %d", ErrInvalid, e.GetIndex(), k, ents[0].GetIndex())
			}
		}
		first := trunc.Index + 1
		if newLast := ents[0].GetIndex() + uint64(len(ents)) - 1; newLast < first {
			ents = nil // all compacted already
		} else {
			if first > ents[0].GetIndex() {
				ents = ents[first-ents[0].GetIndex():]
			}
			if e0 := ents[0].GetIndex(); e0 > last+1 {
				return fmt.Errorf("%w: missing log entry [last: %d, append at: %d]", ErrInvalid, last, e0)
			}
			for _, e := range ents {
				key, val := s.scratch(prefixLog, e.GetIndex(), e)
				if err := b.Set(key, val, nil); err != nil {
					return err
				}
				entBytes += len(val)
			}
			// Drop the conflicting suffix past the new end.
			if newLast < last {
				if err := deleteLog(b, newLast+1, last+1); err != nil {
					return err
				}
			}
			last = newLast
		}
	}

	var newHS *raftpb.HardState
	if hs != nil && !raft.IsEmptyHardState(hs) {
		newHS = proto.Clone(hs).(*raftpb.HardState)
		if err := b.Set(keyHardState, s.marshalScratch(newHS), nil); err != nil {
			return err
		}
	}
	for _, q := range own {
		if q == nil || q.ID.Seq == 0 {
			return fmt.Errorf("%w: own operation without a sequence number", ErrInvalid)
		}
		s.buf = replica.AppendReq(binary.BigEndian.AppendUint64(append(s.buf[:0], prefixOwn), q.ID.Seq), q)
		if err := b.Set(s.buf[:indexedKeyLen], s.buf[indexedKeyLen:], nil); err != nil {
			return err
		}
	}
	if b.Empty() {
		return nil
	}
	sync := len(ents) > 0 || len(own) > 0 || resetTail ||
		(newHS != nil && (s.hs == nil || newHS.GetTerm() != s.hs.GetTerm() || newHS.GetVote() != s.hs.GetVote()))
	if cap(s.buf) > maxScratch {
		s.buf = nil
	}
	wo := s.wo
	switch {
	case snapName != "":
		// A snapshot's record is synced even without fsyncs
		// (Options.NoSync): the file it replaces is removed once it has
		// committed (snapRecorded).
		wo = pebble.Sync
	case !sync:
		wo = pebble.NoSync
	}
	if err := s.commitWith(b, wo); err != nil {
		return err
	}

	// Committed: now the caches follow.
	if newHS != nil {
		s.hs = newHS
	}
	if r := &s.lastRead; len(r.ents) > 0 && (resetTail || (len(ents) > 0 && ents[0].GetIndex() < r.lo+uint64(len(r.ents)))) {
		r.ents = nil // overwritten, or replaced by a snapshot
	}
	if resetTail {
		s.tail, s.tailBytes, s.runs = nil, 0, nil
	}
	s.appendRuns(ents)
	s.trunc, s.last, s.snapMeta = trunc, last, snapMeta
	if snapName != "" {
		recorded = true
		s.snapRecorded(snapName)
	}
	s.appendTail(ents, entBytes)
	return nil
}

// snapOutOfDate returns raft.ErrSnapOutOfDate if a snapshot at index is
// not past the current one, and the Store's sticky error if it has one.
func (s *Store) snapOutOfDate(index uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	if cur := s.snapMeta.GetIndex(); cur != 0 && cur >= index {
		return raft.ErrSnapOutOfDate
	}
	return nil
}

// setSnapRecord puts in b the record of a snapshot whose file is name: its
// metadata and the file's name (and, in a data directory of format 1, the
// new format version).
func (s *Store) setSnapRecord(b *pebble.Batch, snap *raftpb.Snapshot, name string) error {
	if err := b.Set(keySnapshot, marshal(metaOnly(snap)), nil); err != nil {
		return err
	}
	if err := b.Set(keySnapFile, []byte(name), nil); err != nil {
		return err
	}
	if s.version != formatVersion {
		return b.Set(keyVersion, binary.BigEndian.AppendUint64(nil, formatVersion), nil)
	}
	return nil
}

// snapRecorded follows a committed snapshot record: the files of older
// snapshots go (not a newer one still being written). s.mu is held.
func (s *Store) snapRecorded(name string) {
	s.snapFile, s.version = name, formatVersion
	s.removeOlderSnapFiles(name)
	s.dropStaleSend()
}

// dropSnapFile removes the file of a snapshot whose record did not commit,
// unless the record names a file of that name (the same snapshot, written
// twice). s.mu is held.
func (s *Store) dropSnapFile(name string) {
	if name != s.snapFile {
		_ = s.opts.FS.Remove(s.snapPath(name))
	}
}

// scratch encodes the key of the record at index i under prefix and the
// message m into s.buf and returns both, valid until the next use of s.buf.
func (s *Store) scratch(prefix byte, i uint64, m proto.Message) (key, val []byte) {
	s.buf = binary.BigEndian.AppendUint64(append(s.buf[:0], prefix), i)
	s.buf = marshalAppend(s.buf, m)
	return s.buf[:indexedKeyLen], s.buf[indexedKeyLen:]
}

// marshalScratch encodes m into s.buf, valid until the next use of s.buf.
func (s *Store) marshalScratch(m proto.Message) []byte {
	s.buf = marshalAppend(s.buf[:0], m)
	return s.buf
}

// deleteLog deletes the log entries [from, to): point deletes for a few,
// one range deletion for many (range tombstones cost every later read).
func deleteLog(b *pebble.Batch, from, to uint64) error {
	if to-from > 64 {
		return b.DeleteRange(logKey(from), logKey(to), nil)
	}
	for i := from; i < to; i++ {
		if err := b.Delete(logKey(i), nil); err != nil {
			return err
		}
	}
	return nil
}

// appendTail puts the entries just written (contiguous, ending at s.last)
// into the tail cache and trims it to its bounds. size is their encoded
// size (the sum of proto.Size), known from writing them.
func (s *Store) appendTail(ents []*raftpb.Entry, size int) {
	maxEntries, maxBytes := s.opts.cacheLimits()
	if maxEntries == 0 || len(ents) == 0 {
		return
	}
	e0 := ents[0].GetIndex()
	keep := 0
	if len(s.tail) > 0 && e0 > s.tail[0].GetIndex() {
		keep = int(e0 - s.tail[0].GetIndex())
	}
	for _, e := range s.tail[keep:] {
		s.tailBytes -= proto.Size(e)
	}
	if keep == len(s.tail) {
		s.tail = append(s.tail, ents...)
	} else {
		// Overwrite: copy, since callers may hold slices of the old tail.
		s.tail = append(s.tail[:keep:keep], ents...)
	}
	s.tailBytes += size
	s.trimTail(maxEntries, maxBytes)
}

func (s *Store) trimTail(maxEntries, maxBytes int) {
	drop := 0
	for len(s.tail)-drop > maxEntries || (s.tailBytes > maxBytes && drop < len(s.tail)) {
		s.tailBytes -= proto.Size(s.tail[drop])
		drop++
	}
	if drop > 0 {
		s.tail = s.tail[drop:]
	}
	if len(s.tail) == 0 {
		s.tail, s.tailBytes = nil, 0
	}
}

// CreateSnapshot records a snapshot of the application state at index
// (data is opaque to the Store), with cs as its ConfState (nil keeps the
// previous one). Like raft.MemoryStorage.CreateSnapshot it returns
// raft.ErrSnapOutOfDate if index is not past the current snapshot; an index
// past LastIndex, or compacted away, is an error wrapping ErrInvalid.
// It does not compact the log: call Compact.
//
// The data goes to a file of its own (snapfile.go), written before the Store's
// lock is taken: the replica's Saves go on meanwhile, so CreateSnapshot may
// run on another goroutine than the replica's (the driver's background
// snapshots), and a snapshot from the leader (Save) does not wait for it
// either: whichever is recorded first with the higher index stays, and the
// other returns raft.ErrSnapOutOfDate and removes its file.
func (s *Store) CreateSnapshot(index uint64, cs *raftpb.ConfState, data []byte) (*raftpb.Snapshot, error) {
	snap, err := s.newSnapshot(index, cs, data)
	if err != nil {
		return nil, err
	}
	name, err := s.writeSnapFile(snap)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	recorded := false
	defer func() {
		if !recorded {
			s.dropSnapFile(name)
		}
	}()
	if s.err != nil {
		return nil, s.err
	}
	// Checked again: a snapshot from the leader (Save) may have been
	// recorded while the file was written, or the log compacted.
	if index <= s.snapMeta.GetIndex() {
		return nil, raft.ErrSnapOutOfDate
	}
	if index < s.trunc.Index {
		return nil, fmt.Errorf("%w: snapshot at %d behind the log's start %d", ErrInvalid, index, s.trunc.Index)
	}
	b := s.db.NewBatch()
	defer b.Close()
	if err := s.setSnapRecord(b, snap, name); err != nil {
		return nil, err
	}
	// Synced even without fsyncs (Options.NoSync): the file it replaces
	// is removed once it has committed.
	if err := s.commitWith(b, pebble.Sync); err != nil {
		return nil, err
	}
	recorded = true
	s.snapMeta = proto.Clone(snap.GetMetadata()).(*raftpb.SnapshotMetadata)
	s.snapRecorded(name)
	return snap, nil
}

// newSnapshot checks CreateSnapshot's arguments against the Store and
// returns the snapshot to write.
func (s *Store) newSnapshot(index uint64, cs *raftpb.ConfState, data []byte) (*raftpb.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil, s.err
	}
	if index <= s.snapMeta.GetIndex() {
		return nil, raft.ErrSnapOutOfDate
	}
	if index > s.last || index < s.trunc.Index {
		return nil, fmt.Errorf("%w: snapshot at %d outside log [%d, %d]", ErrInvalid, index, s.trunc.Index, s.last)
	}
	term, err := s.term(index)
	if err != nil {
		return nil, err
	}
	if cs == nil {
		cs = s.snapMeta.GetConfState()
	}
	return raftpb.EnsureSnapshot(&raftpb.Snapshot{
		Data: data,
		Metadata: &raftpb.SnapshotMetadata{
			Index:     proto.Uint64(index),
			Term:      proto.Uint64(term),
			ConfState: proto.Clone(cs).(*raftpb.ConfState),
		},
	}), nil
}

// Compact drops the log entries before index, keeping the term of the entry
// at index for raft's matching, like raft.MemoryStorage.Compact: it returns
// raft.ErrCompacted if index is at or before the compaction point, and an
// error wrapping ErrInvalid past LastIndex.
func (s *Store) Compact(index uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	if index <= s.trunc.Index {
		return raft.ErrCompacted
	}
	if index > s.last {
		return fmt.Errorf("%w: compact %d past last index %d", ErrInvalid, index, s.last)
	}
	term, err := s.term(index)
	if err != nil {
		return err
	}
	trunc := truncated{Index: index, Term: term}
	b := s.db.NewBatch()
	defer b.Close()
	if err := b.DeleteRange(logKey(s.trunc.Index+1), logKey(index+1), nil); err != nil {
		return err
	}
	if err := b.Set(keyTruncated, trunc.encode(), nil); err != nil {
		return err
	}
	if err := s.commit(b); err != nil {
		return err
	}
	s.trunc = trunc
	s.compactRuns(index)
	if s.lastRead.lo <= index {
		s.lastRead.ents = nil // never asked for again
	}
	drop := 0
	for drop < len(s.tail) && s.tail[drop].GetIndex() <= index {
		s.tailBytes -= proto.Size(s.tail[drop])
		drop++
	}
	s.tail = s.tail[drop:]
	return nil
}

// OwnOps returns the persisted own operations in sequence order.
func (s *Store) OwnOps() ([]*replica.Req, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil, s.err
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: ownKey(0), UpperBound: ownEnd()})
	if err != nil {
		return nil, fmt.Errorf("storage: read own operations: %w", err)
	}
	var ops []*replica.Req
	for ok := it.First(); ok; ok = it.Next() {
		seq, err := decodeIndexedKey(prefixOwn, it.Key())
		if err != nil {
			it.Close()
			return nil, err
		}
		q, rest, err := replica.DecodeReq(it.Value())
		if err == nil && (len(rest) != 0 || q.ID.Seq != seq) {
			err = fmt.Errorf("%d trailing bytes, sequence %d", len(rest), q.ID.Seq)
		}
		if err != nil {
			it.Close()
			return nil, fmt.Errorf("%w: own operation %d: %w", ErrCorrupt, seq, err)
		}
		ops = append(ops, q)
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return nil, fmt.Errorf("storage: read own operations: %w", err)
	}
	return ops, nil
}

// TruncateOwn drops the own operations with sequence numbers up to upTo,
// once they are known to be replicated.
func (s *Store) TruncateOwn(upTo uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	end := ownEnd()
	if upTo < math.MaxUint64 {
		end = ownKey(upTo + 1)
	}
	b := s.db.NewBatch()
	defer b.Close()
	if err := b.DeleteRange(ownKey(0), end, nil); err != nil {
		return err
	}
	return s.commit(b)
}

// Metrics returns Pebble's metrics, for monitoring.
func (s *Store) Metrics() (*pebble.Metrics, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil, s.err
	}
	return s.db.Metrics(), nil
}

// commit commits b and fails the Store if that does not succeed. Pebble
// reports a failed commit through Logger.Fatalf, which pebbleLogger turns
// into a panic that ends here.
func (s *Store) commit(b *pebble.Batch) error { return s.commitSync(b, true) }

// commitSync commits b, fsynced if sync (and the store syncs at all).
func (s *Store) commitSync(b *pebble.Batch, sync bool) error {
	wo := s.wo
	if !sync {
		wo = pebble.NoSync
	}
	return s.commitWith(b, wo)
}

// commitWith commits b with wo, and fails the Store if that does not
// succeed.
func (s *Store) commitWith(b *pebble.Batch, wo *pebble.WriteOptions) error {
	err := catchFatal(func() error { return b.Commit(wo) })
	if err != nil {
		s.err = fmt.Errorf("%w: %w", ErrFailed, err)
		s.tail, s.tailBytes, s.lastRead.ents = nil, 0, nil
		s.opts.Logger.Error("storage: write failed; the store refuses all calls until reopened", "err", err)
		return s.err
	}
	return nil
}

// catchFatal runs fn and turns a pebbleLogger.Fatalf panic into an error.
func catchFatal(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			fe, ok := r.(fatalError)
			if !ok {
				panic(r)
			}
			err = fe
		}
	}()
	return fn()
}

func marshal(m proto.Message) []byte { return marshalAppend(nil, m) }

// marshalAppend appends the encoding of m to b.
func marshalAppend(b []byte, m proto.Message) []byte {
	b, err := proto.MarshalOptions{Deterministic: true}.MarshalAppend(b, m)
	if err != nil {
		// Only a message with missing required fields fails; raftpb has none.
		panic(fmt.Sprintf("storage: marshal %T: %v", m, err))
	}
	return b
}

// fatalError is what pebbleLogger.Fatalf panics with.
type fatalError struct{ msg string }

func (e fatalError) Error() string { return e.msg }

// pebbleLogger routes Pebble's log to slog. Pebble calls Fatalf when it
// cannot go on (a failed WAL write or sync) and must not continue after it:
// instead of exiting the process, Fatalf panics, Store.commit recovers the
// panic on the writer's goroutine and fails the Store. On Pebble's
// background goroutines the panic ends the process, as Fatalf would.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug(fmt.Sprintf(format, args...), "component", "pebble")
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "component", "pebble")
}

func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error(msg, "component", "pebble", "fatal", true)
	panic(fatalError{msg})
}

var _ io.Closer = (*Store)(nil)
