package replica

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/correctables/correctables/internal/state"
)

// SnapshotRequest asks the driver to store a snapshot of the committed state
// at Index and to compact the log before it. The driver may also drop its
// persisted own operations up to OwnCommitted: they are committed and in
// the snapshot.
type SnapshotRequest struct {
	Index        uint64
	ConfState    *raftpb.ConfState
	OwnCommitted uint64

	encode     func() ([]byte, error)
	once       sync.Once
	data       []byte
	err        error
	background bool
}

// InBackground tells the replica, before Advance, that the driver stores
// the snapshot after the Ready, on another goroutine: the replica asks for
// no other snapshot until SnapshotDone. Otherwise Advance counts the
// snapshot as done.
func (q *SnapshotRequest) InBackground() { q.background = true }

// Data returns the snapshot's encoding. The first call encodes it, from
// what the replica captured when it asked: a copy-on-write clone of the
// committed state (state.Clone) and copies of the rest. So it may run on
// another goroutine while the replica goes on (the driver's background
// snapshots): a large state's encoding and write then hold up no
// operation.
func (q *SnapshotRequest) Data() ([]byte, error) {
	q.once.Do(func() { q.data, q.err = q.encode() })
	return q.data, q.err
}

// snapshotVersion 2 added the clock reading; 3 keeps large results as
// digests; 4 adds the membership (peer addresses, removed ids) after the
// state; 5 the drain state (draining and drained ids) after that.
// Versions 2 to 4 still restore.
const snapshotVersion = 5

// maxKeptResult bounds the encoded size of a stable result kept whole for
// snapshots; a larger one (a put that replaced a large value) is kept as
// its SHA-256 digest, so that the results kept stay small whatever the
// values (up to 2*MaxTentative per origin).
const maxKeptResult = 4 << 10

// Least encoded sizes in a snapshot, which bound what a claimed count can
// be: an origin's results (origin, count), one result (seq, length, and
// the result's code, flags, value length, int, len and item count).
const (
	minOriginResultsBytes = 2
	minResultBytes        = 8
)

// snapshotData encodes the committed state at the applied index: the state
// machine, the committed version vector and count, and, when the replica
// tracks history (simulation), the committed ids and operations so that the
// checkers keep working across snapshots.
func (r *Replica) snapshotData() ([]byte, error) { return r.snapshotEncoder()() }

// snapshotEncoder captures what a snapshot holds, as of now, and returns
// the function that encodes it, which reads nothing of the replica: the
// committed state is a copy-on-write clone (O(1) in the keys), everything
// else is small and encoded here.
func (r *Replica) snapshotEncoder() func() ([]byte, error) {
	var st *state.State
	r.withCommitted(func(c *state.State) { st = c.Clone() })
	b := []byte{snapshotVersion}
	b = binary.AppendUvarint(b, r.applied)
	// Every timestamp issued here so far is at most this: a restart from
	// this snapshot must not issue smaller ones (the origin's operations
	// must stay in timestamp order, and stable times announced must hold).
	b = binary.AppendUvarint(b, r.clk.Peek())
	b = binary.AppendUvarint(b, uint64(r.committedCount()))
	b = appendVV(b, r.committedVV)
	if r.cfg.TrackHistory {
		b = binary.AppendUvarint(b, uint64(len(r.committed)))
		for _, id := range r.committed {
			q, _ := r.Op(id)
			b = AppendReq(b, q)
		}
	} else {
		b = binary.AppendUvarint(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(r.results)))
	for _, o := range sortedKeys(r.results) {
		rs := r.results[o]
		b = binary.AppendUvarint(b, o)
		b = binary.AppendUvarint(b, uint64(len(rs)))
		for _, e := range rs {
			b = binary.AppendUvarint(b, e.seq)
			if e.digest != nil {
				b = append(b, 1)
				b = append(b, e.digest...)
				continue
			}
			b = append(b, 0)
			enc := state.EncodeResult(e.res)
			b = binary.AppendUvarint(b, uint64(len(enc)))
			b = append(b, enc...)
		}
	}
	tail := r.appendDrain(r.appendMembership(nil))
	return func() ([]byte, error) {
		// One buffer of the final size: the state is appended in place,
		// not encoded apart and copied (a snapshot may be GiBs).
		n := st.BinarySize()
		out := make([]byte, 0, len(b)+binary.MaxVarintLen64+n+len(tail))
		out = append(out, b...)
		out = binary.AppendUvarint(out, uint64(n))
		out = st.AppendBinary(out)
		return append(out, tail...), nil
	}
}

