// Package driver turns a replica's Ready into IO, once, for every runtime:
// the server (internal/server) and the deterministic simulation
// (internal/sim) both drive their replicas through it, over the same
// storage (internal/storage, on Pebble), so that what the simulation checks
// is the order of persisting, sending and delivering that production runs.
//
// The order is that of etcd raft's RawNode contract, extended with the
// replica's own operations and views: persist the hard state, the entries
// and the replica's own new operations in one synced batch; store a
// snapshot and compact the log if the replica asked for one; then send the
// messages; then deliver the views; then Advance. Nothing is acknowledged
// (no view leaves, no message about an operation is sent) before it is
// durable. The one exception is a leader's appends and heartbeats
// (Ready.Early), sent before its write as etcd does: raft counts the
// leader's own copy of an entry only once Advance says it is written. Those
// appends may carry the leader's own operations of the same Ready; a crash
// mid-write may leave them with followers only, and the replica's restart
// fence keeps it from issuing their ids again (internal/replica, fence.go).
//
// Group commit happens above the driver: the runtime feeds the replica
// every input that is queued (client submissions, peer messages, ticks), up
// to a bound, and then calls HandleReady once, so that one fsync covers
// every operation of the batch.
package driver
