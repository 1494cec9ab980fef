// Package sim runs whole clusters of replicas (internal/replica) and their
// clients in one deterministic, seeded simulation, in the manner of
// FoundationDB's and TigerBeetle's simulators: a virtual clock, a simulated
// network with per-link delays, drops, duplicates and reordering,
// partitions, crashes that lose everything not persisted, restarts, and
// skewed clocks. Everything random is drawn from one seed, so a failing run
// is replayed exactly by its seed.
//
// A run records every client operation and view with internal/history and
// checks at the end: linearizability of strong results and strong reads
// (porcupine), fluctuating eventual consistency of weak views, durability of
// acknowledged writes across crashes, one final view per operation, and
// convergence of all replicas after the faults heal.
package sim