// committedResult is the stable result of a committed operation, kept for
// the last MaxTentative operations of every origin: an origin waits for at
// most that many of its own (Submit refuses more), so when a snapshot
// overtakes an origin that lagged behind, the snapshot still carries the
// result of every operation the origin's clients wait for.
type committedResult struct {
	seq uint64
	res state.Result
	// digest, if set, replaces res: the SHA-256 of the encoded result,
	// which was over maxKeptResult.
	digest []byte
}

func (r *Replica) rememberResult(id OpID, res state.Result) {
	cr := committedResult{seq: id.Seq, res: res}
	if resultSize(res) > maxKeptResult {
		sum := sha256.Sum256(state.EncodeResult(res))
		cr = committedResult{seq: id.Seq, digest: sum[:]}
	}
	rs := append(r.results[id.Origin], cr)
	if len(rs) > 2*r.cfg.MaxTentative {
		// Keep the last MaxTentative, moved down in the same array: it
		// has room for MaxTentative more before it grows again.
		n := copy(rs, rs[len(rs)-r.cfg.MaxTentative:])
		clear(rs[n:])
		rs = rs[:n]
	}
	r.results[id.Origin] = rs
}

// resultSize bounds a result's encoded size from its variable parts.
func resultSize(res state.Result) int {
	n := 32 + len(res.Value)
	for _, it := range res.Items {
		n += 8 + len(it.Key) + len(it.Value)
	}
	return n
}

func (r *Replica) lookupResult(id OpID) (committedResult, bool) {
	rs := r.results[id.Origin]
	i, ok := slices.BinarySearchFunc(rs, id.Seq, func(e committedResult, s uint64) int {
		return int(int64(e.seq) - int64(s))
	})
	if !ok {
		return committedResult{}, false
	}
	return rs[i], true
}

// snapshotDue reports whether a snapshot is due: something was applied
// since the last one, and it is SnapshotEntries entries, SnapshotBytes
// bytes (a few huge entries) or SnapshotTicks ticks (a trickle of writes)
// old, so that restart and catch-up never replay more than that.
//
// The bytes bound is never below the size of the last snapshot: a
// snapshot writes the whole state, so taking one every SnapshotBytes of
// entries would cost, for a state many times that size, many times the
// writes themselves (a stream of 1 MiB values over 32 keys took one every
// 16 puts, each writing the 32 MiB state, and the storage's compactions
// of those stalled the replica). With the bound at the state's size a
// snapshot costs at most what was applied since the last, and a restart
// replays at most as many bytes of log as it reads of snapshot.
//
// Nor is it far above the state's size when the state is small: once the
// entries applied since the last snapshot are snapshotLogRatio times the
// state (at least minSnapshotBytes), a snapshot is due. The log behind
// it is what a restart replays and what a leader reads, sends and its
// follower applies to bring up a follower that missed it; for a small
// state written over and over (a thousand keys of 100-byte values, 100
// KiB, under a stream of updates) that was 16 MiB of log where a
// snapshot of 100 KiB and at most a MiB of log do.
func (r *Replica) snapshotDue() bool {
	if r.cfg.SnapshotEntries <= 0 || r.confState == nil || r.applied == r.snapIndex || r.snapPending {
		return false
	}
	return r.applied-r.snapIndex >= uint64(r.cfg.SnapshotEntries) || r.bytesSinceSnap >= r.snapshotBytesBound() ||
		r.ticks-r.snapTick >= r.cfg.SnapshotTicks || r.confSnap
}

