package client

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/correctables/correctables/correctable"
)

// CPQ is a continuous partial quorum policy (McKenzie, Fan, Golab,
// Continuous Partial Quorums, SCDM'15 §1): for each operation it draws the
// strong level (InvokeStrong: consensus, a linearizable view) with
// probability p and the weak level (InvokeWeak: the nearest replica's
// tentative state) otherwise, with separate probabilities for reads and
// for updates. p is a continuous knob between the two discrete levels.
//
// With QuorumReads, the stronger level of a read is a quorum read
// (InvokeQuorum: the freshest of a majority's tentative states, no
// consensus) rather than a strong one; with QuorumWrites, the stronger
// level of an update is a quorum write (InvokeQuorum: weak, acknowledged
// once a majority has received it). With both, the two levels are the
// paper's ONE and QUORUM. With AllWrites, the stronger level of an update
// waits until every replica has received it (InvokeAll, Cassandra's ALL):
// with reads always weak (ReadP 0) the two levels are ONE-ONE and ONE-ALL,
// whose stronger one makes every weak read that starts after an update
// completed include it, at a weak read's latency.
//
// It also implements the paper's comparator, artificial delays (CPQ §1,
// §3.2): a client-side delay before every weak read, which gives the
// replicas time to receive recent writes at the cost of the read's latency.
//
// The draws come from a seeded generator: the same seed and the same
// sequence of invocations give the same levels. A CPQ is safe for concurrent
// use; SetP and SetReadDelay change it while it is in use (a controller
// does).
type CPQ struct {
	readP, writeP atomic.Uint64 // math.Float64bits
	readDelay     atomic.Int64  // nanoseconds
	quorumReads   bool
	quorumWrites  bool
	allWrites     bool

	mu  sync.Mutex
	rng *rand.Rand
}

// CPQConfig configures NewCPQ.
type CPQConfig struct {
	// ReadP and WriteP are the probabilities, in [0, 1], that a read-only
	// operation and an update run at the strong level.
	ReadP, WriteP float64
	// ReadDelay is the artificial delay before every weak read (0: none;
	// at most MaxReadDelay). It waits on a runtime timer: on Linux a delay
	// under a millisecond lasts about a millisecond.
	ReadDelay time.Duration
	// Seed seeds the draws.
	Seed uint64
	// QuorumReads makes the stronger level of a read a quorum read
	// (InvokeQuorum) instead of a strong one (InvokeStrong).
	QuorumReads bool
	// QuorumWrites makes the stronger level of an update a quorum write
	// (InvokeQuorum) instead of a strong one (InvokeStrong).
	QuorumWrites bool
	// AllWrites makes the stronger level of an update a write at All
	// (InvokeAll: acknowledged once every replica has received it)
	// instead of a strong one. Not with QuorumWrites.
	AllWrites bool
}

// MaxReadDelay bounds CPQConfig.ReadDelay.
const MaxReadDelay = time.Minute

func checkP(name string, p float64) error {
	if math.IsNaN(p) || p < 0 || p > 1 {
		return fmt.Errorf("%w: CPQ %s probability %v not in [0, 1]", ErrInvalidArgument, name, p)
	}
	return nil
}

func checkDelay(d time.Duration) error {
	if d < 0 || d > MaxReadDelay {
		return fmt.Errorf("%w: CPQ read delay %v not in [0, %v]", ErrInvalidArgument, d, MaxReadDelay)
	}
	return nil
}

// NewCPQ returns the policy cfg describes, or an error matching
// ErrInvalidArgument for a probability outside [0, 1] or a delay outside
// [0, MaxReadDelay].
func NewCPQ(cfg CPQConfig) (*CPQ, error) {
	if err := checkP("read", cfg.ReadP); err != nil {
		return nil, err
	}
	if err := checkP("write", cfg.WriteP); err != nil {
		return nil, err
	}
	if err := checkDelay(cfg.ReadDelay); err != nil {
		return nil, err
	}
	if cfg.AllWrites && cfg.QuorumWrites {
		return nil, fmt.Errorf("%w: CPQ: AllWrites and QuorumWrites both set: an update's stronger level is one of them", ErrInvalidArgument)
	}
	p := &CPQ{rng: rand.New(rand.NewPCG(cfg.Seed, 0x43505121)), quorumReads: cfg.QuorumReads, quorumWrites: cfg.QuorumWrites, allWrites: cfg.AllWrites}
	p.readP.Store(math.Float64bits(cfg.ReadP))
	p.writeP.Store(math.Float64bits(cfg.WriteP))
	p.readDelay.Store(int64(cfg.ReadDelay))
	return p, nil
}

