// Package state is the replicated state machine of a Correctables replica:
// a key-value store with queues, its deterministic operations, and the undo
// records that let a replica revoke tentatively executed operations.
//
// # Operations
//
// An Op is a deterministic function over a State (Creek §4.2: every replica
// that executes the same operations in the same order computes the same
// results and the same state). The built-in kinds are get, put, delete,
// compare-and-set, increment, append, scan by prefix, enqueue and dequeue on
// named queues, a guarded multi-key transaction, and a no-op. Result documents
// what each returns. Every input is bounded by Limits; an op that is invalid,
// or that fails on the current state (increment of a non-integer, overflow,
// an append that grows too large), yields a Result whose Err is a Code and
// changes nothing.
//
// Queues are a namespace of their own, separate from plain keys. A dequeue
// reads and removes only the head (O(1), the constant-size read of the
// ticket queue in Correctables §4.3); items carry sequence numbers that count
// every item ever enqueued, so a client can tell from one result how far
// along the queue is.
//
// # Rollback and multiversioning
//
// Creek executes weak operations (and strong ones, tentatively) at once, in
// the order committed·tentative, and when a newly delivered operation or a
// commit changes that order it rolls back the suffix that is out of place and
// re-executes it in the new order. Algorithm 2 (StateObject) realises this
// with an undo log: while an operation executes, the first write of each
// register saves the register's previous value in an undoMap; rollback writes
// those values back.
//
// Apply returns exactly that undoMap as an Undo record: the previous entries
// of the keys the op wrote (including whether they existed), or the queue
// item it moved. The replication core keeps the Undo of each tentatively
// executed op on a stack parallel to its executed list; to move op x earlier
// it Reverts the ops after x's new position that conflict with x (and what
// conflicts with those, above them), latest first, applies x, and re-applies
// the reverted ops; the ops that commute with all of them stay applied. Apply and Revert cost O(size of the op) (plus
// O(log n) B-tree steps per key, amortized O(1) per queue step), never O(size
// of the state), so the cost of a reordering is proportional to the ops
// re-executed. Undo records of committed ops are simply dropped: a state is
// the committed state plus the tentative suffix still on the stack, which is
// Creek's truncation of the undo log to the tentative list.
//
// Creek §4.4 goes further with a multiversion store, where each version is
// tagged with the position of the op that wrote it, so that re-ordering
// re-executes only ops whose reads changed. Undo records are that version
// history in another form: the stack of Undos, read from the top, is the list
// of superseded versions of every key, each tagged by the op (stack position)
// that overwrote it, and a Revert is the "mark the versions created by op as
// invalid" step. Which ops need re-execution is decided by the core from the
// ops' key sets; this package supplies the mechanism to roll back precisely
// and cheaply. Revert checks that no later write to the same key or queue is
// still applied (the key holds what the reverted write left; the queue ends
// or begins where it did) and panics otherwise, since such a revert would
// silently corrupt the state.
//
// # Snapshots and encodings
//
// MarshalBinary/UnmarshalBinary give canonical snapshots for raft snapshots
// and persistence; Hash is an order-independent content hash, maintained
// incrementally, that replicas (and tests) compare to detect divergence.
// Values are immutable once stored: a Result, an Undo or a Clone may hold
// them. An append still costs what it appends, not the value's size: the
// value it makes carries the streaming xxhash digest of its bytes, and it
// is extended in place when nothing was ever written past its end (a mark
// shared by the values on one backing array), else copied.
// EncodeOp/DecodeOp and EncodeResult/DecodeResult are the compact canonical
// wire and log encodings; decoders never panic and reject any malformed or
// non-canonical input.
//
// A State is not safe for concurrent use; the replica serialises access.
package state
