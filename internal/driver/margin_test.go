package driver

import (
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

// entries returns entries lo..hi, each with size bytes of data.
func entries(lo, hi uint64, size int) []*raftpb.Entry {
	data := make([]byte, size)
	var ents []*raftpb.Entry
	for i := lo; i <= hi; i++ {
		ents = append(ents, &raftpb.Entry{Index: &i, Data: data}) // i is per iteration
	}
	return ents
}

func newMarginDriver(t *testing.T, margin, marginBytes uint64) *Driver {
	t.Helper()
	d := &Driver{cfg: Config{CompactMargin: margin, CompactMarginBytes: marginBytes}}
	return d
}

// The log behind a snapshot keeps CompactMargin entries when they are
// small, and at most CompactMarginBytes of data when they are large: a
// stream of 1 MiB values kept 1,000 MiB of log per replica (three times
// that on disk with the storage's own copies) with the entries' bound
// alone.
func TestCompactMarginBoundedByBytes(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name       string
		size       int
		perSave    uint64
		snapAt     uint64
		wantTo     uint64
		marginByte uint64
	}{
		{"small entries: the entries' bound", 100, 10, 5000, 4000, 64 * mib},
		{"1 MiB entries: the bytes' bound", mib, 1, 2000, 2000 - 64, 64 * mib},
		{"1 MiB entries in batches of 4", mib, 4, 2000, 2000 - 64, 64 * mib},
		{"under the entries' margin: nothing", 100, 10, 900, 0, 64 * mib},
		{"large entries, short log", mib, 1, 50, 0, 64 * mib},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newMarginDriver(t, 1000, tc.marginByte)
			for lo := uint64(1); lo <= tc.snapAt; lo += tc.perSave {
				d.markEntries(entries(lo, min(lo+tc.perSave-1, tc.snapAt), tc.size))
			}
			if got := d.compactTo(tc.snapAt, tc.marginByte); got != tc.wantTo {
				t.Fatalf("compactTo(%d) = %d, want %d", tc.snapAt, got, tc.wantTo)
			}
			for _, m := range d.marks {
				if m.index <= tc.wantTo {
					t.Fatalf("mark at %d kept behind the compaction point %d", m.index, tc.wantTo)
				}
			}
		})
	}
}

// Entries persisted after the snapshot's index do not count against the
// margin, entries a new leader replaced do not count at all, and a driver
// that has not seen the entries (a restart) falls back to the entries'
// bound.
func TestCompactMarginMarks(t *testing.T) {
	const mib = 1 << 20
	d := newMarginDriver(t, 1000, 64*mib)
	for i := uint64(1); i <= 2000; i++ {
		d.markEntries(entries(i, i, mib))
	}
	// A new leader replaced 1990..2000 with small entries, up to 2100.
	d.markEntries(entries(1990, 2100, 100))
	// Up to 2000: 1,989 MiB of the old leader's entries, and the new
	// leader's, whose one mark is past 2000.
	if got, want := d.compactTo(2000, 64*mib), uint64(1989-64); got != want {
		t.Fatalf("compactTo(2000) = %d, want %d", got, want)
	}
	// A deposed leader's uncommitted 1 MiB entries, replaced by small
	// ones: their bytes leave the count, so the next snapshot keeps about
	// 64 MiB of log, not none.
	d2 := newMarginDriver(t, 1000, 64*mib)
	for i := uint64(1); i <= 2100; i++ {
		d2.markEntries(entries(i, i, mib))
	}
	d2.markEntries(entries(2001, 2100, 100))
	if got := d2.compactTo(2100, 64*mib); got < 2000-64 || got > 2000-60 {
		t.Fatalf("after 100 MiB of entries were replaced by small ones: compactTo(2100) = %d, want about %d", got, 2000-64)
	}

	restarted := newMarginDriver(t, 1000, 64*mib)
	if got, want := restarted.compactTo(2000, 64*mib), uint64(1000); got != want {
		t.Fatalf("after a restart: compactTo(2000) = %d, want %d", got, want)
	}
	// Once the restarted driver has persisted more than the margin, the
	// bytes' bound applies again.
	for i := uint64(2001); i <= 2200; i++ {
		restarted.markEntries(entries(i, i, mib))
	}
	if got, want := restarted.compactTo(2200, 64*mib), uint64(2200-64); got != want {
		t.Fatalf("after a restart and 200 MiB: compactTo(2200) = %d, want %d", got, want)
	}
	// The next snapshot compacts no further than the bytes require.
	for i := uint64(2201); i <= 2230; i++ {
		restarted.markEntries(entries(i, i, mib))
	}
	if got, want := restarted.compactTo(2230, 64*mib), uint64(2230-64); got != want {
		t.Fatalf("30 MiB later: compactTo(2230) = %d, want %d", got, want)
	}
	// With a wider margin the 64 MiB kept fit: only the entries' bound,
	// behind the log's start (the storage answers ErrCompacted).
	if got, want := restarted.compactTo(2230, 100*mib), uint64(2230-1000); got != want {
		t.Fatalf("with a 100 MiB snapshot after compacting to 2166: compactTo(2230) = %d, want %d", got, want)
	}

	// A state larger than the margin widens it: 100 MiB behind.
	wide := newMarginDriver(t, 1000, 64*mib)
	for i := uint64(1); i <= 300; i++ {
		wide.markEntries(entries(i, i, mib))
	}
	if got, want := wide.compactTo(300, 100*mib), uint64(300-100); got != want {
		t.Fatalf("with a 100 MiB snapshot: compactTo(300) = %d, want %d", got, want)
	}
}

// The margin's bytes follow the snapshot's size: a few times it for a
// small state (at least a MiB), CompactMarginBytes for a larger one, and
// never less than the state itself.
func TestMarginBytesFollowsTheSnapshot(t *testing.T) {
	const kib, mib = 1 << 10, 1 << 20
	for _, tc := range []struct {
		configured, snap, want uint64
	}{
		{64 * mib, 0, 1 * mib},
		{64 * mib, 100 * kib, 1 * mib},
		{64 * mib, 1 * mib, 4 * mib},
		{64 * mib, 10 * mib, 40 * mib},
		{64 * mib, 30 * mib, 64 * mib},
		{64 * mib, 100 * mib, 100 * mib},
		{512 * kib, 0, 512 * kib}, // a margin configured below the floor stays
		{512 * kib, 100 * kib, 512 * kib},
		{512 * kib, 1 * mib, 1 * mib},
	} {
		d := newMarginDriver(t, 1000, tc.configured)
		if got := d.marginBytes(tc.snap); got != tc.want {
			t.Errorf("CompactMarginBytes %d, snapshot of %d bytes: margin %d bytes, want %d", tc.configured, tc.snap, got, tc.want)
		}
	}
}