// P returns the current probabilities of the strong level.
func (p *CPQ) P() (read, write float64) {
	return math.Float64frombits(p.readP.Load()), math.Float64frombits(p.writeP.Load())
}

// SetP sets the probabilities of the strong level for the operations
// invoked from now on. Out of [0, 1] it returns an error matching
// ErrInvalidArgument and changes nothing.
func (p *CPQ) SetP(read, write float64) error {
	if err := checkP("read", read); err != nil {
		return err
	}
	if err := checkP("write", write); err != nil {
		return err
	}
	p.readP.Store(math.Float64bits(read))
	p.writeP.Store(math.Float64bits(write))
	return nil
}

// QuorumReads reports whether the stronger level of a read is a quorum read.
func (p *CPQ) QuorumReads() bool { return p.quorumReads }

// QuorumWrites reports whether the stronger level of an update is a quorum
// write.
func (p *CPQ) QuorumWrites() bool { return p.quorumWrites }

// AllWrites reports whether the stronger level of an update is a write at
// All.
func (p *CPQ) AllWrites() bool { return p.allWrites }

// ReadDelay returns the artificial delay before weak reads.
func (p *CPQ) ReadDelay() time.Duration { return time.Duration(p.readDelay.Load()) }

// SetReadDelay sets the artificial delay before weak reads invoked from now
// on. Out of [0, MaxReadDelay] it returns an error matching
// ErrInvalidArgument and changes nothing.
func (p *CPQ) SetReadDelay(d time.Duration) error {
	if err := checkDelay(d); err != nil {
		return err
	}
	p.readDelay.Store(int64(d))
	return nil
}

// Choose draws the level of one operation: the stronger level (strong, or
// quorum for a read with QuorumReads and an update with QuorumWrites, or
// all for an update with AllWrites), or weak after delay (non-zero only
// for a weak read).
func (p *CPQ) Choose(op Op) (strong bool, delay time.Duration) {
	prob := math.Float64frombits(p.writeP.Load())
	if op.ReadOnly() {
		prob = math.Float64frombits(p.readP.Load())
	}
	p.mu.Lock()
	x := p.rng.Float64()
	p.mu.Unlock()
	if x < prob {
		return true, 0
	}
	if op.ReadOnly() {
		delay = time.Duration(p.readDelay.Load())
	}
	return false, delay
}

// InvokeCPQ runs op at the level p draws for it (see CPQ) and returns its
// one view: a strongly consistent view at correctable.Strong (a quorum
// view at Quorum for a read with QuorumReads or an update with
// QuorumWrites, a view at All for an update with AllWrites), or the weak view at
// correctable.Eventual after p's read delay for a weak read. The view's
// Elapsed includes the delay.
func (c *Client) InvokeCPQ(ctx context.Context, op Op, p *CPQ) *correctable.Correctable[Result] {
	strong, delay := p.Choose(op)
	switch {
	case strong && p.quorumReads && op.ReadOnly(), strong && p.quorumWrites && !op.ReadOnly():
		return c.InvokeQuorum(ctx, op)
	case strong && p.allWrites && !op.ReadOnly():
		return c.InvokeAll(ctx, op)
	case strong:
		return c.InvokeStrong(ctx, op)
	case delay > 0:
		return correctable.InvokeWeak(ctx, delayed{c, delay}, op)
	}
	return c.InvokeWeak(ctx, op)
}

// delayed is the Client's binding with an artificial delay before the
// operation leaves.
type delayed struct {
	c     *Client
	delay time.Duration
}

func (d delayed) Levels() []correctable.Level { return levels }

func (d delayed) Submit(ctx context.Context, op Op, levels []correctable.Level, emit correctable.Emitter[Result]) error {
	// The read's interval in a trace starts before the delay (CPQ §1).
	ctx = context.WithValue(ctx, traceStartKey{}, traceNow())
	t := time.NewTimer(d.delay)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
	}
	return d.c.Submit(ctx, op, levels, emit)
}
