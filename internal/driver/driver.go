package driver

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
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

// DefaultCompactMarginBytes is Config.CompactMarginBytes's default.
const DefaultCompactMarginBytes = 64 << 20

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
	// CompactMarginBytes bounds the same margin by the bytes of the
	// entries' data: the log behind a snapshot keeps at most CompactMargin
	// entries and at most about CompactMarginBytes bytes, so that large
	// entries (values of a MiB) do not keep a thousand MiB of log on disk
	// and in the storage's compactions; nor more than a few times the
	// snapshot's size (marginBytes). A follower further behind gets a
	// snapshot. Default DefaultCompactMarginBytes.
	CompactMarginBytes uint64
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
	// Post, if set, stores snapshots in the background: the driver encodes
	// and writes a snapshot the replica asks for on a goroutine of its own
	// while the replica goes on, then hands Post the rest (compacting the
	// log behind it, telling the replica), which Post must run on the
	// goroutine that calls HandleReady (the owner's loop), or drop and
	// return false once that has stopped. Without Post (the simulation,
	// which must stay deterministic) a snapshot is stored within
	// HandleReady. The owner calls Wait before it closes the Storage.
	Post func(func()) bool
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
	// persisted counts the bytes of entry data written since the driver
	// started, and marks says, after each Save with entries, the index of
	// its last entry and persisted then (indexes increasing), for the
	// byte bound on the compaction margin.
	persisted uint64
	marks     []mark
	base      uint64 // persisted at the last mark dropped (0: none)
	// A background snapshot (Config.Post): snapErr if one failed
	// (HandleReady returns it: fail-stop), snapWG for Wait.
	snapErr error
	snapWG  sync.WaitGroup
}

// mark is the count of entry bytes persisted once the entry at index was.
type mark struct{ index, persisted uint64 }

func byMarkIndex(m mark, index uint64) int { return cmp.Compare(m.index, index) }

