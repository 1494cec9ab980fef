// Package sim runs whole clusters of replicas (internal/replica) and their
// clients in one deterministic, seeded simulation, in the manner of
// FoundationDB's and TigerBeetle's simulators: a virtual clock, a simulated
// network with per-link delays, drops, duplicates and reordering,
// partitions, crashes, restarts, and skewed clocks. Everything random is
// drawn from one seed, so a failing run is replayed exactly by its seed.
//
// Each simulated replica runs the production IO path: internal/driver
// handles its Ready (persist, snapshot, send, deliver, advance), with the
// simulated network as Send and the simulated clients as Deliver (with
// Options.GroupCommit, inputs share Readies as in the server's loop), over
// internal/storage (Pebble, synced writes) on the node's own
// vfs.NewCrashableMem filesystem. A crash replaces that filesystem by a crash
// clone (a power loss keeps exactly what was synced, a process crash keeps
// everything written; the seed picks) and abandons the store; a restart
// opens a new store on the clone and recovers the replica from it. So a
// crash loses exactly what was not durable, and a bug in the driver's order
// or in storage recovery shows in the checks. Pebble's background goroutines
// do not change what a store returns, so runs stay deterministic
// (TestDeterministic).
//
// A run records every client operation and view with internal/history and
// checks at the end: linearizability of strong results and strong reads
// (porcupine), fluctuating eventual consistency of weak views, durability of
// acknowledged writes across crashes, one final view per operation,
// liveness (every operation pending when the faults heal gets its view
// within Options.Liveness of virtual time), and convergence of all replicas
// after the faults heal.
//
// With Faults.Members the cluster also changes its membership while the
// faults run (members.go): learners are added (new nodes that start empty
// and join) and promoted, members removed, and voters replaced through joint
// consensus. A node is drained before its removal, as member remove does
// (its drain marker, then its "drained" marker, then the change); a
// removed node stops for good once it applies its removal or a replica
// that applied it refuses its messages, as a server does. Only when a
// removal went ahead without a confirmed drain (the node was down or cut
// off for 10 s of virtual time) may a weak write it acknowledged only by
// its preliminary view and never sent anywhere be lost with it (the rule
// for a replica whose disk is lost); everything else is checked as in any
// run.
//
// TestSimulation runs fixed seeds and fresh ones (logged) over five fault
// mixes (seed mod 5); TestSimulationMembers runs the membership mix on a
// few seeds of its own; a failure prints its seed and the command that
// replays it. TestMutationAckBeforeSync shows that a driver acknowledging
// before its writes are durable fails the checks.
package sim
