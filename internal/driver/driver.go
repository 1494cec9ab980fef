package driver

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/correctables/correctables/internal/replica"
)

// Storage is a replica's durable storage: the raft log and hard state, and
// the replica's own operations. internal/storage implements it on Pebble.
type Storage interface {
	raft.Storage
	// Save persists, atomically and durably, what one Ready asks for.
	Save(hs *raftpb.HardState, ents []*raftpb.Entry, snap *raftpb.Snapshot, own []*replica.Req) error
	// OwnOps returns the persisted own operations in sequence order.
	OwnOps() ([]*replica.Req, error)
	// CreateSnapshot stores a snapshot of the state at index; Compact drops
	// the log before index; TruncateOwn drops own operations up to seq.
	CreateSnapshot(index uint64, cs *raftpb.ConfState, data []byte) (*raftpb.Snapshot, error)
	Compact(index uint64) error
	TruncateOwn(upTo uint64) error
	Close() error
}

// Replica is what the driver needs of a replica: *replica.Replica's
// Ready/Advance interface, in the manner of etcd raft's RawNode.
type Replica interface {
	HasReady() bool
	Ready() (replica.Ready, error)
	Advance(replica.Ready)
}

// DefaultMaxReadies is Config.MaxReadies's default.
const DefaultMaxReadies = 1024

// Config configures a Driver.
type Config struct {
	Replica Replica
	Storage Storage
	// Send hands a message to the transport. It must not block: a full
	// queue drops (raft retransmits, anti-entropy repairs gossip).
	Send func(replica.Message)
	// Deliver hands a view to the request waiting for it. It must not
	// block; an error fail-stops the replica (a broken invariant).
	Deliver func(replica.View) error
	// CompactMargin is how many entries stay in the log behind a snapshot,
	// so that a follower a little behind catches up from the log rather
	// than from a snapshot.
	CompactMargin uint64
	// Logger receives snapshot lines. Default slog.Default().
	Logger *slog.Logger
	// Observe, if set, is told what each round did (for metrics).
	Observe func(Round)
	// MaxReadies bounds the Ready values one HandleReady call handles
	// before it returns to its caller, so that a replica which keeps
	// reporting a Ready (a bug: HasReady true with nothing to do) cannot
	// keep its owner's loop from its ticks, requests and Stop. A normal
	// round needs a handful. Default DefaultMaxReadies.
	MaxReadies int
}

// Round is what one HandleReady call did.
type Round struct {
	Readies  int           // Ready values handled
	Saves    int           // Save calls that had something to write
	Entries  int           // raft entries persisted
	OwnOps   int           // own operations persisted
	Messages int           // messages handed to Send
	Views    int           // views delivered
	Save     time.Duration // time spent in Save (fsync included)
	Snapshot bool          // a snapshot was stored
	Capped   bool          // MaxReadies was reached with a Ready still reported
}

// Driver handles a replica's Ready. Not safe for concurrent use: the owner
// of the replica calls it.
type Driver struct {
	cfg    Config
	capped bool // the MaxReadies warning was logged
}

// New returns a driver.
func New(cfg Config) (*Driver, error) {
	if cfg.Replica == nil || cfg.Storage == nil || cfg.Send == nil || cfg.Deliver == nil {
		return nil, errors.New("driver: Replica, Storage, Send and Deliver are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxReadies < 0 {
		return nil, fmt.Errorf("driver: MaxReadies %d is negative", cfg.MaxReadies)
	}
	if cfg.MaxReadies == 0 {
		cfg.MaxReadies = DefaultMaxReadies
	}
	return &Driver{cfg: cfg}, nil
}

// HandleReady handles every Ready the replica has, at most MaxReadies of
// them: persist, then snapshot and compact, then send, then deliver, then
// advance. An error means the storage failed or an invariant broke; the
// replica must stop (fail-stop).
func (d *Driver) HandleReady() error {
	var round Round
	rep := d.cfg.Replica
	defer func() {
		if d.cfg.Observe != nil && round.Readies > 0 {
			d.cfg.Observe(round)
		}
	}()
	for rep.HasReady() {
		if round.Readies == d.cfg.MaxReadies {
			// Yield to the owner's loop; what is left is handled next call.
			round.Capped = true
			if !d.capped {
				d.capped = true
				d.cfg.Logger.Warn("driver: replica still reports a Ready after the round's limit; returning to the loop",
					"readies", round.Readies, "messages", round.Messages, "views", round.Views, "saves", round.Saves)
			}
			return nil
		}
		rd, err := rep.Ready()
		if err != nil {
			return err
		}
		round.Readies++
		// A leader's appends and heartbeats go out while it writes (raft
		// thesis §10.2.1, as etcd does): its followers persist in parallel
		// with it. Raft counts the leader's own copy of an entry only after
		// Advance; the replica's own operations they carry are persisted
		// below, and a restart fence covers a crash in between (see
		// replica.Ready.Early).
		for _, m := range rd.Early {
			d.cfg.Send(m)
		}
		round.Messages += len(rd.Early)
		if len(rd.Entries) > 0 || len(rd.Persist) > 0 || (rd.HardState != nil && !raft.IsEmptyHardState(rd.HardState)) ||
			(rd.Snapshot != nil && !raft.IsEmptySnap(rd.Snapshot)) {
			start := time.Now()
			if err := d.cfg.Storage.Save(rd.HardState, rd.Entries, rd.Snapshot, rd.Persist); err != nil {
				return fmt.Errorf("driver: persisting: %w", err)
			}
			round.Save += time.Since(start)
			round.Saves++
			round.Entries += len(rd.Entries)
			round.OwnOps += len(rd.Persist)
		}
		if req := rd.CreateSnapshot; req != nil {
			if err := d.snapshot(req); err != nil {
				return err
			}
			round.Snapshot = true
		}
		for _, m := range rd.Messages {
			d.cfg.Send(m)
		}
		round.Messages += len(rd.Messages)
		for _, v := range rd.Views {
			if err := d.cfg.Deliver(v); err != nil {
				return fmt.Errorf("driver: delivering a view: %w", err)
			}
		}
		round.Views += len(rd.Views)
		rep.Advance(rd)
	}
	return nil
}

// snapshot stores a snapshot the replica asked for and compacts behind it.
func (d *Driver) snapshot(req *replica.SnapshotRequest) error {
	st := d.cfg.Storage
	if _, err := st.CreateSnapshot(req.Index, req.ConfState, req.Data); err != nil {
		if errors.Is(err, raft.ErrSnapOutOfDate) {
			return nil
		}
		return fmt.Errorf("driver: snapshot at %d: %w", req.Index, err)
	}
	if m := d.cfg.CompactMargin; req.Index > m {
		if err := st.Compact(req.Index - m); err != nil && !errors.Is(err, raft.ErrCompacted) {
			return fmt.Errorf("driver: compacting to %d: %w", req.Index-m, err)
		}
	}
	if err := st.TruncateOwn(req.OwnCommitted); err != nil {
		return fmt.Errorf("driver: dropping committed own operations: %w", err)
	}
	d.cfg.Logger.Info("snapshot", "index", req.Index, "bytes", len(req.Data))
	return nil
}
