// Package api holds the protobuf definitions of Correctables' wire protocol
// (correctables.proto) and the code generated from them. Regenerate with
// `make proto` (protoc from Debian's protobuf-compiler; the Go plugins are
// pinned in go.mod's tool block).
//
// Store is the client-facing service: Invoke takes one operation and returns
// one stream of views, preliminary first, then final; a final view equal to
// the preliminary one comes as a confirmation without a result (Correctables
// §5.2). Call takes an operation that asks for one view only (preliminary,
// or final) and returns that view as a unary reply: the same checks, errors
// and view as Invoke, without the cost of a stream; it refuses a request
// for both views, or none, with InvalidArgument. Peer carries raft and
// gossip messages between replicas.
//
// Every reply of Store and Cluster (Invoke's stream and Call alike)
// carries the id of the replica's cluster in its response header, and every
// Peer stream the sender's, under the metadata key ClusterIDMetadata; a
// replica refuses a request or a stream that names another cluster with
// FailedPrecondition (see ClusterIDMetadata).
package api
