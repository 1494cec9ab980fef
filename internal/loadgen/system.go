package loadgen

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/correctable"
)

// Sample is what one operation's views took.
type Sample struct {
	// Prelim and Final are the times from the invocation to the
	// preliminary and the final view; HasPrelim and HasFinal say which
	// views the operation had.
	Prelim, Final       time.Duration
	HasPrelim, HasFinal bool
	// Diverged: the operation had both views and the final one differed
	// from the preliminary one (it neither confirmed it nor carried an
	// equal result).
	Diverged bool
}

// LinkBytes are the bytes an endpoint's operations moved on the client link.
type LinkBytes struct {
	Sent, Received uint64
}

// System is a store under load: Dial opens one client connection.
type System interface {
	// Name names the system in reports ("correctables", "etcd").
	Name() string
	Dial(ctx context.Context) (Conn, error)
}

// Conn is one client connection. Do is called concurrently by the workers
// sharing the connection.
type Conn interface {
	// Do runs op asking for the views of mode and waits for the last one.
	// An error means the operation failed (a failed Correctable, a result
	// error, an RPC error).
	Do(ctx context.Context, op Op, mode Mode) (Sample, error)
	// Bytes reports the bytes moved so far; ok is false if the
	// connection cannot count them.
	Bytes() (b LinkBytes, ok bool)
	Close() error
}

// Router is implemented by connections that know which endpoint served
// each operation.
type Router interface {
	// Routes returns the number of operations each endpoint served so far.
	Routes() map[string]uint64
}

// Correctables is the store of this repository, reached with the public
// client package.
type Correctables struct {
	Endpoints []string
	// Options are passed to client.Dial.
	Options []client.Option
	// CPQ configures the policy of mode CPQ; connection i draws with
	// CPQ.Seed+i.
	CPQ client.CPQConfig
	// Trace, if set, records every connection's gets and puts.
	Trace *client.TraceRecorder

	dialed atomic.Uint64
}

func (s *Correctables) Name() string { return "correctables" }

func (s *Correctables) Dial(ctx context.Context) (Conn, error) {
	cc := &correctablesConn{routes: map[string]*atomic.Uint64{}}
	for _, ep := range s.Endpoints {
		cc.routes[ep] = new(atomic.Uint64)
	}
	trace := client.WithOpTrace(func(tr client.OpTrace) {
		if n := cc.routes[tr.Endpoint]; n != nil {
			n.Add(1)
		}
	})
	opts := append(slices.Clone(s.Options), trace)
	if s.Trace != nil {
		opts = append(opts, client.WithTraceRecorder(s.Trace))
	}
	pcfg := s.CPQ
	pcfg.Seed += s.dialed.Add(1) - 1
	pol, err := client.NewCPQ(pcfg)
	if err != nil {
		return nil, err
	}
	c, err := client.Dial(ctx, s.Endpoints, opts...)
	if err != nil {
		return nil, err
	}
	cc.c, cc.cpq = c, pol
	return cc, nil
}

type correctablesConn struct {
	c   *client.Client
	cpq *client.CPQ // mode CPQ's policy
	// routes counts the operations per endpoint they ended at (the map is
	// not modified after Dial).
	routes map[string]*atomic.Uint64
}

// Routes returns the number of operations each endpoint served so far.
func (c *correctablesConn) Routes() map[string]uint64 {
	out := make(map[string]uint64, len(c.routes))
	for ep, n := range c.routes {
		out[ep] = n.Load()
	}
	return out
}

func (c *correctablesConn) Close() error { return c.c.Close() }

// Bytes are the gRPC wire bytes of the Invoke streams (client.Stats'
// WireBytesSent and WireBytesReceived: messages with gRPC's 5-byte framing,
// without HTTP/2 framing).
func (c *correctablesConn) Bytes() (LinkBytes, bool) {
	st := c.c.Stats()
	return LinkBytes{Sent: st.WireBytesSent, Received: st.WireBytesReceived}, true
}

func (c *correctablesConn) Do(ctx context.Context, op Op, mode Mode) (Sample, error) {
	cop := client.Get(op.Key)
	if !op.Read {
		cop = client.Put(op.Key, op.Value)
	}
	var cor *correctable.Correctable[client.Result]
	switch mode {
	case Strong:
		cor = c.c.InvokeStrong(ctx, cop)
	case Weak:
		cor = c.c.InvokeWeak(ctx, cop)
	case Invoke:
		cor = c.c.Invoke(ctx, cop)
	case CPQ:
		cor = c.c.InvokeCPQ(ctx, cop, c.cpq)
	default:
		return Sample{}, fmt.Errorf("unknown mode %q", mode)
	}
	var (
		s      Sample
		prelim client.Result
		last   client.Result
	)
	if mode != Invoke {
		// One view: wait for it without iterating.
		v, err := cor.Final(ctx)
		if err != nil {
			return s, err
		}
		if mode == Weak || (mode == CPQ && v.Level != correctable.Strong) {
			s.HasPrelim, s.Prelim = true, v.Elapsed
		} else {
			s.HasFinal, s.Final = true, v.Elapsed
		}
		last = v.Value
	} else {
		for v := range cor.AllViews() {
			if !v.Final {
				s.HasPrelim, s.Prelim, prelim = true, v.Elapsed, v.Value
				continue
			}
			s.HasFinal, s.Final, last = true, v.Elapsed, v.Value
			s.Diverged = s.HasPrelim && !v.Confirmed && !v.Value.Equal(prelim)
		}
		if err := cor.Err(); err != nil {
			return s, err
		}
		if !s.HasFinal {
			return s, errors.New("invocation ended without a final view")
		}
	}
	if last.Err != nil {
		return s, fmt.Errorf("%s: %w", cop, last.Err)
	}
	return s, nil
}