// snapshotLogRatio and minSnapshotBytes: see snapshotDue.
const (
	snapshotLogRatio = 4
	minSnapshotBytes = 1 << 20
)

// snapshotBytesBound is the bytes of entries applied since the last
// snapshot at which the next is due: SnapshotBytes, but no more than
// snapshotLogRatio times the state's size (at least minSnapshotBytes), and
// never below that size. The state's size is the last snapshot's, taken or
// restored; before the first of a run (a new cluster), the state's encoded
// size measured whenever the bytes applied have doubled since the last
// measure, from minSnapshotBytes on: a walk of a state that came from
// those bytes, a few times per run.
func (r *Replica) snapshotBytesBound() int {
	bound, size := r.cfg.SnapshotBytes, r.lastSnapBytes
	floor := min(minSnapshotBytes, bound)
	if size == 0 && r.bytesSinceSnap < bound && r.bytesSinceSnap >= max(floor, 2*r.sizedAt) {
		r.stateBytes, r.sizedAt = r.st.BinarySize(), r.bytesSinceSnap
	}
	if size == 0 {
		size = r.stateBytes
	}
	if size > 0 {
		bound = min(bound, max(snapshotLogRatio*size, floor))
	}
	return max(bound, r.lastSnapBytes)
}

// maybeSnapshot asks for a snapshot every SnapshotEntries applied entries.
func (r *Replica) maybeSnapshot() error {
	if !r.snapshotDue() {
		return nil
	}
	r.bytesSinceSnap, r.snapTick, r.confSnap = 0, r.ticks, false
	r.stateBytes, r.sizedAt = 0, 0
	r.snapPending = true
	r.out.CreateSnapshot = &SnapshotRequest{
		Index: r.applied, ConfState: proto.Clone(r.confState).(*raftpb.ConfState),
		OwnCommitted: r.committedVV[r.cfg.ID], encode: r.snapshotEncoder(),
	}
	r.snapIndex = r.applied
	if !r.cfg.TrackHistory {
		r.trimCommitted()
	}
	return nil
}

// SnapshotDone tells the replica that the snapshot it asked for last, which
// the driver stores in the background (SnapshotRequest.InBackground), was
// stored (bytes, its encoded size) or not (bytes 0: failed or overtaken).
// It asks for no other snapshot until then.
func (r *Replica) SnapshotDone(bytes int) {
	r.snapPending = false
	if bytes > 0 {
		r.lastSnapBytes = bytes
	}
}

// trimCommitted forgets committed operations: the snapshot holds their
// effect, and a peer that lacks them gets them from the raft log or a
// snapshot, not from gossip.
func (r *Replica) trimCommitted() {
	r.committedBase += len(r.committed)
	r.committed = nil
	for o, ops := range r.log {
		cut := r.committedVV[o] - r.logBase[o]
		if cut > uint64(len(ops)) {
			cut = uint64(len(ops))
		}
		r.log[o] = slices.Clone(ops[cut:])
		r.logBase[o] += cut
	}
}

// restore replaces the committed state with a snapshot's (a follower that
// fell behind the leader's compacted log, or a restart). Tentative
// operations newer than the snapshot are kept and re-executed on it.
func (r *Replica) restore(snap *raftpb.Snapshot) error {
	sc, err := r.decodeSnapshot(snap)
	if err != nil {
		return err
	}
	r.clk.Observe(sc.clock)
	if sc.applied <= r.applied {
		return nil // already past it
	}
	keep := r.installSnapshot(sc, snap.GetMetadata().GetConfState())
	// The state's size, for the snapshots' bytes bound (snapshotDue),
	// until this replica takes a snapshot of its own.
	r.lastSnapBytes = len(snap.GetData())
	r.settle(snap.GetMetadata().GetTerm())
	if err := r.answerFromSnapshot(); err != nil {
		return err
	}
	r.reexec(keep)
	return nil
}

