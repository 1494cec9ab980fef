package storage

import (
	"github.com/cockroachdb/pebble/v2/vfs"
)

// walCategory is the category Pebble creates its write-ahead log files
// with (vfs.DiskWriteCategory).
const walCategory vfs.DiskWriteCategory = "pebble-wal"

// preallocFS gives every write-ahead log file Pebble creates or recycles a
// size of at least size bytes before Pebble writes it (fallocate without
// FALLOC_FL_KEEP_SIZE, as etcd does for its WAL segments), so that each
// synced write overwrites allocated space within the file's size.
//
// Why: every Save is a synced write to the WAL. Appending to a file
// changes its size, and an fdatasync that follows a size change must also
// write the inode, a second write the sync waits for; within the size it
// writes the data only. On the machines of docs/benchmarks.md a 700-byte
// write and fdatasync took 290 µs appending (270 µs into space Pebble
// preallocates with FALLOC_FL_KEEP_SIZE) and 185 µs within the size, with
// a third less of the kernel's CPU. Pebble's own remedy, recycling log
// files, applies only once a memtable has been flushed, and a recycled
// file is as large as its last log was: a new store's logs start at 256
// KiB and double with the memtable, so they grow by appending for the
// first tens of MiB of writes.
//
// Recovery reads the zeros after the last record as the end of the log:
// Pebble tolerates a zeroed tail in the last log (it is what its own
// preallocation and recycled files leave), and a log it closed ends in an
// EOF trailer before the zeros. A file system without fallocate, or a file
// without a descriptor (the in-memory file systems of the tests), is left
// as Pebble made it.
type preallocFS struct {
	vfs.FS
	size int64
	// plainSync: see Options.PlainWALSync and walFile.
	plainSync bool
}

// Create implements vfs.FS. A log file's syncs are raw system calls
// (walFile).
func (p preallocFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := p.FS.Create(name, category)
	if err == nil && category == walCategory {
		p.extend(f)
		f = wrapWAL(p.FS, f, p.plainSync)
	}
	return f, err
}

// ReuseForWrite implements vfs.FS: a recycled log smaller than size (one of
// a small memtable's) is extended too.
func (p preallocFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := p.FS.ReuseForWrite(oldname, newname, category)
	if err == nil && category == walCategory {
		p.extend(f)
		f = wrapWAL(p.FS, f, p.plainSync)
	}
	return f, err
}

// extend sets f's size to at least p.size, allocating the space. Failure
// is not an error: the log is then written as without preallocFS.
func (p preallocFS) extend(f vfs.File) {
	if p.size <= 0 {
		return
	}
	fd := f.Fd()
	if fd == vfs.InvalidFd {
		return
	}
	fallocate(fd, p.size)
}
