package storage

import (
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// keyClusterID holds the id of the cluster the replica belongs to (8 bytes,
// big endian), once it has one (see SetClusterID). It is outside the raft
// log and the snapshot, so installing a snapshot keeps it.
var keyClusterID = []byte{'c'}

// SetClusterID records, durably, the id of the cluster this replica
// belongs to. The server sets it once: when the cluster bootstraps, or when
// a joining replica learns it from a member; it never changes afterwards.
func (s *Store) SetClusterID(id uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	if err := s.db.Set(keyClusterID, binary.BigEndian.AppendUint64(nil, id), pebble.Sync); err != nil {
		return fmt.Errorf("storage: record the cluster id: %w", err)
	}
	return nil
}

// ClusterID returns what SetClusterID recorded, and whether it was called
// (a data directory written before cluster ids existed has none).
func (s *Store) ClusterID() (id uint64, ok bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return 0, false, s.err
	}
	v, ok, err := s.get(keyClusterID)
	if err != nil || !ok {
		return 0, false, err
	}
	if len(v) != 8 {
		return 0, false, fmt.Errorf("%w: cluster id of %d bytes", ErrCorrupt, len(v))
	}
	return binary.BigEndian.Uint64(v), true, nil
}
