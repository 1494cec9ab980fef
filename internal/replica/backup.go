package replica

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/correctables/correctables/internal/state"
)

// Backup returns a raft snapshot of the committed state at the applied
// index, in the format the replica itself snapshots in: the state machine,
// the committed version vector and count, the kept results and the clock.
// Its metadata carries the applied index, that entry's term and the current
// configuration. A replica started on a storage holding only this snapshot
// (see RestoreInfo) has exactly the committed state of this one at that
// index; tentative operations are not part of it.
func (r *Replica) Backup() (*raftpb.Snapshot, error) {
	encode, err := r.BackupEncoder()
	if err != nil {
		return nil, err
	}
	return encode()
}

// BackupEncoder is Backup in two steps: it captures the backup now (a
// copy-on-write clone of the committed state, as a snapshot does) and
// returns the function that encodes it, which reads nothing of the replica
// and may run on another goroutine: a large state's backup then holds up
// no operation.
func (r *Replica) BackupEncoder() (func() (*raftpb.Snapshot, error), error) {
	if r.applied == 0 || r.confState == nil {
		return nil, errors.New("replica: backup: nothing applied yet")
	}
	term, err := r.cfg.Storage.Term(r.applied)
	if err != nil {
		return nil, fmt.Errorf("replica: backup: term of applied index %d: %w", r.applied, err)
	}
	encode, drain := r.snapshotEncoder(), r.appendDrain(nil)
	md := &raftpb.SnapshotMetadata{
		Index:     proto.Uint64(r.applied),
		Term:      proto.Uint64(term),
		ConfState: proto.Clone(r.confState).(*raftpb.ConfState),
	}
	return func() (*raftpb.Snapshot, error) {
		data, err := encode()
		if err != nil {
			return nil, err
		}
		return raftpb.EnsureSnapshot(&raftpb.Snapshot{Data: withoutDrain(data, drain), Metadata: md}), nil
	}, nil
}

// SnapshotInfo describes a decoded snapshot.
type SnapshotInfo struct {
	// Index is the raft index the snapshot is at.
	Index uint64
	// CommittedOps is the number of operations committed up to Index.
	CommittedOps uint64
	// Keys is the number of plain keys plus queue items in the state.
	Keys int
	// VV is the committed version vector: per origin replica, how many of
	// its operations are committed.
	VV VV
	// StateHash is the state machine's content hash (state.State.Hash).
	StateHash uint64
	// Removed are the ids removed from the cluster the snapshot was taken
	// in; a replica never accepts them as members again.
	Removed []uint64
}

// DecodeSnapshotInfo decodes and checks a snapshot's data as a replica
// restoring it would, with the given limits (zero: the defaults), and
// describes it.
func DecodeSnapshotInfo(snap *raftpb.Snapshot, limits state.Limits) (SnapshotInfo, error) {
	limits.EnsureDefaults()
	r := &Replica{cfg: Config{Limits: limits}}
	sc, err := r.decodeSnapshot(snap)
	if err != nil {
		return SnapshotInfo{}, err
	}
	info := SnapshotInfo{Index: sc.applied, CommittedOps: sc.count, Keys: sc.st.Len(), VV: sc.cvv, StateHash: sc.st.Hash()}
	if sc.members != nil {
		info.Removed = slices.Sorted(maps.Keys(sc.members.removed))
	}
	return info, nil
}
