package client

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Errors in Result.Err: the operation ran at a replica and failed there,
// changing nothing. They mirror the store's result codes one for one.
var (
	// ErrUnknownOp: the replica does not know the operation's kind (or a
	// guard's comparison).
	ErrUnknownOp = errors.New("client: unknown operation")
	// ErrBadArgs: the operation is malformed (for example a scan limit out
	// of range).
	ErrBadArgs = errors.New("client: bad arguments")
	// ErrKeyTooLarge: a key, queue name or prefix exceeds the store's limit.
	ErrKeyTooLarge = errors.New("client: key too large")
	// ErrValueTooLarge: a value (for append: the value it would produce)
	// exceeds the store's limit.
	ErrValueTooLarge = errors.New("client: value too large")
	// ErrTooManyOps: a transaction has too many guards and writes.
	ErrTooManyOps = errors.New("client: too many operations in transaction")
	// ErrNotInteger: increment of a value that is not a decimal int64.
	ErrNotInteger = errors.New("client: value is not an integer")
	// ErrOverflow: increment would overflow int64.
	ErrOverflow = errors.New("client: integer overflow")
	// ErrUnknownCode: the replica reported a result code this client does
	// not know (a newer server).
	ErrUnknownCode = errors.New("client: unknown result code")
)

// Errors that fail a Correctable (or Dial): the operation could not be run,
// or its views could not be delivered. They are wrapped with context (the
// operation, the endpoint, the server's message); test with errors.Is. A
// cancelled or expired context fails with an error that matches
// context.Canceled or context.DeadlineExceeded instead.
var (
	// ErrInvalidArgument: the request was rejected as invalid, by the
	// server (gRPC InvalidArgument) or before sending it (the zero Op, a
	// scan limit out of range, a weak committed view of a read).
	ErrInvalidArgument = errors.New("client: invalid argument")
	// ErrOverloaded: the replica shed the request (gRPC ResourceExhausted).
	// Retrying later, or elsewhere, may succeed.
	ErrOverloaded = errors.New("client: replica overloaded")
	// ErrUnavailable: no endpoint could be reached (gRPC Unavailable on
	// every endpoint tried).
	ErrUnavailable = errors.New("client: unavailable")
	// ErrUnimplemented: the server does not implement the request (gRPC
	// Unimplemented): an older or different server.
	ErrUnimplemented = errors.New("client: not implemented by the server")
	// ErrServer: the server failed (gRPC Internal, Unknown, DataLoss and any
	// code not listed here).
	ErrServer = errors.New("client: server error")
	// ErrResultLost: the operation committed, but the replica cannot tell
	// its final result: it lagged behind a snapshot while the operation
	// committed, and the result was large and differed from the
	// preliminary one. Do not retry an update on it: it took effect; read
	// the key to learn the outcome.
	ErrResultLost = errors.New("client: operation committed, final result not retained")
	// ErrProtocol: the server's replies broke the view protocol (a
	// confirmation without a preliminary view, a view without a result, a
	// view at a level not requested, or a stream that ended without its
	// final view).
	ErrProtocol = errors.New("client: protocol violation")
	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("client: closed")
)

// codeErrs maps a result code (the wire's Result.err, internal/state.Code) to
// its sentinel. The numbers are the store's wire encoding.
var codeErrs = [...]error{
	0: nil,
	1: ErrUnknownOp,
	2: ErrBadArgs,
	3: ErrKeyTooLarge,
	4: ErrValueTooLarge,
	5: ErrTooManyOps,
	6: ErrNotInteger,
	7: ErrOverflow,
}

// resultError is a failed result: its code and the sentinel for it.
type resultError struct {
	code     uint32
	sentinel error
}

func (e *resultError) Error() string {
	if e.sentinel == ErrUnknownCode {
		return fmt.Sprintf("%v %d", ErrUnknownCode, e.code)
	}
	return e.sentinel.Error()
}

func (e *resultError) Unwrap() error { return e.sentinel }

// resultErr maps a result code to Result.Err.
func resultErr(code uint32) error {
	if code == 0 {
		return nil
	}
	if code < uint32(len(codeErrs)) {
		return &resultError{code: code, sentinel: codeErrs[code]}
	}
	return &resultError{code: code, sentinel: ErrUnknownCode}
}

// codeOfErr is the inverse of resultErr, for Result.Equal: 0 for nil, the
// code for a result error, and a code no server sends for anything else.
func codeOfErr(err error) uint32 {
	if err == nil {
		return 0
	}
	if re, ok := errors.AsType[*resultError](err); ok {
		return re.code
	}
	for c, s := range codeErrs {
		if s != nil && errors.Is(err, s) {
			return uint32(c)
		}
	}
	return ^uint32(0)
}

// statusErrs maps the gRPC codes the server uses to sentinels; codes not
// listed map to ErrServer. This table and errorFromStatus are the one place
// gRPC status becomes a client error.
var statusErrs = map[codes.Code]error{
	codes.InvalidArgument:   ErrInvalidArgument,
	codes.OutOfRange:        ErrInvalidArgument,
	codes.ResourceExhausted: ErrOverloaded,
	codes.Unavailable:       ErrUnavailable,
	codes.Unimplemented:     ErrUnimplemented,
	codes.DataLoss:          ErrResultLost,
	codes.Canceled:          context.Canceled,
	codes.DeadlineExceeded:  context.DeadlineExceeded,
}

// errorFromStatus translates an error from a gRPC call to a client error
// that wraps the matching sentinel and keeps the server's message. ctx is
// the call's context: when it ended, its cause is the error.
func errorFromStatus(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if me, ok := errors.AsType[*ClusterMismatchError](err); ok {
		return me
	}
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("%w: %w", ErrServer, err)
	}
	sentinel, ok := statusErrs[st.Code()]
	if !ok {
		sentinel = ErrServer
	}
	return fmt.Errorf("%w (%s: %s)", sentinel, st.Code(), st.Message())
}
