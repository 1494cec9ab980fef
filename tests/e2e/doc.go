// Package e2e holds end-to-end tests that run the real `correctables serve`
// binary as three OS processes on loopback and drive them through the public
// client, recording every operation and view with internal/history and
// checking the records mechanically (docs/design.md, "Checking").
//
// The suites:
//
//   - TestCrashRecovery: a mixed load (strong puts, increments, appends and
//     reads; weak committed writes; weak reads) from several goroutines while
//     a follower and then the leader are killed with SIGKILL and restarted on
//     the same data directory. Once the cluster is quiet it checks the
//     Correctable contract (history.CheckFinalOnce), linearizability of every
//     final view with porcupine (history.CheckLinearizable; an operation cut
//     off by a kill is a pending write, not a failure), durability (every
//     acknowledged append is present exactly once, every acknowledged
//     increment is counted), that weak reads only return written values, and
//     that the replicas converged. The committed order is not exposed over
//     gRPC, so history.CheckDurable is not used: durability is checked
//     through final strong reads that the porcupine model must explain.
//   - TestPartitionHeal: peer traffic goes through netem proxies owned by the
//     test. A follower is cut off (Blackhole, both directions): it keeps
//     answering weak operations, its strong operations stay pending, and the
//     majority keeps committing. After Heal the isolated replica converges,
//     its weak writes reach the others, its pending strong operations
//     complete exactly once, and the one whose committed result differs from
//     its preliminary one carries its payload twice (no confirmation).
//   - TestConfirmationSavesBytes: a put whose final view equals its
//     preliminary one (a 64 KiB previous value) gets a payload-free
//     confirmation: the operation receives about one result's worth of
//     bytes, not two (Correctables §5.2; docs/design.md, "The wire").
//
// The servers are built once (without -race) into a temporary directory by
// TestMain. Every wait is bounded; processes are killed in t.Cleanup, and on
// failure the tail of each replica's log is printed. Latencies are never
// asserted. Set CORRECTABLES_E2E_KEEP=1 to keep the logs' directory, and
// CORRECTABLES_E2E_PROFILE=DIR to have every replica serve its debug
// listener and be profiled (5 s CPU profiles back to back, or execution
// traces with CORRECTABLES_E2E_PROFILE_TRACE=1) into DIR while the test
// runs: a slow loop round a replica logged is then traced to its cause.
package e2e
