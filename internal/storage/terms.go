package storage

import (
	"errors"
	"fmt"
	"sort"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
)

// The terms of the log, kept in memory as runs. Raft asks for the term of
// an entry before every append it sends (the term of the entry before
// them); for a follower behind the tail cache that read the whole entry
// from Pebble and decoded it, data included: with 256 KiB entries a leader
// bringing a restarted follower up spent two of its loop's seconds so
// (profile: Store.term, proto.Unmarshal), sent no heartbeat meanwhile and
// was deposed. A raft log's terms never decrease, so a few runs describe
// it, found at Open by binary search and kept by Save and Compact.

// termRun: the entries from first on, up to the next run's first, have
// term.
type termRun struct{ first, term uint64 }

// runTerm returns the term of entry i from s.runs (ok false if they do not
// cover it). s.mu is held.
func (s *Store) runTerm(i uint64) (uint64, bool) {
	k := sort.Search(len(s.runs), func(k int) bool { return s.runs[k].first > i }) - 1
	if k < 0 {
		return 0, false
	}
	return s.runs[k].term, true
}

// appendRuns follows entries just written (contiguous, the new end of the
// log): a conflicting suffix they replaced goes. s.mu is held.
func (s *Store) appendRuns(ents []*raftpb.Entry) {
	if len(ents) == 0 {
		return
	}
	e0 := ents[0].GetIndex()
	k := sort.Search(len(s.runs), func(k int) bool { return s.runs[k].first >= e0 })
	s.runs = s.runs[:k]
	for _, e := range ents {
		if n := len(s.runs); n == 0 || s.runs[n-1].term != e.GetTerm() {
			s.runs = append(s.runs, termRun{first: e.GetIndex(), term: e.GetTerm()})
		}
	}
}

// compactRuns drops the runs wholly at or below index. s.mu is held.
func (s *Store) compactRuns(index uint64) {
	drop := 0
	for drop+1 < len(s.runs) && s.runs[drop+1].first <= index+1 {
		drop++
	}
	s.runs = s.runs[drop:]
}

// loadRuns finds the runs of the log (trunc.Index, last] by binary search,
// reading the terms of a few entries. s.mu is held (or s not shared yet).
func (s *Store) loadRuns() error {
	s.runs = nil
	for lo := s.trunc.Index + 1; lo <= s.last; {
		t, err := s.readTerm(lo)
		if err != nil {
			return err
		}
		// The last index in [lo, s.last] of term t.
		a, b := lo, s.last
		for a < b {
			mid := a + (b-a+1)/2
			tm, err := s.readTerm(mid)
			if err != nil {
				return err
			}
			if tm == t {
				a = mid
			} else {
				b = mid - 1
			}
		}
		s.runs = append(s.runs, termRun{first: lo, term: t})
		lo = a + 1
	}
	return nil
}

// readTerm reads the term of entry i from Pebble, decoding that field
// only.
func (s *Store) readTerm(i uint64) (uint64, error) {
	v, closer, err := s.db.Get(logKey(i))
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, fmt.Errorf("%w: entry %d missing from log (%d, %d]", ErrCorrupt, i, s.trunc.Index, s.last)
	}
	if err != nil {
		return 0, fmt.Errorf("storage: get entry %d: %w", i, err)
	}
	defer closer.Close()
	t, err := entryTerm(v)
	if err != nil {
		return 0, fmt.Errorf("%w: entry %d: %w", ErrCorrupt, i, err)
	}
	return t, nil
}

// entryTerm returns the Term field (2) of an encoded raftpb.Entry without
// decoding the rest (its data is skipped, not copied).
func entryTerm(b []byte) (uint64, error) {
	var term uint64
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, protowire.ParseError(n)
		}
		b = b[n:]
		if num == 2 && typ == protowire.VarintType {
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return 0, protowire.ParseError(n)
			}
			term, b = v, b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return 0, protowire.ParseError(n)
		}
		b = b[n:]
	}
	return term, nil
}