// snapshotContents is a decoded snapshot.
type snapshotContents struct {
	applied, clock, count uint64
	cvv                   VV
	committedOps          []*Req
	results               map[uint64][]committedResult
	st                    *state.State
	members               *snapshotMembers // nil before version 4
	// draining and drained: nil before version 5.
	draining, drained map[uint64]bool
}

// decodeSnapshot decodes and checks what snapshotData encoded.
func (r *Replica) decodeSnapshot(snap *raftpb.Snapshot) (*snapshotContents, error) {
	d := decoder{b: snap.GetData()}
	version := d.byte()
	if d.err == nil && (version < 2 || version > snapshotVersion) {
		return nil, fmt.Errorf("%w: snapshot version %d", ErrCorrupt, version)
	}
	applied := d.uvarint()
	clock := d.uvarint()
	count := d.uvarint()
	cvv := d.vv()
	n := d.count(minReqBytes)
	var committedOps []*Req
	for i := 0; i < n && d.err == nil; i++ {
		committedOps = append(committedOps, d.req())
	}
	// Byte lengths are bounded by the input only (d.count(1)): a snapshot
	// holds the whole state, any number of maximal values.
	results := map[uint64][]committedResult{}
	for no := d.count(minOriginResultsBytes); no > 0 && d.err == nil; no-- {
		o := d.uvarint()
		for k := d.count(minResultBytes); k > 0 && d.err == nil; k-- {
			seq := d.uvarint()
			if version >= 3 && d.byte() == 1 {
				if len(d.b) < sha256.Size {
					d.fail("short result digest")
					break
				}
				results[o] = append(results[o], committedResult{seq: seq, digest: bytes.Clone(d.b[:sha256.Size])})
				d.b = d.b[sha256.Size:]
				continue
			}
			n := d.count(1)
			if d.err != nil {
				break
			}
			res, err := state.DecodeResult(d.b[:n])
			if err != nil {
				return nil, fmt.Errorf("replica: snapshot result: %w", err)
			}
			d.b = d.b[n:]
			results[o] = append(results[o], committedResult{seq: seq, res: res})
		}
	}
	sz := d.count(1)
	if d.err != nil {
		return nil, fmt.Errorf("replica: snapshot: %w", d.err)
	}
	st := state.New(r.cfg.Limits)
	if err := st.UnmarshalBinary(d.b[:sz]); err != nil {
		return nil, fmt.Errorf("replica: snapshot state: %w", err)
	}
	var members *snapshotMembers
	var draining, drained map[uint64]bool
	if version >= 4 {
		d.b = d.b[sz:]
		members = d.members()
		if version >= 5 {
			draining, drained = d.drainSets()
		}
		if d.err == nil && len(d.b) != 0 {
			d.fail("bytes after the membership")
		}
		if d.err != nil {
			return nil, fmt.Errorf("replica: snapshot membership: %w", d.err)
		}
	}
	if applied != snap.GetMetadata().GetIndex() {
		return nil, fmt.Errorf("%w: snapshot data at %d, metadata at %d", ErrCorrupt, applied, snap.GetMetadata().GetIndex())
	}
	return &snapshotContents{applied: applied, clock: clock, count: count, cvv: cvv,
		committedOps: committedOps, results: results, st: st, members: members,
		draining: draining, drained: drained}, nil
}

