package storage

import (
	"runtime"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// walFile is a write-ahead log file whose SyncData, the fdatasync that
// every synced write waits for, is made as a raw system call: the
// goroutine keeps its P (the scheduler's processor) for the call's length
// instead of releasing it on entry and taking one back on return.
//
// Why: a replica under load syncs its log a few hundred times a second,
// each sync taking 0.2-4 ms. An ordinary system call that lasts past
// sysmon's next look (20 µs) gets its P taken and handed to another
// thread (a thread wake-up), takes a P back on return (often by parking
// and being woken again), and puts sysmon back to polling every 20 µs for
// the next millisecond or more. On the virtual machines of
// docs/benchmarks.md a context switch or a timer costs about 10 µs, and
// under 256 outstanding weak puts half of a replica's context switches
// were sysmon's sleeps (perf sched_switch: 12,329 of about 25,000 in 8 s);
// with the log's syncs raw, a replica's nanosleeps fell from 12,073 to
// 7,360 and its context switches from 27,369 to 18,410 per 5 s, and the
// cluster took 5-8% more weak puts (docs/benchmarks/load.md).
//
// The cost: while the sync runs its P runs nothing else, and a
// stop-the-world phase of the garbage collector waits for the sync to
// return (a sync cannot be preempted). So this is done only with at least
// two Ps (GOMAXPROCS when the log file is made; with one, a sync would
// stop every goroutine of the process for its length), only for files of
// the operating system's own file system (vfs.Default: the call is the
// one its SyncData makes; a wrapper such as errorfs, or the in-memory file
// systems of the tests and the simulation, keep their own), and
// Options.PlainWALSync turns it off.
type walFile struct {
	vfs.File
	fd uintptr
}

// SyncData implements vfs.File.
func (f walFile) SyncData() error { return rawFdatasync(f.fd) }

// wrapWAL returns f, a file of fs, as a walFile when raw syncs apply to
// it.
func wrapWAL(fs vfs.FS, f vfs.File, plain bool) vfs.File {
	if plain || !rawSyncSupported || fs != vfs.Default || runtime.GOMAXPROCS(0) < 2 {
		return f
	}
	fd := f.Fd()
	if fd == vfs.InvalidFd {
		return f
	}
	return walFile{File: f, fd: fd}
}
