// Package consensus is the ordering layer under the replication core: it
// wraps an etcd raft RawNode (go.etcd.io/raft/v3) and turns it into the
// conditional atomic broadcast (CAB) of Creek §3.3.
//
// CAB delivers a message in the agreed order only once a condition holds: in
// Creek the condition is that the replica holds the strong operation and its
// whole causal context (checkDep, Algorithm 1 line 10). This layer makes the
// condition true by construction: the replication core puts the operation and
// every not-yet-committed operation of its causal context into the log entry
// itself, so every replica that reads an entry holds all it needs to deliver
// it. That closes the hazard of an origin that crashes after proposing while
// part of the causal context exists only there: nothing waits for that
// origin.
//
// The Node is deterministic: raft's own election timer draws from crypto/rand,
// so Node disables it (a very large raft ElectionTick) and runs its own
// randomised election timer from an injected *rand.Rand. Campaigns go through
// raft's PreVote, so a partitioned replica that keeps campaigning does not
// disrupt the majority when the partition heals. Like RawNode, Node does no
// IO: the caller feeds ticks and messages and drains Ready.
package consensus
