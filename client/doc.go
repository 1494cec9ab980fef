// Package client is the Go client of the Correctables store: one operation,
// several views over time, each at least as strong as the one before
// (Correctables, OSDI 2016).
//
// Dial connects to the replicas, measures the round-trip time to each and
// routes every operation to the nearest healthy one (an update that asks
// for its final view only, as InvokeStrong's, to the raft leader the
// replicas report), failing over to the next when a replica is unavailable. An operation is an Op built with a
// constructor (Get, Put, Delete, CAS, CASAbsent, Incr, Append, Scan,
// Enqueue, Dequeue, Txn, Noop); invoking it returns a
// *correctable.Correctable[Result] that receives its views:
//
//	c.Invoke(ctx, op)                     preliminary view (correctable.Eventual), then final (correctable.Strong)
//	c.InvokeWeak(ctx, op)                 one view, from one replica's tentative state, at once
//	c.InvokeStrong(ctx, op)               one view, strongly consistent (after consensus)
//	c.InvokeWeakCommitted(ctx, update)    a weak update's view at once, then its committed result
//
// The typed helpers (c.Get, c.Put, c.Incr, ...) build the op and invoke it
// at the levels given, both by default. For both views an invocation is one
// Store.Invoke, with one stream of replies (Correctables §5.2): the replica
// sends the preliminary view before coordinating and, when the final view
// equals it, a small confirmation instead of the result; such a view has
// Confirmed set and the preliminary view's value. For one view
// (InvokeWeak, InvokeStrong, quorum and SLA reads) it is one message each
// way on the endpoint's Store.Pipe, a long-lived stream the Client opens per
// endpoint and shares among its operations, several to a message under
// load (WithPipe); this costs both ends less than a call, and an operation
// that finds the pipe open costs no goroutine (Start). Without the pipe
// (WithPipe(false), a replica older than Pipe, a request over 64 KiB) it is
// the unary Store.Call, and under load single-view operations that queue
// behind the calls in flight to a replica go together as one
// Store.CallBatch, each with its own view or error (WithCallBatching); an
// endpoint that answers Call with Unimplemented gets Invoke from then on.
// Every view carries the replica's Stamp (StampOf).
//
// The Client is a correctable.Binding[Op, Result] (and a
// correctable.Starter), so everything in package correctable (Speculate,
// Then, All, FirstAtLeast, ...) applies. Result is
// not comparable: use correctable.SpeculateFunc with Result.Equal.
//
// Errors come in two kinds. An operation that ran and failed at the replica
// (an increment of a non-integer, a key too large) has a Result whose Err
// matches ErrNotInteger, ErrKeyTooLarge and the like; it may differ between
// the preliminary and the final view. An operation that could not run fails
// the Correctable with an error matching ErrInvalidArgument, ErrOverloaded,
// ErrUnavailable, ErrProtocol, ErrClosed, or the context's error. Test both
// with errors.Is.
//
// InvokeQuorum runs an operation at the quorum level, between the two and
// without consensus: a read returns the freshest of a majority's tentative
// states, an update returns once a majority has received it, and a quorum
// read sees every quorum write that completed before it started.
// InvokeCPQ runs an operation at a level a CPQ policy draws: the stronger
// one (strong, or quorum) with probability p, else the weak one,
// optionally after an artificial delay before weak reads (Continuous
// Partial Quorums, SCDM'15 §1).
// WithTraceRecorder records the gets and puts a Client invokes, with their
// values and times, for the Γ staleness metric (`correctables check gamma`).
//
// Sessions and SLAs (Pileus, SOSP'13 §3-§4; docs/consistency.md): a
// Session records the stamps of its reads and writes, and InvokeSession
// tells with every view which of the six guarantees (strong, causal,
// bounded staleness, read-my-writes, monotonic reads, eventual) it satisfies
// for the session (GuaranteesOf). GetSLA reads under a consistency-based SLA
// (ordered subSLAs of guarantee, latency bound and utility) at the replica
// of highest expected utility, from the client's Monitor, and reports the
// subSLA met; InvokeSLA is the incremental SLA, a Correctable whose views
// are tagged with the subSLA each reply met.
//
// Stats counts operations and the bytes of requests and replies on the
// client link, and the bytes confirmations saved, to measure the bandwidth
// cost of incremental views.
package client
