// Package redial holds the gRPC reconnection parameters that the client and
// the replicas' peer links share.
package redial

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// Params bounds gRPC's reconnection backoff to a second (from 50 ms,
// growing 1.6 times per failed attempt). With gRPC's default (1 s, growing
// up to 2 minutes) an address that was down a while is dialed again only
// seconds to minutes after it comes back, and everything sent to it
// meanwhile fails at once with the last dial error.
var Params = grpc.ConnectParams{
	Backoff: backoff.Config{
		BaseDelay:  50 * time.Millisecond,
		Multiplier: 1.6,
		Jitter:     0.2,
		MaxDelay:   time.Second,
	},
	MinConnectTimeout: 20 * time.Second, // gRPC's default
}
