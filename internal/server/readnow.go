package server

import (
	"context"
	"runtime"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/internal/replica"
)

// Weak reads off the loop.
//
// A weak read executes at once on the replica's tentative state and sends
// nothing (Creek §4.4). Through the loop it would wait for the round in
// progress to end, often for that round's synced write (the loop takes no
// input meanwhile), and then for a round of its own, with a synced write
// of its own when that round persists anything: a read that arrives
// during a write would wait for two. So the request's own goroutine runs
// it (readNow) while the loop waits for the disk, or while the loop waits
// for input. The loop owns the replica as before, and shows it by holding
// repMu for all of a round except the synced write (loopStorage.Save) and
// its wait for input; a reader takes repMu only when it is free, for its
// execution only, and otherwise goes through the loop.
//
// The view shows only what is durable, as every view the loop delivers:
// the replica serves the read only when every operation of its state has
// been handed out in a Ready to persist (replica.ReadNow), and the reader
// delivers the view once the write in progress, if any, has synced (the
// write of that Ready). A read the replica cannot serve so (an operation
// submitted since the last Ready, a min_vv not covered yet) goes to the
// loop as before.

// lockRep and unlockRep take and release the replica for the loop.
func (s *Server) lockRep() {
	s.repMu.Lock()
	s.repLocked = true
	s.loopHolds.Store(true)
}

func (s *Server) unlockRep() {
	s.repLocked = false
	s.loopHolds.Store(false)
	s.repMu.Unlock()
}

// loopStorage is the storage the loop's driver writes through: it lets the
// replica go while a Ready is written and synced, for readNow.
type loopStorage struct {
	Storage
	s *Server
}

// Save implements driver.Storage: the replica is free during the write;
// readers that read it meanwhile wait for saveDone, closed once the write
// has synced (never if it failed: the loop then stops, and they see done).
func (w loopStorage) Save(hs *raftpb.HardState, ents []*raftpb.Entry, snap *raftpb.Snapshot, own []*replica.Req) error {
	s := w.s
	done := make(chan struct{})
	s.saveDone = done
	s.unlockRep()
	err := w.Storage.Save(hs, ents, snap, own)
	s.lockRep()
	s.saveDone = nil
	if err == nil {
		close(done)
	}
	return err
}

// tryRep takes the replica off the loop if it is free, and never waits for
// it: a loop in a round goes on unhindered and takes the request in it.
// Callers queued on the mutex would make the loop, when it wants the
// replica back, wait for them in turn, each to be scheduled first (a mutex
// waited on for over a millisecond is handed to its waiters in order), and
// the loop is what every operation of the replica waits for. When another
// reader holds it (for its execution, a few microseconds), the caller tries
// again a few times, yielding in between, instead of going to a loop that
// may be waiting for the disk: two weak reads that arrived together during
// a long write would otherwise see one of them wait for that write, and
// for a round of its own. The caller unlocks repMu.
func (s *Server) tryRep() bool {
	for range tryRepYields {
		if s.repMu.TryLock() {
			return true
		}
		if s.loopHolds.Load() {
			return false // the loop's round: it takes the request
		}
		runtime.Gosched()
	}
	return s.repMu.TryLock()
}

// tryRepYields bounds the tries of tryRep while other readers hold repMu.
const tryRepYields = 64

// readNow runs a weak read that asks for its preliminary view only on the
// replica, off the loop, if the replica can serve it so (see above): ok
// reports it did, and then after, if not nil, is what the view waits for
// before it may leave (the synced write in progress). A refusal (err) is
// the one the loop would have given.
func (s *Server) readNow(cr replica.ClientRequest, minVV replica.VV) (o outcome, after <-chan struct{}, ok bool, err error) {
	if !s.tryRep() {
		return outcome{}, nil, false, nil
	}
	defer s.repMu.Unlock()
	if s.repClosed {
		return outcome{}, nil, false, ErrStopped
	}
	v, ok, err := s.rep.ReadNow(cr, minVV)
	if err != nil || !ok {
		return outcome{}, nil, false, err
	}
	s.readsNow.Add(1)
	s.cfg.Metrics.observeReadNow()
	return outcome{v: v}, s.saveDone, true, nil
}

// awaitDurable waits for after (the synced write a view read off the loop
// depends on), the loop's end or ctx.
func (s *Server) awaitDurable(ctx context.Context, after <-chan struct{}) error {
	if after == nil {
		return nil
	}
	select {
	case <-after:
		return nil
	case <-s.done:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
}

// statusNow answers a Status off the loop, as readNow runs a read: if the
// replica is free (the loop waits for a synced write or for input) and
// covers minVV (nil: nothing asked), the reply the loop would give now;
// else nil, and the loop answers. A Status shows what the replica holds,
// durable or not, as the loop's reply always has: a quorum write asks
// its majority whether they have received it (client.InvokeQuorum), and
// their answer need not wait for their writes in progress.
func (s *Server) statusNow(minVV replica.VV) *api.StatusReply {
	if !s.tryRep() {
		return nil
	}
	defer s.repMu.Unlock()
	if s.repClosed || (minVV != nil && !s.rep.Covers(minVV)) {
		return nil
	}
	s.statusesNow.Add(1)
	return s.statusReply()
}