// New returns a driver.
func New(cfg Config) (*Driver, error) {
	if cfg.Replica == nil || cfg.Storage == nil || cfg.Send == nil || cfg.Deliver == nil {
		return nil, errors.New("driver: Replica, Storage, Send and Deliver are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if _, ok := cfg.Replica.(interface{ SnapshotDone(int) }); cfg.Post != nil && !ok {
		// It would never learn that its snapshot was stored, and ask for
		// none again.
		return nil, errors.New("driver: Post needs a Replica with SnapshotDone")
	}
	if cfg.MaxReadies < 0 {
		return nil, fmt.Errorf("driver: MaxReadies %d is negative", cfg.MaxReadies)
	}
	if cfg.MaxReadies == 0 {
		cfg.MaxReadies = DefaultMaxReadies
	}
	if cfg.CompactMarginBytes == 0 {
		cfg.CompactMarginBytes = DefaultCompactMarginBytes
	}
	return &Driver{cfg: cfg}, nil
}

// HandleReady handles every Ready the replica has, at most MaxReadies of
// them: persist, then snapshot and compact, then send, then deliver, then
// advance. An error means the storage failed or an invariant broke; the
// replica must stop (fail-stop).
func (d *Driver) HandleReady() error {
	if d.snapErr != nil {
		return d.snapErr // a background snapshot failed: fail-stop
	}
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
			d.markEntries(rd.Entries)
			round.Saves++
			round.Entries += len(rd.Entries)
			round.OwnOps += len(rd.Persist)
		}
		if req := rd.CreateSnapshot; req != nil {
			switch {
			case d.cfg.Post == nil:
				if err := d.snapshot(req); err != nil {
					return err
				}
				round.Snapshot = true
			default: // the replica asks for the next only once told (SnapshotDone)
				req.InBackground()
				d.snapWG.Add(1)
				go d.snapshotInBackground(req)
			}
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
	start := time.Now()
	n, err := d.store(req)
	return d.stored(req, n, err, start)
}

// store encodes and writes the snapshot req; it returns its size.
func (d *Driver) store(req *replica.SnapshotRequest) (int, error) {
	data, err := req.Data()
	if err != nil {
		return 0, err
	}
	_, err = d.cfg.Storage.CreateSnapshot(req.Index, req.ConfState, data)
	return len(data), err
}

// snapshotInBackground stores req off the owner's loop and posts the rest
// to it (Config.Post).
func (d *Driver) snapshotInBackground(req *replica.SnapshotRequest) {
	defer d.snapWG.Done()
	start := time.Now()
	n, err := d.store(req)
	d.cfg.Post(func() {
		if err := d.stored(req, n, err, start); err != nil && d.snapErr == nil {
			d.snapErr = err
		}
	})
}

// Wait waits for a background snapshot being written, if any: its owner
// calls it once its loop has stopped, before it closes the Storage.
func (d *Driver) Wait() { d.snapWG.Wait() }

// done tells the replica that its snapshot, written in the background, was
// stored (n bytes) or not (0). One stored within its Ready is done at
// Advance.
func (d *Driver) done(n int) {
	if d.cfg.Post == nil {
		return
	}
	if r, ok := d.cfg.Replica.(interface{ SnapshotDone(int) }); ok {
		r.SnapshotDone(n)
	}
}

// stored finishes a snapshot the Storage stored (err nil) or did not: it
// compacts the log behind it and tells the replica. A snapshot that a newer
// one overtook (one from the leader, stored meanwhile) is no error.
func (d *Driver) stored(req *replica.SnapshotRequest, n int, err error, start time.Time) error {
	st := d.cfg.Storage
	if err != nil {
		d.done(0)
		if first, ferr := st.FirstIndex(); errors.Is(err, raft.ErrSnapOutOfDate) || (ferr == nil && first > req.Index+1) {
			return nil
		}
		return fmt.Errorf("driver: snapshot at %d: %w", req.Index, err)
	}
	d.done(n)
	to := d.compactTo(req.Index, d.marginBytes(uint64(n)))
	if to > 0 {
		if err := st.Compact(to); err != nil && !errors.Is(err, raft.ErrCompacted) {
			return fmt.Errorf("driver: compacting to %d: %w", to, err)
		}
	}
	if err := st.TruncateOwn(req.OwnCommitted); err != nil {
		return fmt.Errorf("driver: dropping committed own operations: %w", err)
	}
	d.cfg.Logger.Info("snapshot", "index", req.Index, "bytes", n, "compacted_to", to, "took", time.Since(start).Round(time.Microsecond))
	return nil
}

// marginRatio and minMarginBytes: see marginBytes.
const (
	marginRatio    = 4
	minMarginBytes = 1 << 20
)

// marginBytes is the bytes of log kept behind a snapshot of n bytes:
// CompactMarginBytes, but no more than marginRatio times the snapshot (at
// least minMarginBytes), and never less than the snapshot. A follower
// further behind than that is better served by the snapshot than by the
// log: by the log its leader would read, send, and it would apply, several
// times the bytes of the state (a small state written over and over), or
// for a state larger than the margin, more than the state.
func (d *Driver) marginBytes(n uint64) uint64 {
	m := d.cfg.CompactMarginBytes
	m = min(m, max(marginRatio*n, min(minMarginBytes, m)))
	return max(m, n)
}

// markEntries records the bytes of the entries just persisted. Entries
// that replace a suffix of the log (a new leader's) drop the marks of what
// they replace.
func (d *Driver) markEntries(ents []*raftpb.Entry) {
	if len(ents) == 0 {
		return
	}
	if k, _ := slices.BinarySearchFunc(d.marks, ents[0].GetIndex(), byMarkIndex); k < len(d.marks) {
		// The replaced entries' bytes are no longer in the log. What the
		// dropped batches held before the first entry is not known either,
		// so count from the last mark kept: the log counts fewer bytes
		// than it holds, which keeps more of it, never less.
		d.marks = d.marks[:k]
		d.persisted = d.base
		if k > 0 {
			d.persisted = d.marks[k-1].persisted
		}
	}
	for _, e := range ents {
		d.persisted += uint64(len(e.GetData()))
	}
	d.marks = append(d.marks, mark{index: ents[len(ents)-1].GetIndex(), persisted: d.persisted})
}

// compactTo returns the index to compact the log to after a snapshot at
// index (0: none): CompactMargin entries behind it, or fewer when those
// hold more than marginBytes of data, as far as the marks of this run tell
// (after a restart only the entries' bound applies until the marks cover
// the margin). The marks are per Save, so the bytes' bound is as fine as
// the batches persisted.
func (d *Driver) compactTo(index, marginBytes uint64) uint64 {
	var to uint64
	if m := d.cfg.CompactMargin; index > m {
		to = index - m
	}
	// at: the bytes persisted up to index (the last mark at or before it).
	if i, _ := slices.BinarySearchFunc(d.marks, index+1, byMarkIndex); i > 0 {
		if at := d.marks[i-1].persisted; at-d.base > marginBytes {
			// The first mark after which the entries up to index fit.
			j, _ := slices.BinarySearchFunc(d.marks[:i], at-marginBytes, func(m mark, x uint64) int { return cmp.Compare(m.persisted, x) })
			if d.marks[j].index > to {
				to = d.marks[j].index
			}
		}
	}
	// Marks at or before the compaction point are no longer needed.
	if k, _ := slices.BinarySearchFunc(d.marks, to+1, byMarkIndex); k > 0 {
		d.base = d.marks[k-1].persisted
		d.marks = slices.Delete(d.marks, 0, k)
	}
	return to
}
