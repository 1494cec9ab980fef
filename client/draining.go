package client

import (
	"errors"
	"strings"

	"github.com/correctables/correctables/api"
)

// refusedDraining reports whether err is a replica's refusal of an
// operation because it drains before its removal from the cluster
// (Unavailable carrying api.DrainingMarker): the replica refused it before
// running it, so the Client sends it, an update too, to the next endpoint.
func refusedDraining(err error) bool {
	return errors.Is(err, ErrUnavailable) && strings.Contains(err.Error(), api.DrainingMarker)
}

// refusedFenced reports whether err is a replica's refusal of an update
// because it has restarted and is catching up with its cluster
// (ResourceExhausted carrying api.FencedMarker): it ran nothing, another
// replica may take the update now, and this one shortly.
func refusedFenced(err error) bool {
	return errors.Is(err, ErrOverloaded) && strings.Contains(err.Error(), api.FencedMarker)
}

// refusedUnrun reports whether err is a replica's refusal of an operation
// before running it (ResourceExhausted carrying api.RefusedMarker: too
// many operations in flight, or the restart fence), which another replica
// may take. gRPC's own ResourceExhausted (a message over a size limit, which
// the client may raise after the replica ran the operation) carries no
// marker and is not one.
func refusedUnrun(err error) bool {
	return errors.Is(err, ErrOverloaded) && strings.Contains(err.Error(), api.RefusedMarker)
}
