package client

import (
	"context"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/protobuf/proto"
)

// Stats counts the Client's operations and the bytes they moved on the
// client link, so that the bandwidth cost of incremental views can be
// measured against the paper's (Correctables §5.2, §6.2.1). Byte counts
// cover operations (Invoke streams and Calls) only, not probes.
type Stats struct {
	// Ops is the number of invocations submitted; Failed, those that
	// failed (any error but the invocation's end).
	Ops, Failed uint64
	// Views is the number of views received; Confirmations, the final
	// views that only confirmed the preliminary one, without a result.
	Views, Confirmations uint64
	// Failovers is the number of times an invocation moved to the next
	// endpoint after an unavailable one.
	Failovers uint64
	// Hedges is the number of endpoints a quorum read asked because the
	// majority it asked first was slow (InvokeQuorum).
	Hedges uint64
	// QuorumWaits is the number of quorum reads whose first answers did
	// not include one that holds everything the others' results depend on,
	// so that the read waited for a replica to catch up (InvokeQuorum).
	QuorumWaits uint64
	// BytesSent and BytesReceived are the encoded sizes of the requests
	// sent and the view replies received (proto.Size): the payload the
	// protocol moves, without gRPC or HTTP/2 framing. Calls that went
	// together in one CallBatch share its reply's size equally.
	BytesSent, BytesReceived uint64
	// BytesSaved estimates the bytes confirmations saved: for each, the
	// encoded size of the preliminary result it stood for, which a final
	// view with the result would have carried.
	BytesSaved uint64
	// WireBytesSent and WireBytesReceived are the same messages as gRPC
	// wrote and read them: compressed if compression is on, with gRPC's
	// message framing (5 bytes), without HTTP/2 framing.
	WireBytesSent, WireBytesReceived uint64
}

// Stats returns the counts since Dial.
func (c *Client) Stats() Stats {
	s := &c.stats
	return Stats{
		Ops:               s.ops.Load(),
		Failed:            s.failed.Load(),
		Views:             s.views.Load(),
		Confirmations:     s.confirmations.Load(),
		Failovers:         s.failovers.Load(),
		Hedges:            s.hedges.Load(),
		QuorumWaits:       s.quorumWaits.Load(),
		BytesSent:         s.bytesSent.Load(),
		BytesReceived:     s.bytesReceived.Load(),
		BytesSaved:        s.bytesSaved.Load(),
		WireBytesSent:     s.wireSent.Load(),
		WireBytesReceived: s.wireReceived.Load(),
	}
}

// OpTrace is what one invocation did and cost on the client link, given to
// the WithOpTrace hook when the invocation ends.
type OpTrace struct {
	Op Op
	// Endpoint is the last endpoint tried; Attempts counts the endpoints
	// tried (more than one after a failover).
	Endpoint string
	Attempts int
	// BytesSent and BytesReceived are encoded sizes as in Stats, for this
	// invocation only; BytesSaved is the confirmation's saving, if any.
	BytesSent, BytesReceived, BytesSaved int
	// Views is the number of views received; Confirmed, whether the final
	// one was a confirmation.
	Views     int
	Confirmed bool
	// Elapsed is the time from submission to the end of the invocation.
	Elapsed time.Duration
	// Err is the error the invocation failed with, or nil.
	Err error
}

type counters struct {
	ops, failed, views, confirmations, failovers atomic.Uint64
	hedges, quorumWaits                          atomic.Uint64
	bytesSent, bytesReceived, bytesSaved         atomic.Uint64
	wireSent, wireReceived                       atomic.Uint64
}

// attempt is what the wire counter learns about one Invoke or Call RPC. It
// rides in the RPC's context.
type attempt struct {
	// sent is set once the request was written to the transport: from then
	// on the replica may execute it, and an update must not be retried
	// elsewhere.
	sent atomic.Bool
	// reqBytes is the request's encoded size, inBytes the last reply's, as
	// gRPC reports them (so that the Client does not encode them again to
	// count them); -1 until reported.
	reqBytes, inBytes atomic.Int64
	// header is the reply's header as gRPC gave it to the stats handler
	// (its own copy), before the first message or the end of the call.
	header atomic.Pointer[metadata.MD]
}

func newAttempt() *attempt {
	a := &attempt{}
	a.reqBytes.Store(-1)
	a.inBytes.Store(-1)
	return a
}

// size returns n if gRPC reported it, otherwise m's encoded size.
func size(n int64, m proto.Message) int {
	if n >= 0 {
		return int(n)
	}
	return proto.Size(m)
}

type attemptKey struct{}

// wireCounter is the gRPC stats.Handler that counts Invoke payloads on the
// wire and tells the Client whether a request left.
type wireCounter struct{ c *counters }

var _ stats.Handler = wireCounter{}

func (wireCounter) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

func (w wireCounter) HandleRPC(ctx context.Context, s stats.RPCStats) {
	a, ok := ctx.Value(attemptKey{}).(*attempt)
	if !ok {
		return // not an Invoke or a Call (a probe)
	}
	switch s := s.(type) {
	case *stats.OutPayload:
		a.reqBytes.Store(int64(s.Length))
		a.sent.Store(true)
		w.c.wireSent.Add(uint64(s.WireLength))
	case *stats.InHeader:
		a.header.Store(&s.Header)
	case *stats.InPayload:
		a.inBytes.Store(int64(s.Length))
		w.c.wireReceived.Add(uint64(s.WireLength))
	}
}

func (wireCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

func (wireCounter) HandleConn(context.Context, stats.ConnStats) {}
