package client

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/correctables/correctables/internal/loopback"
)

// Defaults of the options.
const (
	DefaultDialTimeout   = 5 * time.Second
	DefaultProbeInterval = 2 * time.Second
	DefaultProbeTimeout  = time.Second
	DefaultProbeWindow   = 8
	DefaultInitialProbes = 3
)

// Option configures Dial.
type Option func(*config)

// config holds what the options set. validate fills in defaults.
type config struct {
	// creds secures the connections; nil means plaintext, which validate
	// allows only on loopback endpoints unless insecure is set.
	creds    credentials.TransportCredentials
	insecure bool
	// dialOpts are passed to grpc.NewClient after the client's own.
	dialOpts []grpc.DialOption
	logger   *slog.Logger
	// dialTimeout bounds Dial's initial probes.
	dialTimeout time.Duration
	// probeInterval is the time between two probe rounds.
	probeInterval time.Duration
	// probeTimeout bounds one Status probe.
	probeTimeout time.Duration
	// probeWindow is how many round-trip samples per endpoint the estimate
	// (their median) is taken over.
	probeWindow int
	// initialProbes is how many probes Dial sends each endpoint.
	initialProbes int
	// trace, if set, is called with every invocation's OpTrace.
	trace func(OpTrace)
	// noConfirm asks replicas for final views in full (WithoutConfirmations).
	noConfirm bool
	// recorder, if set, records the gets and puts (WithTraceRecorder).
	recorder *TraceRecorder
	// clusterID pins the Client to a cluster from the start (WithClusterID).
	clusterID uint64
	// targetTrace, if set, is called with every SLA target choice
	// (WithTargetTrace).
	targetTrace func(TargetDecision)
	// batchInflight is the calls of one kind in flight to one replica
	// past which the next ones are batched (WithCallBatching); 0 turns
	// batching off.
	batchInflight int
	batchSet      bool
	// pipe sends single-view operations on each endpoint's Pipe stream
	// (WithPipe).
	pipe    bool
	pipeSet bool
	// quorumHedge is the hedge of quorum reads (WithQuorumHedge); set
	// says it was given.
	quorumHedge    time.Duration
	quorumHedgeSet bool
}

// WithTransportCredentials secures the connections with creds (for example
// credentials.NewTLS). Without it the Client talks plaintext, which Dial
// accepts only for loopback endpoints (or with WithInsecure).
func WithTransportCredentials(creds credentials.TransportCredentials) Option {
	return func(c *config) { c.creds = creds }
}

// WithInsecure allows plaintext connections to endpoints that are not on
// loopback. Use it only on a network you trust.
func WithInsecure() Option { return func(c *config) { c.insecure = true } }

// WithDialOptions adds gRPC dial options, applied after the Client's own
// (transport credentials, a stats handler, the largest reply, and fixed
// flow-control windows of 16 MiB a stream and 32 MiB a connection, which
// turn off gRPC's bandwidth-delay ping per round trip); an option given
// here overrides the Client's.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(c *config) { c.dialOpts = append(c.dialOpts, opts...) }
}

// WithLogger sets the logger for endpoint health changes and failovers.
// The default discards.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithDialTimeout bounds Dial's initial probes (default DefaultDialTimeout).
func WithDialTimeout(d time.Duration) Option { return func(c *config) { c.dialTimeout = d } }

// WithProbeInterval sets the time between two rounds of round-trip probes
// (default DefaultProbeInterval).
func WithProbeInterval(d time.Duration) Option { return func(c *config) { c.probeInterval = d } }

// WithProbeTimeout bounds one probe (default DefaultProbeTimeout); an
// endpoint that does not answer in time is marked down.
func WithProbeTimeout(d time.Duration) Option { return func(c *config) { c.probeTimeout = d } }

// WithProbeWindow sets how many recent round-trip samples an endpoint's
// estimate is the median of (default DefaultProbeWindow).
func WithProbeWindow(n int) Option { return func(c *config) { c.probeWindow = n } }

// WithInitialProbes sets how many probes Dial sends each endpoint before it
// returns (default DefaultInitialProbes).
func WithInitialProbes(n int) Option { return func(c *config) { c.initialProbes = n } }

// WithOpTrace calls f with the OpTrace of every invocation when it ends, on
// the goroutine that ends it (for an operation started on an open pipe,
// Start, the pipe's reader, which reads nothing else meanwhile):
// per-operation bytes, views and failovers, for benchmarks. f must be safe
// for concurrent use and return quickly.
func WithOpTrace(f func(OpTrace)) Option { return func(c *config) { c.trace = f } }

// WithTargetTrace calls f with every choice of a target subSLA and replica
// (SelectTarget, and so every GetSLA and InvokeSLA): the monitor's
// estimates the choice was made from and the choice. It is for finding
// out why a Get under an SLA went where it did; f must be safe for
// concurrent use and should return quickly.
func WithTargetTrace(f func(TargetDecision)) Option { return func(c *config) { c.targetTrace = f } }

// WithTraceRecorder records every get and put the Client invokes, with the
// values read and written and their times, in r (see TraceRecorder).
func WithTraceRecorder(r *TraceRecorder) Option { return func(c *config) { c.recorder = r } }

