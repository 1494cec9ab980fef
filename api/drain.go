package api

// DrainingMarker is in the message of the Unavailable status a replica
// answers a client operation with while it drains before its removal from
// the cluster (member remove, member replace): it refused the operation
// before running it, so a client may send it, an update too, to another
// replica.
const DrainingMarker = "draining before its removal from the cluster"
