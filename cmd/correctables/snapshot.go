package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/internal/replica"
	"github.com/correctables/correctables/internal/state"
	"github.com/correctables/correctables/internal/storage"
)

// A snapshot file is snapshotMagic, the encoded raftpb.Snapshot, and the
// SHA-256 of the encoded snapshot.
var snapshotMagic = []byte("CRSNAP\x00\x01")

func newSnapshotCmd(cf *connFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Back up a running replica to a file, or restore a file into a new data directory",
	}
	cmd.AddCommand(newSnapshotSaveCmd(cf), newSnapshotRestoreCmd(), newSnapshotStatusCmd())
	return cmd
}

func newSnapshotSaveCmd(cf *connFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "save FILE",
		Short: "Save a snapshot of a running replica's committed state to FILE",
		Long: `save asks one replica for a snapshot of its committed state at its applied
index (the state machine, the committed version vector and the results it
keeps) and writes it to FILE, with a checksum. The replica is the first of
--endpoints that answers (give one endpoint to choose it; the leader's state
is the most recent). Operations not yet committed are not in the snapshot.
FILE is written under a temporary name and renamed when complete. A large
store may need a longer --command-timeout than the default 10s.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return snapshotSave(cmd, cf, args[0])
		},
	}
	cf.registerData(cmd)
	return cmd
}

func snapshotSave(cmd *cobra.Command, cf *connFlags, file string) error {
	eps, err := cf.resolve()
	if err != nil {
		return err
	}
	ctx, cancel := cf.commandContext(cmd)
	defer cancel()
	var errs []string
	for _, ep := range eps {
		cc, err := cf.dialEndpoint(ep)
		if err != nil {
			return err
		}
		b, first, err := fetchBackup(ctx, api.NewStoreClient(cc))
		cc.Close()
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %s", ep, rpcCause(err)))
			continue
		}
		if err := writeSnapshotFile(file, b); err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "saved snapshot of replica %d (%s) at index %d, term %d: %d bytes to %s\n",
			first.GetId(), ep, first.GetIndex(), first.GetTerm(), len(b), file)
		return nil
	}
	return fmt.Errorf("server: no replica gave a snapshot: %s", strings.Join(errs, "; "))
}

// fetchBackup reads one Backup stream and checks its size and checksum.
func fetchBackup(ctx context.Context, c api.StoreClient) ([]byte, *api.BackupChunk, error) {
	stream, err := c.Backup(ctx, &api.BackupRequest{})
	if err != nil {
		return nil, nil, err
	}
	var buf bytes.Buffer
	var first, last *api.BackupChunk
	for {
		ch, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, nil, err
		}
		if first == nil {
			first = ch
			if ch.GetSize() > 1<<40 {
				return nil, nil, fmt.Errorf("snapshot of %d bytes announced", ch.GetSize())
			}
			buf.Grow(int(ch.GetSize()))
		}
		buf.Write(ch.GetData())
		last = ch
	}
	if first == nil {
		return nil, nil, errors.New("empty backup stream")
	}
	b := buf.Bytes()
	if uint64(len(b)) != first.GetSize() {
		return nil, nil, fmt.Errorf("snapshot stream ended at %d of %d bytes", len(b), first.GetSize())
	}
	sum := sha256.Sum256(b)
	if !bytes.Equal(sum[:], last.GetSha256()) {
		return nil, nil, errors.New("snapshot checksum mismatch")
	}
	return b, first, nil
}

// writeSnapshotFile writes FILE.part, syncs it and renames it to FILE.
func writeSnapshotFile(file string, snap []byte) error {
	tmp := file + ".part"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(snap)
	_, err = f.Write(slices.Concat(snapshotMagic, snap, sum[:]))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, file)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", file, err)
	}
	return nil
}

// readSnapshotFile reads and checks a snapshot file and decodes its
// contents as a replica would.
func readSnapshotFile(file string) (*raftpb.Snapshot, replica.SnapshotInfo, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, replica.SnapshotInfo{}, err
	}
	bad := func(why string) error { return fmt.Errorf("%s is not a correctables snapshot: %s", file, why) }
	if len(b) < len(snapshotMagic)+sha256.Size || !bytes.HasPrefix(b, snapshotMagic) {
		return nil, replica.SnapshotInfo{}, bad("no snapshot header")
	}
	body := b[len(snapshotMagic) : len(b)-sha256.Size]
	sum := sha256.Sum256(body)
	if !bytes.Equal(sum[:], b[len(b)-sha256.Size:]) {
		return nil, replica.SnapshotInfo{}, bad("checksum mismatch (truncated or corrupted)")
	}
	snap := &raftpb.Snapshot{}
	if err := proto.Unmarshal(body, snap); err != nil {
		return nil, replica.SnapshotInfo{}, bad(err.Error())
	}
	info, err := replica.DecodeSnapshotInfo(snap, state.Limits{})
	if err != nil {
		return nil, replica.SnapshotInfo{}, bad(err.Error())
	}
	return snap, info, nil
}

func newSnapshotStatusCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "status FILE",
		Short: "Check a snapshot file and describe it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			snap, info, err := readSnapshotFile(args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "index %d, term %d, %d committed operations, %d keys, state hash %016x, voters %v\n",
				info.Index, snap.GetMetadata().GetTerm(), info.CommittedOps, info.Keys, info.StateHash,
				snap.GetMetadata().GetConfState().GetVoters())
			return nil
		},
	}
}

func newSnapshotRestoreCmd() *cobra.Command {
	var (
		dir, peers string
		id         uint64
	)
	cmd := &cobra.Command{
		Use:   "restore FILE --data-dir DIR",
		Short: "Restore a snapshot file into a new data directory for `serve`",
		Long: `restore writes a new replica data directory (--data-dir, which must not exist
or be empty) holding the snapshot in FILE, for a replica of a new cluster, as
etcdctl snapshot restore does. The new cluster's members are the ids of
--peers (the same ID=HOST:PORT list given to serve; only the ids are stored),
or just --id when --peers is not given: a single-replica cluster. Restore
each member of the new cluster from the same FILE with its own --id, then
start each with serve and the same --peers:

  correctables snapshot restore backup.snap --data-dir /data/r1 --id 1 \
      --peers 1=host1:7101,2=host2:7101,3=host3:7101
  correctables serve --id 1 --data /data/r1 --peers 1=host1:7101,2=host2:7101,3=host3:7101

The restored replicas start with the committed state of the snapshot (and
its raft index and term) and a configuration of exactly these members. The
old cluster's raft log and tentative operations are not carried over; its
record of removed ids is (restore refuses a removed id as a member). Do not
restore into the data directory of a replica of the running cluster: the
new cluster is a different one.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dir == "" {
				return errors.New("--data-dir is required: the new data directory")
			}
			if id == 0 {
				return errors.New("--id: want a positive replica id")
			}
			voters := []uint64{id}
			if peers != "" {
				m, err := parsePeers(peers)
				if err != nil {
					return err
				}
				voters = voters[:0]
				for k := range m {
					v, err := strconv.ParseUint(k, 10, 64)
					if err != nil || v == 0 {
						return fmt.Errorf("--peers: id %q is not a positive integer", k)
					}
					voters = append(voters, v)
				}
				slices.Sort(voters)
				if !slices.Contains(voters, id) {
					return fmt.Errorf("--peers has no address for this replica (--id %d)", id)
				}
			}
			snap, info, err := readSnapshotFile(args[0])
			if err != nil {
				return err
			}
			for _, v := range voters {
				if slices.Contains(info.Removed, v) {
					return fmt.Errorf("replica id %d was removed from the cluster the snapshot comes from, and is never a member again: choose other ids (removed: %v)", v, info.Removed)
				}
			}
			if err := restoreSnapshot(snap, dir, voters); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "restored snapshot at index %d (%d committed operations, %d keys, state hash %016x) into %s: replica %d of members %v\n",
				info.Index, info.CommittedOps, info.Keys, info.StateHash, dir, id, voters)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "data-dir", "", "the new data directory (must not exist, or be empty)")
	f.Uint64Var(&id, "id", 1, "the id of the replica this directory is for")
	f.StringVar(&peers, "peers", "", "the new cluster's members as ID=HOST:PORT, comma-separated, as for serve (default: --id alone)")
	return cmd
}

