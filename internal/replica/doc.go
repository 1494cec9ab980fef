// Package replica is the replication core: Creek ("Creek: low-latency,
// mixed-consistency transactional replication scheme", §4, Algorithm 1)
// as a deterministic state machine in
// the style of etcd raft's RawNode.
//
// Inputs are client requests (Submit), peer messages (Step) and ticks
// (Tick); outputs come out of Ready: raft hard state and entries and this
// replica's own new operations to persist, then messages for peers and views
// for clients. The package starts no goroutines and does no IO; the clock (a
// hybrid logical clock over an injected physical clock) and randomness are
// injected, so a whole cluster runs in a seeded simulation (internal/sim).
//
// Every replica accepts operations. A weak operation executes at once on the
// replica's tentative state (the committed list followed by the tentative
// list ordered by timestamp and id) and is gossiped to all replicas, FIFO per
// origin, with anti-entropy repairing losses. A strong operation executes
// tentatively too (its preliminary view) and is ordered by conditional
// atomic broadcast (internal/consensus): its raft entry carries the
// operation and every not-yet-committed operation of its causal context, so
// that every replica can deliver it without waiting for anyone. On delivery
// the entry's operations move to the committed list in (timestamp, id)
// order; the replica rolls back the tentative operations that the new order
// displaces (undo records of internal/state), and re-executes them. The
// origin sends the stable result as the final view, marked Confirmed when it
// equals the tentative one. Weak operations become final the same way when
// an entry commits them; a periodic strong no-op commits them in quiet
// periods (Creek §4.4). Weak reads are answered locally and send nothing;
// strong reads go through raft's ReadIndex and read the committed state,
// once it holds every operation the replica had received when the read
// arrived (the read's causal context; its own weak ones are proposed at
// once).
//
// Every view carries a Stamp: the raft index applied, the committed list's
// length, the version vector of operations received and the stable time.
// The simulation's checkers rebuild, from a stamp, the serial order the view
// claims to have executed and verify its result (fluctuating eventual
// consistency, Creek §3.4).
//
// Durability: a replica's own operations appear in Ready.Persist and must be
// durable before any view or message about them leaves, so an acknowledged
// operation survives a crash; only a leader's early appends (Ready.Early)
// carry them while they are being written, and the restart fence
// (fence.go) keeps a replica that crashed then from issuing their ids
// again. Recovery (New) costs time linear in what it
// reads: the snapshot is restored, the log entries known committed (up to
// the durable commit index) are applied while nothing is tentative, and
// only then do the own operations that are still uncommitted come back as
// tentative (Config.OwnOps); pending strong operations are proposed again
// (duplicates are skipped at delivery).
//
// The files follow the protocol:
//
//	replica.go   configuration, state, recovery, stamps
//	submit.go    client requests: weak and strong operations, reads (invoke)
//	execute.go   the execution stack: adjustTentativeOrder, adjustExecution,
//	             rollbacks only where necessary (Creek §4.4)
//	gossip.go    reliable broadcast of operations, anti-entropy (Creek §3.2)
//	cab.go       the broadcast half of CAB: proposals with causal context,
//	             the periodic no-op, bounded entries (Creek §3.3, §4.4)
//	commit.go    the delivery half of CAB: what an entry commits, the new
//	             order, the stable views (Algorithm 1, commit)
//	fence.go     the restart fence: no operation id is issued twice
//	tick.go      logical time: heartbeats, anti-entropy, no-ops, retries
//	ready.go     Ready and Advance, the driver's side (internal/driver)
//	snapshot.go  snapshots and their restore
//	codec.go     encodings of entries, messages and persisted operations
//	member.go    membership: configuration changes, addresses, removed ids
//	drain.go     draining a replica before its removal, through the log
package replica
