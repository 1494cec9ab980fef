package storage

import (
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// The cluster id survives a restart and the installation of a snapshot
// (which replaces the log).
func TestClusterIDPersists(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.ClusterID(); err != nil || ok {
		t.Fatalf("new store: cluster id present=%v err=%v, want none", ok, err)
	}
	const id = 0x8badf00ddeadbeef
	if err := s.SetClusterID(id); err != nil {
		t.Fatal(err)
	}
	snap := raftpb.EnsureSnapshot(&raftpb.Snapshot{Data: []byte("state"), Metadata: &raftpb.SnapshotMetadata{
		Index: proto.Uint64(10), Term: proto.Uint64(2), ConfState: &raftpb.ConfState{Voters: []uint64{1}},
	}})
	if err := s.Save(&raftpb.HardState{Term: proto.Uint64(2), Commit: proto.Uint64(10)}, nil, snap, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, ok, err := s.ClusterID()
	if err != nil || !ok || got != id {
		t.Fatalf("after snapshot and reopen: cluster id %x present=%v err=%v, want %x", got, ok, err, uint64(id))
	}
}
