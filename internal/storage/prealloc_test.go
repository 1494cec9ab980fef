package storage

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/correctables/correctables/internal/replica"
)

// walSizes returns the sizes of the write-ahead log files in dir.
func walSizes(t *testing.T, dir string) []int64 {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []int64
	for _, de := range des {
		if strings.HasSuffix(de.Name(), ".log") {
			fi, err := de.Info()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, fi.Size())
		}
	}
	return out
}

// copyDir copies the files of src into a new directory, as they are on
// disk while the store that writes them runs: what a crash leaves of a
// store whose every write was synced.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	des, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		if de.IsDir() {
			continue
		}
		in, err := os.Open(filepath.Join(src, de.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.Create(filepath.Join(dst, de.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, in); err != nil {
			t.Fatal(err)
		}
		in.Close()
		if err := out.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// checkStore checks that s holds entries 1..n (entry i's data
// "entry i" and, every third, own operation i/3) with commit n.
func checkStore(t *testing.T, s *Store, n uint64, big map[uint64][]byte) {
	t.Helper()
	if last, err := s.LastIndex(); err != nil || last != n {
		t.Fatalf("LastIndex = %d, %v; want %d", last, err, n)
	}
	if hs, _ := s.HardState(); hs.GetCommit() != n {
		t.Fatalf("HardState = %v, want commit %d", hs, n)
	}
	ents, err := s.Entries(1, n+1, math.MaxUint64)
	if err != nil || uint64(len(ents)) != n {
		t.Fatalf("Entries = %d entries, %v; want %d", len(ents), err, n)
	}
	for _, e := range ents {
		want := []byte(fmt.Sprintf("entry %d", e.GetIndex()))
		if b, ok := big[e.GetIndex()]; ok {
			want = b
		}
		if string(e.GetData()) != string(want) {
			t.Fatalf("entry %d holds %d bytes %.20q, want %d bytes", e.GetIndex(), len(e.GetData()), e.GetData(), len(want))
		}
	}
	if ops, err := s.OwnOps(); err != nil || uint64(len(ops)) != n/3 {
		t.Fatalf("OwnOps = %d ops, %v; want %d", len(ops), err, n/3)
	}
}

// saveRange saves entries lo..hi one synced Save each, as a replica's
// rounds do.
func saveRange(t *testing.T, s *Store, lo, hi uint64, big map[uint64][]byte) {
	t.Helper()
	for i := lo; i <= hi; i++ {
		e := ent(i, 1, fmt.Sprintf("entry %d", i))
		if b, ok := big[i]; ok {
			e.Data = b
		}
		var own []*replica.Req
		if i%3 == 0 {
			own = []*replica.Req{req(i/3, "v")}
		}
		if err := s.Save(&raftpb.HardState{Term: proto.Uint64(1), Commit: proto.Uint64(i)}, []*raftpb.Entry{e}, nil, own); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWALPreallocated: on a real file system the log Pebble writes has its
// size set before the first write (preallocFS), and the zeros after its
// last record read as the log's end: a crash copy of a running store, and
// a log written past the preallocated size, recover every synced write.
func TestWALPreallocated(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("preallocation uses fallocate (Linux)")
	}
	const prealloc = 4 << 20
	opts := Options{Dir: t.TempDir(), Logger: quietLogger(), WALPreallocBytes: prealloc}
	s := mustOpen(t, opts)
	defer func() { s.Close() }()
	sizes := walSizes(t, opts.Dir)
	if len(sizes) == 0 {
		t.Fatal("no log file after Open")
	}
	for _, n := range sizes {
		if n < prealloc {
			t.Fatalf("log sizes %v after Open, want each at least %d (fallocate unsupported here?)", sizes, prealloc)
		}
	}

	// Synced writes within the preallocated size, then a crash: the copy
	// holds every record followed by zeros.
	saveRange(t, s, 1, 300, nil)
	if got := walSizes(t, opts.Dir); got[len(got)-1] != prealloc {
		t.Fatalf("log sizes %v after 300 small writes, want the last %d (writes within the size)", got, prealloc)
	}
	crashed := Options{Dir: copyDir(t, opts.Dir), Logger: quietLogger(), WALPreallocBytes: prealloc}
	r := mustOpen(t, crashed)
	checkStore(t, r, 300, nil)

	// The recovered store goes on writing, past the preallocated size
	// (five entries of a MiB), and reopens with all of it.
	big := map[uint64][]byte{}
	for i := uint64(301); i <= 305; i++ {
		big[i] = []byte(strings.Repeat(fmt.Sprint(i%10), 1<<20))
	}
	saveRange(t, r, 301, 330, big)
	again := Options{Dir: copyDir(t, crashed.Dir), Logger: quietLogger(), WALPreallocBytes: prealloc}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r = mustOpen(t, again)
	checkStore(t, r, 330, big)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r = mustOpen(t, crashed) // closed cleanly this time
	checkStore(t, r, 330, big)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestWALPreallocOff: a negative WALPreallocBytes leaves the log as Pebble
// makes it.
func TestWALPreallocOff(t *testing.T) {
	opts := Options{Dir: t.TempDir(), Logger: quietLogger(), WALPreallocBytes: -1}
	s := mustOpen(t, opts)
	defer s.Close()
	saveRange(t, s, 1, 30, nil)
	for _, n := range walSizes(t, opts.Dir) {
		if n >= 1<<20 {
			t.Fatalf("log of %d bytes with preallocation off", n)
		}
	}
}