// installSnapshot makes the snapshot's committed state this replica's and
// returns the tentative operations newer than it, to execute on top.
func (r *Replica) installSnapshot(sc *snapshotContents, cs *raftpb.ConfState) []executed {
	var keep []executed
	for _, e := range r.tentative {
		if !e.committed && e.req.ID.Seq > sc.cvv[e.req.ID.Origin] {
			keep = append(keep, executed{req: e.req})
		}
	}
	r.tentative, r.tentArr, r.ntent, r.latest = nil, nil, 0, nil
	r.keys.reset()
	r.st = sc.st
	r.applied = sc.applied
	r.snapIndex = sc.applied
	r.setConfState(proto.Clone(cs).(*raftpb.ConfState))
	r.installDrain(sc.draining, sc.drained)
	if sc.members != nil {
		r.addrs, r.removedIDs = sc.members.addrs, sc.members.removed
		// A member is never a removed id; both come from one snapshot
		// unless it was restored into a new cluster (snapshot restore)
		// whose configuration reuses ids the old one had removed. A
		// voter of the outgoing half of a joint configuration is not a
		// member in that sense: it is the one being removed (member
		// replace), and stays removed.
		for _, ids := range [][]uint64{cs.GetVoters(), cs.GetLearners(), cs.GetLearnersNext()} {
			for _, id := range ids {
				delete(r.removedIDs, id)
			}
		}
	}
	if r.cfg.TrackHistory && len(sc.committedOps) == int(sc.count) {
		r.committed = r.committed[:0]
		r.committedBase = 0
		for _, q := range sc.committedOps {
			r.committed = append(r.committed, q.ID)
			o := q.ID.Origin
			if q.ID.Seq == r.logBase[o]+uint64(len(r.log[o]))+1 {
				r.log[o] = append(r.log[o], q)
			}
		}
	} else {
		r.committed = nil
		r.committedBase = int(sc.count)
	}
	for _, o := range sc.cvv.origins() {
		r.committedVV[o] = sc.cvv[o]
		if r.vv[o] < sc.cvv[o] {
			r.vv[o] = sc.cvv[o]
		}
		// Forget what we cannot serve contiguously any more.
		end := r.logBase[o] + uint64(len(r.log[o]))
		if end < sc.cvv[o] {
			r.log[o] = nil
			r.logBase[o] = sc.cvv[o]
		}
	}
	r.results = sc.results
	for id := range r.pendingStrong {
		if id.Seq <= r.committedVV[id.Origin] {
			delete(r.pendingStrong, id)
		}
	}
	for _, m := range []map[OpID]int{r.arrived, r.proposedAt} {
		for id := range m {
			if id.Seq <= r.committedVV[id.Origin] {
				delete(m, id)
			}
		}
	}
	return keep
}

// answerFromSnapshot sends the stable view of every waiting operation the
// snapshot committed: it was committed while this replica lagged behind,
// and the snapshot carries its result.
func (r *Replica) answerFromSnapshot() error {
	for _, id := range sortedIDs(r.waiting) {
		if id.Seq > r.committedVV[id.Origin] {
			continue
		}
		w := r.waiting[id]
		delete(r.waiting, id)
		cr, ok := r.lookupResult(id)
		if !ok {
			return fmt.Errorf("replica: snapshot at %d lacks the result of waiting operation %v", r.applied, id)
		}
		res := cr.res
		if cr.digest != nil {
			// A large result kept as its digest: the tentative result is
			// the stable one if the digests match (the common case); if
			// not, the stable result is not known here.
			sum := sha256.Sum256(state.EncodeResult(w.tentative))
			if !bytes.Equal(sum[:], cr.digest) {
				r.emit(View{Client: w.client, Seq: w.seq, ID: id, Stable: true, Last: true, Lost: true})
				continue
			}
			res = w.tentative
		}
		r.emit(View{Client: w.client, Seq: w.seq, ID: id, Result: res, Stable: true,
			Confirmed: w.sent && res.Equal(w.tentative), Last: true})
	}
	return nil
}

func (r *Replica) committedCount() int { return r.committedBase + len(r.committed) }

// loadSnapshot restores from the storage's snapshot at start.
func (r *Replica) loadSnapshot() (uint64, error) {
	read := r.cfg.Storage.Snapshot
	if st, ok := r.cfg.Storage.(interface {
		ReadSnapshot() (*raftpb.Snapshot, error)
	}); ok {
		read = st.ReadSnapshot // not one that answers "later" (storage.Options.AsyncSnapshotReads)
	}
	snap, err := read()
	if err != nil && err != raft.ErrSnapshotTemporarilyUnavailable {
		return 0, fmt.Errorf("replica: reading snapshot: %w", err)
	}
	if snap == nil || raft.IsEmptySnap(snap) {
		return 0, nil
	}
	if err := r.restore(snap); err != nil {
		return 0, err
	}
	return r.applied, nil
}
