// Package correctabletest provides a reference binding for tests, examples
// and the demo: a primary-backup store over in-memory replicas (Correctables
// §5.1, Listing 7), optionally with a client-side cache in front (§4.4).
//
// A Cluster holds the replicas. The primary applies every write; the backup
// and the cache apply all but the last few (their lag, set with SetLag), so
// that weak views can differ from strong ones on purpose. An operation is a
// deterministic function over a replica's key-value state; at the backup and
// the cache it is simulated on a scratch copy (its writes are discarded), at
// the primary it is applied, as in §4.3.
//
// Two bindings run on a Cluster: Sequential queries the replicas one after
// the other, weakest first (Listing 7); Parallel queries them all at once
// and emits replies as they arrive, skipping a weak reply that arrives after
// a stronger one. Latencies are configured per replica; Config.Wait replaces
// the sleeping so that tests decide the order of replies by construction.
package correctabletest
