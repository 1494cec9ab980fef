package server

import (
	"crypto/sha256"
	"fmt"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/internal/replica"
)

// backupChunk is the size of one BackupChunk's data.
const backupChunk = 1 << 20

// Backup implements api.StoreServer: it takes a snapshot of the replica's
// committed state on the loop (a consistent cut at the applied index, after a
// strong read, so that it holds every write acknowledged final before),
// encodes it off the loop and streams it in chunks; the last carries its
// SHA-256.
func (s *Server) Backup(_ *api.BackupRequest, stream grpc.ServerStreamingServer[api.BackupChunk]) error {
	ctx := stream.Context()
	// A strong read first, answered once this replica has applied up to
	// the leader's commit index at that moment: the snapshot then holds
	// every write whose final view any client had before the save began,
	// even on a replica that lags.
	barrier := &api.InvokeRequest{Op: &api.Op{Kind: api.Kind_KIND_GET, Key: backupBarrierKey}, Final: true, Strong: true}
	if err := s.invoke(ctx, barrier, func(*api.ViewReply) error { return nil }); err != nil {
		return toStatus(err)
	}
	// Captured on the loop, encoded off it (a large state's encoding
	// would hold up every operation of the replica meanwhile).
	var encode func() (*raftpb.Snapshot, error)
	var serr error
	if err := s.exec(ctx, func(r *replica.Replica) { encode, serr = r.BackupEncoder() }); err != nil {
		return toStatus(err)
	}
	if serr != nil {
		return status.Error(codes.FailedPrecondition, serr.Error())
	}
	snap, err := encode()
	if err != nil {
		return toStatus(fmt.Errorf("server: backup: %w", err))
	}
	b, err := proto.Marshal(snap)
	if err != nil {
		return toStatus(fmt.Errorf("server: backup: %w", err))
	}
	sum := sha256.Sum256(b)
	first := true
	for off := 0; ; off += backupChunk {
		end := min(off+backupChunk, len(b))
		c := &api.BackupChunk{Data: b[off:end]}
		if first {
			c.Id, c.Index, c.Term, c.Size = s.cfg.ID, snap.GetMetadata().GetIndex(), snap.GetMetadata().GetTerm(), uint64(len(b))
			first = false
		}
		if end == len(b) {
			c.Sha256 = sum[:]
		}
		if err := stream.Send(c); err != nil {
			return err
		}
		if end == len(b) {
			return nil
		}
	}
}

// backupBarrierKey is the key Backup's strong read reads; any key would do.
const backupBarrierKey = "correctables/backup-barrier"
