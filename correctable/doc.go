// Package correctable implements Correctables (Guerraoui et al., OSDI 2016):
// the result of one storage operation delivered as a sequence of views, each
// at least as strong as the one before, ending in exactly one close (a final
// view or an error).
//
// A Correctable descends from a Promise. Where a Promise is blocked until it
// resolves once, a Correctable starts updating, may receive preliminary views
// (fast, weakly consistent: from a cache or the closest replica) and closes
// with a final view (strongly consistent) or an error:
//
//	UPDATING --update(view)--> UPDATING
//	UPDATING --close(view)---> FINAL
//	UPDATING --fail(err)-----> ERROR
//
// Applications consume a Correctable through callbacks (SetCallbacks), by
// blocking (Final), by iterating (Views) or by polling (Latest, Done, Err),
// and compose Correctables with Speculate, Map, Then, All, FirstAtLeast and
// WithContext. Storage systems plug in through the Binding interface; Invoke,
// InvokeWeak and InvokeStrong are written once on top of any Binding and
// enforce the contract even when a binding misbehaves. A binding whose
// invocations can go on without a goroutine of their own (a request queued
// on a connection whose reader emits the reply) also implements Starter.
//
// Consistency levels are ordered values of type Level. The package declares
// the six Pileus guarantees (Eventual, MonotonicReads, ReadMyWrites, Causal,
// BoundedStaleness, Strong) with well-spaced ranks so that a binding can
// declare its own levels in between (for example a cache level weaker than
// Eventual).
//
// The contract every Correctable keeps is stated in docs/design.md, section
// "The Correctable contract". A reference primary-backup binding for tests,
// examples and the demo lives in package correctabletest.
package correctable
