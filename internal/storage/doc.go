// Package storage is a replica's durable storage on Pebble: the raft log, the
// raft hard state, the latest snapshot of the application state, and the
// replica's own operations that are not yet known to be replicated
// (docs/design.md, "Durability and restart": persist before replying).
//
// A Store implements raft.Storage with the behaviour and error contract of
// raft.MemoryStorage (ErrCompacted, ErrUnavailable, the dummy entry at the
// compaction point), so a replica can run on either. The driver persists
// every Ready with one call to Save, which commits the hard state, the new
// entries (truncating a conflicting suffix), an incoming snapshot and the
// replica's own new operations in one atomic, fsynced Pebble batch; when Save
// returns nil, all of it survives a crash, and when it returns an error the
// Store is failed (see below).
//
// # Key layout
//
// Every key starts with a one-byte prefix; integers are big-endian so that
// Pebble's byte order is numeric order.
//
//	"v"                 format version (8 bytes, currently 2; 1, whose
//	                    snapshots were inline in "s", is still read)
//	"h"                 raft HardState (protobuf)
//	"t"                 truncated state: index and term (8+8 bytes) of the
//	                    last entry dropped from the log, the "dummy entry";
//	                    FirstIndex is its index + 1
//	"s"                 latest snapshot's metadata (protobuf
//	                    raftpb.Snapshot without Data; with Data, opaque
//	                    application state, in format 1)
//	"f"                 the name of the latest snapshot's file in snap/
//	"l" + index (8)     log entry (protobuf raftpb.Entry), for
//	                    index in [FirstIndex, LastIndex]
//	"o" + seq (8)       one of the replica's own operations (replica.AppendReq),
//	                    keyed by its sequence number at this replica
//	"r"                 present once the replica was removed from the
//	                    cluster: why (text); such a replica does not start
//	                    again (MarkRemoved)
//
// A snapshot's data, the whole application state, is a file of its own,
// snap/TERM-INDEX.snap, written and fsynced (with its directory) before the
// record that names it commits, so that writing it holds up none of the
// replica's small writes (snapfile.go); CreateSnapshot may run on another
// goroutine while Save goes on.
//
// # Caches
//
// The hard state, the truncated state, the last index and the snapshot
// metadata live in memory and are updated only after a batch commits, so
// LastIndex, FirstIndex and InitialState never touch Pebble. A bounded tail
// of the log (Options.TailCacheEntries, TailCacheBytes) is also kept in
// memory: raft mostly asks for Term and Entries near the end of the log.
//
// # Errors and durability
//
// Save, CreateSnapshot, Compact and TruncateOwn validate their arguments
// before they write: a bad argument returns an error and changes nothing. A
// failed Pebble write (an I/O error, a failed fsync) is different: Pebble
// may have applied the batch in memory without making it durable, so the
// Store cannot know what is on disk. It then fails stop: that call and every
// later call return an error wrapping ErrFailed, and the owner must Close the
// Store and Open it again, which recovers exactly what is durable. Raft
// treats a Storage error as fatal too, so the replica stops with the Store.
package storage
