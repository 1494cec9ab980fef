// Package server is the IO driver around the replication core: one event
// loop per replica owns an internal/replica.Replica and feeds it client
// requests, peer messages and ticks; after each input it persists what the
// Ready asks for (Storage.Save, synchronously), then sends the messages to
// peers and the views to the waiting clients, then advances the replica.
//
// Clients reach the replica over gRPC (api.Store): Invoke streams the views
// of one operation, the final one as a payload-free confirmation when it
// equals the preliminary one. Peers exchange raft and gossip messages over
// long-lived gRPC streams (api.Peer), one per ordered pair, with bounded
// queues that drop when full (raft retransmits, anti-entropy repairs).
//
// Errors become gRPC statuses in one table (errors.go). Limits: key, value
// and scan sizes (state.Limits), client requests in flight (MaxInflight),
// gRPC message size, peer queue length.
package server
