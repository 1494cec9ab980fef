package storage

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/correctables/correctables/internal/replica"
)

// TestWriteError: when the disk fails under a Save (the WAL write, or its
// fsync), Save returns an error, never a silent success; the Store then
// refuses every call (fail-stop), and reopening recovers exactly the Saves
// that returned nil.
func TestWriteError(t *testing.T) {
	for _, tc := range []struct {
		name  string
		kinds []errorfs.OpKind
	}{
		{"write", []errorfs.OpKind{errorfs.OpFileWrite, errorfs.OpFileWriteAt}},
		{"sync", []errorfs.OpKind{errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewCrashableMem()
			inject := &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
				for _, k := range tc.kinds {
					if op.Kind == k && strings.HasSuffix(op.Path, ".log") { // the WAL
						return errorfs.ErrInjected
					}
				}
				return nil
			})}
			s := mustOpen(t, memOptions(errorfs.Wrap(mem, inject)))
			hs := &raftpb.HardState{Term: proto.Uint64(1), Commit: proto.Uint64(1)}
			for i := uint64(1); i <= 5; i++ {
				if err := s.Save(hs, []*raftpb.Entry{ent(i, 1, "ok")}, nil, []*replica.Req{req(i, "ok")}); err != nil {
					t.Fatal(err)
				}
			}

			inject.On()
			err := s.Save(&raftpb.HardState{Term: proto.Uint64(2), Commit: proto.Uint64(6)},
				[]*raftpb.Entry{ent(6, 2, "lost")}, nil, []*replica.Req{req(6, "lost")})
			if !errors.Is(err, ErrFailed) {
				t.Fatalf("Save on a failing disk: %v, want ErrFailed", err)
			}
			t.Logf("failed Save: %v", err)
			inject.Off()
			// Fail-stop: the disk works again, but the Store cannot know what
			// reached it, so it refuses reads and writes alike.
			if err := s.Save(nil, []*raftpb.Entry{ent(6, 2, "again")}, nil, nil); !errors.Is(err, ErrFailed) {
				t.Fatalf("Save after a failure: %v, want ErrFailed", err)
			}
			if _, err := s.LastIndex(); !errors.Is(err, ErrFailed) {
				t.Fatalf("LastIndex after a failure: %v, want ErrFailed", err)
			}
			if _, err := s.Entries(1, 2, math.MaxUint64); !errors.Is(err, ErrFailed) {
				t.Fatalf("Entries after a failure: %v, want ErrFailed", err)
			}

			// The process dies; what was synced is all that is left.
			crashed := mem.CrashClone(vfs.CrashCloneCfg{})
			closed := make(chan error, 1)
			go func() { closed <- s.Close() }()
			select {
			case err := <-closed: // an error here is expected: Pebble's WAL is broken
				t.Logf("Close: %v", err)
			case <-time.After(10 * time.Second):
				t.Fatal("Close hangs after a write failure")
			}

			r := mustOpen(t, memOptions(crashed))
			defer r.Close()
			last, err := r.LastIndex()
			if err != nil || last != 5 {
				t.Fatalf("LastIndex after recovery = %d, %v; want 5", last, err)
			}
			if hs, _ := r.HardState(); hs.GetTerm() != 1 {
				t.Fatalf("HardState after recovery = %v, want term 1", hs)
			}
			if ops, _ := r.OwnOps(); len(ops) != 5 {
				t.Fatalf("OwnOps after recovery: %d, want 5", len(ops))
			}
			// And it works: the lost Save can be made again.
			if err := r.Save(nil, []*raftpb.Entry{ent(6, 2, "again")}, nil, nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}