// WithoutConfirmations asks the replicas to send every final view with its
// result in full, even when it equals the preliminary view, instead of a
// small confirmation (Correctables §5.2). Views then never have Confirmed
// set. It costs bandwidth and exists to measure what confirmations save
// (`correctables bench bandwidth`).
func WithoutConfirmations() Option { return func(c *config) { c.noConfirm = true } }

// WithCallBatching sets how many operations of one kind (the same views
// and protocol) may be in flight to one replica, each as its own call,
// before the next ones wait and go together as one CallBatch when a call
// returns (default DefaultBatchInflight). Batching costs an operation
// nothing while fewer are in flight, and under heavy load saves both the
// client and the replicas most of each call's cost. Unless set, the limit
// adapts: once more than 2*DefaultBatchInflight operations of one kind are
// outstanding to a replica, one call or batch at a time goes to it, so
// that what queues meanwhile goes in one batch per round trip rather than
// in several smaller ones (a value set here is kept whatever the load).
// 0 turns it off: every operation is its own call. Operations that ask
// for both views (Invoke) are never batched, nor a request over 64 KiB.
// Reads and updates queue
// apart, so that a read never waits behind an update a busy replica holds
// back. A batch carries the latest of its operations' deadlines (none if
// one of them has none), and none of their contexts' outgoing gRPC
// metadata: use WithCallBatching(0) if an interceptor of yours needs
// per-operation metadata.
func WithCallBatching(inflight int) Option {
	return func(c *config) { c.batchInflight, c.batchSet = inflight, true }
}

// WithPipe sets whether operations that ask for one view (InvokeWeak,
// InvokeStrong, quorum and SLA reads, the all level) go to a replica over
// one long-lived Pipe stream per endpoint, one message each way per
// operation (the default), or each as its own Call, batched as
// WithCallBatching says. A message costs both ends less than a call: no
// stream to set up and tear down, no headers and trailers; and what queues
// at either end leaves in one write. Against a replica that does not
// implement Pipe the Client uses calls, and so does an operation while its
// replica's connection is not ready (opening the stream would wait for it
// without the operation's deadline). Operations that ask for both views
// (Invoke), and requests over 64 KiB, always take a call of their own. An
// operation on the pipe carries its deadline (as timeout_us) but none of
// its context's outgoing gRPC metadata: use WithPipe(false) if an
// interceptor of yours needs per-operation metadata.
func WithPipe(on bool) Option { return func(c *config) { c.pipe = on; c.pipeSet = true } }

// WithQuorumHedge sets when a quorum read (InvokeQuorum) asks the
// endpoints beyond the nearest majority: after d if the majority has not
// answered by then, or, with d = 0, at once, every endpoint, taking the
// first majority to answer (a read then costs a replica more, and no slow
// replica or link ever holds it). By default the hedge is twice the slowest
// round-trip time of the majority asked, at least a millisecond. At most a
// minute.
func WithQuorumHedge(d time.Duration) Option {
	return func(c *config) { c.quorumHedge, c.quorumHedgeSet = d, true }
}

// validate fills in defaults and checks the configuration against the
// endpoints. Errors wrap ErrInvalidArgument.
func (c *config) validate(endpoints []string) error {
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	if c.dialTimeout == 0 {
		c.dialTimeout = DefaultDialTimeout
	}
	if c.probeInterval == 0 {
		c.probeInterval = DefaultProbeInterval
	}
	if c.probeTimeout == 0 {
		c.probeTimeout = DefaultProbeTimeout
	}
	if c.probeWindow == 0 {
		c.probeWindow = DefaultProbeWindow
	}
	if c.initialProbes == 0 {
		c.initialProbes = DefaultInitialProbes
	}
	if !c.batchSet {
		c.batchInflight = DefaultBatchInflight
	}
	if !c.pipeSet {
		c.pipe = true
	}
	var errs []error
	if c.batchInflight < 0 || c.batchInflight > 1<<16 {
		errs = append(errs, fmt.Errorf("call batching %d not in [0, 65536]", c.batchInflight))
	}
	if c.quorumHedgeSet && (c.quorumHedge < 0 || c.quorumHedge > time.Minute) {
		errs = append(errs, fmt.Errorf("quorum hedge %v not in [0, 1m]", c.quorumHedge))
	}
	if c.dialTimeout < 0 || c.probeInterval < 0 || c.probeTimeout < 0 {
		errs = append(errs, errors.New("negative duration"))
	}
	if c.probeWindow < 0 || c.probeWindow > 1024 {
		errs = append(errs, fmt.Errorf("probe window %d not in [1, 1024]", c.probeWindow))
	}
	if c.initialProbes < 0 || c.initialProbes > 100 {
		errs = append(errs, fmt.Errorf("initial probes %d not in [1, 100]", c.initialProbes))
	}
	if len(endpoints) == 0 {
		errs = append(errs, errors.New("no endpoints"))
	}
	seen := make(map[string]bool, len(endpoints))
	for _, ep := range endpoints {
		if seen[ep] {
			errs = append(errs, fmt.Errorf("endpoint %q listed twice", ep))
		}
		seen[ep] = true
		if c.creds == nil && !c.insecure && !loopback.Is(ep) {
			errs = append(errs, fmt.Errorf("endpoint %q is not on loopback: plaintext refused (use WithTransportCredentials, or WithInsecure)", ep))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	return nil
}
