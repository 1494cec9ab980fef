package api

import (
	"fmt"
	"strconv"
)

// ClusterIDMetadata is the gRPC metadata key that carries a cluster id, as
// 16 hexadecimal digits (FormatClusterID):
//
//   - in the response header of every reply of the Store and Cluster
//     services (Invoke's stream header, Status, Backup, the member RPCs):
//     the cluster the answering replica belongs to (absent while a joining
//     replica has not learnt it yet, and from servers that predate it);
//   - in the request metadata of a client that has pinned a cluster: the
//     cluster it expects; a replica of another cluster refuses the call
//     with FailedPrecondition before running it;
//   - in the request metadata of a Peer.Stream: the sending replica's
//     cluster; a replica of another cluster refuses the stream with
//     FailedPrecondition and steps none of its messages.
const ClusterIDMetadata = "correctables-cluster-id"

// ReplicaIDMetadata is the gRPC metadata key in which a Peer.Stream names
// the sending replica's id (decimal), for the receiver's logs.
const ReplicaIDMetadata = "correctables-replica-id"

// FormatClusterID writes a cluster id as ClusterIDMetadata carries it.
func FormatClusterID(id uint64) string { return fmt.Sprintf("%016x", id) }

// ParseClusterID reads a cluster id written by FormatClusterID.
func ParseClusterID(s string) (uint64, error) {
	id, err := strconv.ParseUint(s, 16, 64)
	if err != nil || id == 0 {
		return 0, fmt.Errorf("cluster id %q: want 16 hexadecimal digits, not all zero", s)
	}
	return id, nil
}

// ClusterIDFromMetadata returns the cluster id in the values of
// ClusterIDMetadata (md.Get's result): 0 when there is none, an error when
// it is malformed or there are several that differ.
func ClusterIDFromMetadata(vals []string) (uint64, error) {
	var id uint64
	for _, v := range vals {
		x, err := ParseClusterID(v)
		if err != nil {
			return 0, err
		}
		if id != 0 && x != id {
			return 0, fmt.Errorf("cluster ids %s and %s in one message", FormatClusterID(id), FormatClusterID(x))
		}
		id = x
	}
	return id, nil
}
