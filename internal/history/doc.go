// Package history records what clients saw and checks it mechanically.
//
// A [Recorder] collects one [Record] per client operation: the operation,
// when it was invoked, and every [View] the client received (the preliminary
// tentative results and the final stable one), each with the [Stamp] of the
// replica that computed it. The deterministic simulation and the end-to-end
// tests record a run, collect the replicas' committed orders and submitted
// operations once the cluster is quiet, and hand everything to the checkers:
//
//   - [CheckLinearizable]: every final view (of strong operations, and of weak
//     operations that entered the replicated lists) is linearizable, checked
//     with porcupine over the real state machine (Creek §4.3, Lin(strong, F)).
//     The committed order is tried first as the linearization, in linear
//     time; porcupine searches only when it is not one.
//   - [CheckWeakViews]: fluctuating eventual consistency (Creek §4.3,
//     FEC(weak, F)), checked by reconstruction: every preliminary view must be
//     the result of executing the serial order its stamp claims (the committed
//     prefix, then the tentative operations the replica held, ordered by
//     (TS, ID)), and every final view must be the result at the operation's
//     place in the committed order.
//   - [CheckDurable]: no acknowledged write is lost, none is committed twice.
//   - [CheckFinalOnce]: every operation closes at most once and nothing
//     follows its final view (the Correctable contract, DESIGN §3).
//   - [CheckConverged]: quiet replicas agree on committed order, tentative
//     order and state.
//
// Checkers return nil or an error wrapping [ErrViolation] that names the
// record, the view, what was expected and what was seen, so that a failing
// seed explains itself.
package history
