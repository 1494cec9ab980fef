// Package consensus is the ordering layer under the replication core: an
// etcd raft RawNode (go.etcd.io/raft/v3) with a deterministic election
// timer. It owns what raft gives: a total order of log entries, the leader,
// linearizable read points (ReadIndex), leadership transfer, and
// configuration. It does not know what an entry means.
//
// Conditional atomic broadcast (CAB, Creek §3.3) is built on it by the
// replication core (internal/replica: cab.go proposes, commit.go delivers).
// CAB delivers a message in the agreed order only once a condition holds: in
// Creek, that the replica holds the strong operation and its whole causal
// context (checkDep, Algorithm 1). The core makes the condition true by
// construction: it puts the operation and every not-yet-committed operation
// of its causal context into the log entry itself, so every replica that
// reads an entry holds all it needs to deliver it, and nothing waits for an
// origin that crashed after proposing. Keeping that in the core, next to
// the version vectors it depends on, leaves this package a thin,
// separately tested layer over raft.
//
// The Node is deterministic: raft's own election timer draws from
// crypto/rand, so Node disables it (a very large raft ElectionTick) and runs
// its own randomised election timer from an injected *rand.Rand. Because
// raft's own timeouts never fire, the Node also abandons a leadership
// transfer that has not completed within an election timeout (raft would
// otherwise wait for ever and drop proposals meanwhile). Campaigns go
// through raft's PreVote, so a partitioned replica that keeps campaigning
// does not disrupt the majority when the partition heals. Like RawNode, Node
// does no IO: the caller feeds ticks and messages and drains Ready.
package consensus