// restoreSnapshot creates dir with a store holding snap as its only
// snapshot, configured for voters, and a hard state committing it. On an
// error it removes what it created.
func restoreSnapshot(snap *raftpb.Snapshot, dir string, voters []uint64) error {
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		return fmt.Errorf("--data-dir %s exists and is not empty: restore writes a new data directory", dir)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("--data-dir: %w", err)
	}
	created := false
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		created = true
	}
	fail := func(err error) error {
		if created {
			os.RemoveAll(dir)
		} else {
			clearDir(dir)
		}
		return fmt.Errorf("restoring into %s: %w", dir, err)
	}
	md := snap.GetMetadata()
	out := raftpb.EnsureSnapshot(&raftpb.Snapshot{
		Data: snap.GetData(),
		Metadata: &raftpb.SnapshotMetadata{
			Index: proto.Uint64(md.GetIndex()), Term: proto.Uint64(md.GetTerm()),
			ConfState: &raftpb.ConfState{Voters: voters},
		},
	})
	st, err := storage.Open(storage.Options{Dir: dir})
	if err != nil {
		return fail(err)
	}
	hs := &raftpb.HardState{Term: proto.Uint64(md.GetTerm()), Commit: proto.Uint64(md.GetIndex())}
	if err := st.Save(hs, nil, out, nil); err != nil {
		st.Close()
		return fail(err)
	}
	if err := st.Close(); err != nil {
		return fail(err)
	}
	return nil
}

// clearDir empties a directory that was empty before.
func clearDir(dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		os.RemoveAll(filepath.Join(dir, e.Name()))
	}
}
