package storage

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Options configures a Store. EnsureDefaults fills the zero fields; Validate
// rejects what cannot work.
type Options struct {
	// Dir is the data directory; it is created if missing. Required.
	Dir string
	// FS is the filesystem Pebble writes through. Default vfs.Default; tests
	// use vfs.NewCrashableMem and errorfs.
	FS vfs.FS
	// NoSync skips the fsync of every write. For tests and benchmarks only:
	// with NoSync a crash may lose writes whose call returned nil.
	NoSync bool
	// AsyncSnapshotReads makes Snapshot, which raft calls on its owner's
	// loop to send a follower that fell behind the log a snapshot, read the
	// snapshot's file on a goroutine of its own: until it is read Snapshot
	// answers raft.ErrSnapshotTemporarilyUnavailable (raft asks again at
	// the next heartbeat response), then the snapshot read, kept until a
	// newer one is stored or for a minute after raft last asked. Without
	// it a leader read a snapshot of a 256 MiB state (and decoded it) on
	// its loop, sent no heartbeat for over a second, and was deposed; the
	// next leader did the same. ReadSnapshot always reads synchronously.
	// Off by default: the simulation stays deterministic.
	AsyncSnapshotReads bool
	// Logger receives Pebble's log and the Store's own. Default slog.Default.
	Logger *slog.Logger
	// TailCacheEntries and TailCacheBytes bound the in-memory copy of the
	// end of the log (entries are counted by their encoded size). Defaults
	// 1024 entries and 4 MiB; a negative value disables the cache.
	TailCacheEntries int
	TailCacheBytes   int
	// CacheSize is Pebble's block cache in bytes. Default 8 MiB.
	CacheSize int64
	// MemTableSize is the steady-state size of Pebble's memtable in bytes
	// (it starts at 256 KiB and doubles while writes fill it). Default
	// 32 MiB, where Pebble's own is 4 MiB: most log entries and persisted
	// operations are deleted (log truncation after a snapshot, operations
	// once replicated) before a larger memtable is flushed, so they are
	// never written to tables and compacted.
	MemTableSize uint64
	// WALPreallocBytes is the size every write-ahead log file is given
	// before Pebble writes it, so that synced writes overwrite allocated
	// space instead of appending (see preallocFS). Default MemTableSize
	// (a log holds about one memtable's writes); negative: none.
	WALPreallocBytes int64
	// PlainWALSync makes the write-ahead log's fdatasync an ordinary
	// system call, which releases the goroutine's P while it runs. By
	// default, with GOMAXPROCS of at least 2, it is a raw one (walFile).
	PlainWALSync bool
}

// EnsureDefaults fills zero fields with their defaults.
func (o *Options) EnsureDefaults() {
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.TailCacheEntries == 0 {
		o.TailCacheEntries = 1024
	}
	if o.TailCacheBytes == 0 {
		o.TailCacheBytes = 4 << 20
	}
	if o.CacheSize == 0 {
		o.CacheSize = 8 << 20
	}
	if o.MemTableSize == 0 {
		o.MemTableSize = 32 << 20
	}
	if o.WALPreallocBytes == 0 {
		o.WALPreallocBytes = int64(o.MemTableSize)
	}
}

// Validate reports options that cannot work. Call it after EnsureDefaults.
func (o Options) Validate() error {
	var errs []error
	if o.Dir == "" {
		errs = append(errs, errors.New("Dir is required"))
	}
	if o.FS == nil {
		errs = append(errs, errors.New("FS is required"))
	}
	if o.Logger == nil {
		errs = append(errs, errors.New("Logger is required"))
	}
	if o.CacheSize < 0 {
		errs = append(errs, fmt.Errorf("CacheSize %d is negative", o.CacheSize))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("storage: options: %w", err)
	}
	return nil
}

// cacheLimits returns the tail cache bounds, zero when disabled.
func (o Options) cacheLimits() (entries, bytes int) {
	if o.TailCacheEntries < 0 || o.TailCacheBytes < 0 {
		return 0, 0
	}
	return o.TailCacheEntries, o.TailCacheBytes
}
