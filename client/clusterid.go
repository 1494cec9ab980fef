package client

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/correctables/correctables/api"
)

// Cluster identity. Every reply of a replica carries the id of its cluster
// (api.ClusterIDMetadata in the response header). The Client pins the first
// cluster id it sees (or the one WithClusterID gives), sends it with every
// request, and treats an endpoint that answers for another cluster as
// unavailable: the address of one of its replicas is now used by another
// cluster's replica. A replica that knows its cluster refuses a request
// that expects another before running it, so the Client fails such an
// operation over to the next endpoint, an update too. Servers that send no
// cluster id are accepted.

// ErrClusterMismatch: an endpoint answered for another cluster than the one
// the Client is pinned to. The error is a *ClusterMismatchError and also
// matches ErrUnavailable: the Client fails over as from a down endpoint.
var ErrClusterMismatch = errors.New("client: cluster id mismatch")

// ClusterMismatchError is the error of an endpoint that answered for
// another cluster.
type ClusterMismatchError struct {
	// Endpoint is the address, as given to Dial.
	Endpoint string
	// Pinned is the cluster id the Client is pinned to; Got the one the
	// endpoint answered with.
	Pinned, Got uint64
	// NotRun reports that the request carried the pinned id, so the
	// replica refused it before running it.
	NotRun bool
}

func (e *ClusterMismatchError) Error() string {
	return fmt.Sprintf("cluster id mismatch: endpoint %s answers for cluster %s, this client is pinned to cluster %s "+
		"(a replica of another cluster has that address): unavailable for this client",
		e.Endpoint, api.FormatClusterID(e.Got), api.FormatClusterID(e.Pinned))
}

// Is makes the error match ErrClusterMismatch and ErrUnavailable.
func (e *ClusterMismatchError) Is(target error) bool {
	return target == ErrClusterMismatch || target == ErrUnavailable
}

// WithClusterID pins the Client to cluster id (as `correctables status`
// prints it; api.ParseClusterID reads it) from the start, instead of to the
// first one an endpoint answers with.
func WithClusterID(id uint64) Option { return func(c *config) { c.clusterID = id } }

// ClusterID returns the id of the cluster the Client is pinned to: the
// first one a replica answered with, or WithClusterID's; 0 while no
// replica that sends one has answered.
func (c *Client) ClusterID() uint64 { return c.pin.id.Load() }

// clusterPin is the cluster id a Client is pinned to (0: none yet).
type clusterPin struct {
	id atomic.Uint64
	// texts is the pinned id as sent in metadata, formatted once.
	texts atomic.Pointer[pinnedText]
}

type pinnedText struct {
	id uint64
	s  string
	md metadata.MD // the request metadata that carries s; never modified
}

// text returns id as api.FormatClusterID does, and the request metadata
// carrying it, from a cache of the last one formatted.
func (p *clusterPin) text(id uint64) *pinnedText {
	if t := p.texts.Load(); t != nil && t.id == id {
		return t
	}
	s := api.FormatClusterID(id)
	t := &pinnedText{id: id, s: s, md: metadata.Pairs(api.ClusterIDMetadata, s)}
	p.texts.Store(t)
	return t
}

// dialOptions are the interceptors of the connection to endpoint addr: they
// send the pinned id with each request and check the id of each reply.
func (p *clusterPin) dialOptions(addr string) []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			ctx, sent := p.outgoing(ctx)
			if a, _ := ctx.Value(attemptKey{}).(*attempt); a != nil {
				// A Call: the wire counter keeps the reply's header (gRPC
				// hands it over before the reply or the status that
				// follows it), so no grpc.Header copy of it is needed.
				err := invoke(ctx, method, req, reply, cc, opts...)
				var hdr metadata.MD
				if h := a.header.Load(); h != nil {
					hdr = *h
				}
				if cerr := p.check(addr, hdr, sent); cerr != nil {
					return cerr
				}
				return err
			}
			var hdr metadata.MD
			err := invoke(ctx, method, req, reply, cc, append(opts, grpc.Header(&hdr))...)
			if cerr := p.check(addr, hdr, sent); cerr != nil {
				return cerr
			}
			return err
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			ctx, sent := p.outgoing(ctx)
			cs, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil {
				return nil, err
			}
			a, _ := ctx.Value(attemptKey{}).(*attempt)
			return &pinnedStream{ClientStream: cs, p: p, addr: addr, sent: sent, a: a}, nil
		}),
	}
}

// outgoing adds the pinned cluster id, if any, to the request's metadata;
// it returns the id it sent.
func (p *clusterPin) outgoing(ctx context.Context) (context.Context, uint64) {
	id := p.id.Load()
	if id == 0 {
		return ctx, 0
	}
	t := p.text(id)
	if _, ok := metadata.FromOutgoingContext(ctx); ok {
		return metadata.AppendToOutgoingContext(ctx, api.ClusterIDMetadata, t.s), id
	}
	// The usual case, a context without metadata: the shared metadata
	// (gRPC only reads it), without building a copy per request.
	return metadata.NewOutgoingContext(ctx, t.md), id
}

// check pins the cluster id of a reply's header, or fails if it differs
// from the pinned one; sent is the id the request carried.
func (p *clusterPin) check(addr string, hdr metadata.MD, sent uint64) error {
	got, err := api.ClusterIDFromMetadata(hdr.Get(api.ClusterIDMetadata))
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrProtocol, addr, err)
	}
	if got == 0 || p.id.CompareAndSwap(0, got) {
		return nil
	}
	if pinned := p.id.Load(); pinned != got {
		return &ClusterMismatchError{Endpoint: addr, Pinned: pinned, Got: got, NotRun: sent != 0 && sent != got}
	}
	return nil
}

// pinnedStream checks a stream's header before it delivers the first
// message or error.
type pinnedStream struct {
	grpc.ClientStream
	p    *clusterPin
	addr string
	sent uint64
	// a is the Invoke attempt, whose wire counter keeps the header; nil
	// for other streams.
	a       *attempt
	checked bool
}

func (s *pinnedStream) RecvMsg(m any) error {
	if s.checked {
		return s.ClientStream.RecvMsg(m)
	}
	s.checked = true
	err := s.ClientStream.RecvMsg(m)
	if cerr := s.p.check(s.addr, s.header(), s.sent); cerr != nil {
		return cerr
	}
	return err
}

// header returns the stream's header once RecvMsg returned: the wire
// counter's copy if it saw one (gRPC hands the header to the stats handler
// before the message or the end of the stream that follows it), otherwise
// the stream's (which copies it again).
func (s *pinnedStream) header() metadata.MD {
	if s.a != nil {
		if h := s.a.header.Load(); h != nil {
			return *h
		}
	}
	h, _ := s.Header()
	return h
}

// notRun reports that err is a refusal before the operation ran, so that
// trying it at another endpoint cannot run it twice: a replica of another
// cluster, or one draining before its removal (refusedDraining).
func notRun(err error) bool {
	me, ok := errors.AsType[*ClusterMismatchError](err)
	return ok && me.NotRun || refusedDraining(err)
}
