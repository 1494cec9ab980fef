package api

// DrainingMarker is in the message of the Unavailable status a replica
// answers a client operation with while it drains before its removal from
// the cluster (member remove, member replace): it refused the operation
// before running it, so a client may send it, an update too, to another
// replica.
const DrainingMarker = "draining before its removal from the cluster"

// FencedMarker is in the message of the ResourceExhausted status a replica
// answers an update with after a restart, until it has caught up with its
// cluster (the restart fence: it must first learn every operation id it
// issued before the crash). It refused the update before running it;
// another replica may take it now, and this one shortly.
const FencedMarker = "restarted, and catching up with its cluster before it takes updates"

// RefusedMarker is in the message of every ResourceExhausted status a
// replica answers a client operation with when it refused the operation
// before running any of it (too many operations in flight, the restart
// fence): a client may send that operation, an update too, to another
// replica. A ResourceExhausted without it (gRPC's own, e.g. a reply larger
// than the client accepts) says nothing about whether the operation ran.
const RefusedMarker = "refused before running it"

// BatchFullMarker is in the message of the refusal (ResourceExhausted,
// with RefusedMarker) a replica gives a read in a CallBatch whose reply
// would take the batch's reply past MaxBatchReplyBytes: the read's result
// is left out, and the client sends it again alone.
const BatchFullMarker = "batch reply full: send it alone"

// MaxBatchReplyBytes bounds the encoded results of one CallBatch reply,
// as far as reads decide it: a read whose result would take the reply
// past it is refused with BatchFullMarker. An update's result is always
// returned (it ran), so a reply may pass the bound by the updates' results.
const MaxBatchReplyBytes = 4 << 20
