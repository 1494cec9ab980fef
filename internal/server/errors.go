package server

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/internal/replica"
)

// Errors of the server, before they become gRPC statuses.
var (
	// ErrInvalidRequest: the request is malformed (no operation, unknown
	// kind, nothing asked for).
	ErrInvalidRequest = errors.New("server: invalid request")
	// ErrOverloaded: too many requests in flight.
	ErrOverloaded = errors.New("server: too many requests in flight")
	// ErrBatchFull: a read in a CallBatch whose result would take the
	// reply past api.MaxBatchReplyBytes; its result is left out.
	ErrBatchFull = errors.New("server: " + api.BatchFullMarker)
	// ErrStopped: the server is shutting down.
	ErrStopped = errors.New("server: stopped")
	// ErrBehind: a weak read's min_vv counts operations this replica had
	// not received within Config.MinVVWait; the read did not run.
	ErrBehind = errors.New("server: this replica has not received every operation the read's min_vv counts")
	// ErrResultLost: the operation committed, but its stable result was not
	// retained across the snapshot that caught this replica up (see
	// replica.View.Lost).
	ErrResultLost = errors.New("server: operation committed; its final result was not retained across a snapshot")
)

// statusTable maps server errors to gRPC codes: the one place where that
// happens (as etcd's rpctypes). The first match wins.
var statusTable = []struct {
	err  error
	code codes.Code
}{
	{ErrInvalidRequest, codes.InvalidArgument},
	{replica.ErrInvalidOp, codes.InvalidArgument},
	{ErrOverloaded, codes.ResourceExhausted},
	{ErrBatchFull, codes.ResourceExhausted},
	{replica.ErrBusy, codes.ResourceExhausted},
	{ErrBehind, codes.ResourceExhausted},
	{ErrStopped, codes.Unavailable},
	{replica.ErrDraining, codes.Unavailable},
	{ErrResultLost, codes.DataLoss},
	{ErrUnauthenticated, codes.Unauthenticated},
	{context.Canceled, codes.Canceled},
	{context.DeadlineExceeded, codes.DeadlineExceeded},
}

// toStatus converts an error to a gRPC status error; unknown errors are
// Internal.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	for _, e := range statusTable {
		if errors.Is(err, e.err) {
			if e.code == codes.ResourceExhausted {
				// Every refusal of the table ran nothing: say so, so that
				// the client may try another replica (api.RefusedMarker).
				return status.Error(e.code, err.Error()+" ("+api.RefusedMarker+")")
			}
			return status.Error(e.code, err.Error())
		}
	}
	return status.Error(codes.Internal, err.Error())
}
