package storage

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// keyRemoved holds why the replica was removed from the cluster, once it
// was (see MarkRemoved).
var keyRemoved = []byte{prefixRemoved}

// MarkRemoved records, durably, that the replica was removed from the
// cluster and why. A removed replica never serves again, even if its log
// does not hold its removal (another member told it, or it stopped before
// it applied the change); its data stay for the operator to inspect.
func (s *Store) MarkRemoved(why string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	if err := s.db.Set(keyRemoved, []byte(why), pebble.Sync); err != nil {
		return fmt.Errorf("storage: record the removal: %w", err)
	}
	return nil
}

// Removed returns what MarkRemoved recorded, and whether it was called.
func (s *Store) Removed() (why string, removed bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return "", false, s.err
	}
	v, ok, err := s.get(keyRemoved)
	if err != nil || !ok {
		return "", false, err
	}
	return string(v), true, nil
}
