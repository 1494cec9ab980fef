package storage

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/correctables/correctables/internal/replica"
	"github.com/correctables/correctables/internal/state"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func memOptions(fs vfs.FS) Options {
	return Options{Dir: "db", FS: fs, Logger: quietLogger()}
}

func mustOpen(t testing.TB, opts Options) *Store {
	t.Helper()
	s, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func ent(index, term uint64, data string) *raftpb.Entry {
	e := &raftpb.Entry{Index: proto.Uint64(index), Term: proto.Uint64(term), Type: raftpb.EntryType_EntryNormal.Enum()}
	if data != "" {
		e.Data = []byte(data)
	}
	return e
}

func req(seq uint64, val string) *replica.Req {
	return &replica.Req{
		ID:  replica.OpID{Origin: 7, Seq: seq},
		TS:  1000 + seq,
		Op:  state.Op{Kind: state.OpPut, Key: fmt.Sprintf("k%d", seq), Value: []byte(val)},
		Ctx: replica.VV{7: seq},
	}
}

func reqBytes(ops []*replica.Req) [][]byte {
	var out [][]byte
	for _, q := range ops {
		out = append(out, replica.AppendReq(nil, q))
	}
	return out
}

// TestBasics pins the small contract by example, as MemoryStorage's tests do.
func TestBasics(t *testing.T) {
	s := mustOpen(t, memOptions(vfs.NewMem()))
	defer s.Close()

	if _, err := s.Entries(1, 1, math.MaxUint64); !errors.Is(err, raft.ErrUnavailable) {
		t.Fatalf("Entries on an empty log: %v, want ErrUnavailable", err)
	}
	if hs, cs, err := s.InitialState(); err != nil || hs != nil || cs == nil {
		t.Fatalf("InitialState = %v, %v, %v; want nil, empty, nil", hs, cs, err)
	}
	hs := &raftpb.HardState{Term: proto.Uint64(2), Vote: proto.Uint64(1), Commit: proto.Uint64(2)}
	if err := s.Save(hs, []*raftpb.Entry{ent(1, 1, "a"), ent(2, 1, "b"), ent(3, 2, "c")}, nil, []*replica.Req{req(1, "x")}); err != nil {
		t.Fatal(err)
	}
	// Overwrite a conflicting suffix: 3 and 4 go, 3' stays.
	if err := s.Save(nil, []*raftpb.Entry{ent(3, 3, "c'")}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if last, _ := s.LastIndex(); last != 3 {
		t.Fatalf("LastIndex = %d, want 3", last)
	}
	if term, _ := s.Term(3); term != 3 {
		t.Fatalf("Term(3) = %d, want 3", term)
	}
	// A bad argument writes nothing, not even the own operation beside it
	// (the OwnOps check below would see seq 9).
	if err := s.Save(nil, []*raftpb.Entry{ent(5, 3, "gap")}, nil, []*replica.Req{req(9, "no")}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Save with a gap: %v, want ErrInvalid", err)
	}
	if _, err := s.CreateSnapshot(2, &raftpb.ConfState{Voters: []uint64{1, 2, 3}}, []byte("state@2")); err != nil {
		t.Fatal(err)
	}
	if err := s.Compact(2); err != nil {
		t.Fatal(err)
	}
	if err := s.Compact(2); !errors.Is(err, raft.ErrCompacted) {
		t.Fatalf("Compact twice: %v, want ErrCompacted", err)
	}
	if _, err := s.Term(1); !errors.Is(err, raft.ErrCompacted) {
		t.Fatalf("Term(1): %v, want ErrCompacted", err)
	}
	if term, err := s.Term(2); err != nil || term != 1 {
		t.Fatalf("Term(2) = %d, %v; want the dummy entry's term 1", term, err)
	}
	if _, err := s.Entries(2, 3, math.MaxUint64); !errors.Is(err, raft.ErrCompacted) {
		t.Fatalf("Entries(2, 3): %v, want ErrCompacted", err)
	}
	if _, err := s.CreateSnapshot(2, nil, nil); !errors.Is(err, raft.ErrSnapOutOfDate) {
		t.Fatalf("CreateSnapshot(2) again: %v, want ErrSnapOutOfDate", err)
	}
	if err := s.Save(nil, []*raftpb.Entry{ent(4, 3, "d")}, nil, []*replica.Req{req(2, "y"), req(3, "z")}); err != nil {
		t.Fatal(err)
	}
	if err := s.TruncateOwn(1); err != nil {
		t.Fatal(err)
	}
	ops, err := s.OwnOps()
	if err != nil || !slices.EqualFunc(reqBytes(ops), reqBytes([]*replica.Req{req(2, "y"), req(3, "z")}), bytes.Equal) {
		t.Fatalf("OwnOps = %v, %v; want ops 2 and 3", ops, err)
	}
	// Applying a snapshot replaces the whole log.
	snap := &raftpb.Snapshot{Data: []byte("state@10"), Metadata: &raftpb.SnapshotMetadata{
		Index: proto.Uint64(10), Term: proto.Uint64(5), ConfState: &raftpb.ConfState{Voters: []uint64{1, 2, 3}}}}
	if err := s.Save(nil, nil, snap, nil); err != nil {
		t.Fatal(err)
	}
	if first, _ := s.FirstIndex(); first != 11 {
		t.Fatalf("FirstIndex after snapshot = %d, want 11", first)
	}
	if err := s.Save(nil, nil, snap, nil); !errors.Is(err, raft.ErrSnapOutOfDate) {
		t.Fatalf("same snapshot again: %v, want ErrSnapOutOfDate", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.LastIndex(); !errors.Is(err, ErrClosed) {
		t.Fatalf("LastIndex after Close: %v, want ErrClosed", err)
	}
}

func TestOptionsValidate(t *testing.T) {
	if _, err := Open(Options{FS: vfs.NewMem()}); err == nil {
		t.Fatal("Open without Dir succeeded")
	}
	o := Options{Dir: "x"}
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestFormatVersion(t *testing.T) {
	fs := vfs.NewMem()
	s := mustOpen(t, memOptions(fs))
	if err := s.db.Set(keyVersion, []byte{0, 0, 0, 0, 0, 0, 0, 9}, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(memOptions(fs)); !errors.Is(err, ErrFormat) {
		t.Fatalf("Open with version 9: %v, want ErrFormat", err)
	}
}

// TestCrashRecovery: a process killed between Saves (no Close) loses nothing
// that Save returned for. The crash clone keeps only what was synced.
func TestCrashRecovery(t *testing.T) {
	fs := vfs.NewCrashableMem()
	s := mustOpen(t, memOptions(fs))
	hs := &raftpb.HardState{Term: proto.Uint64(4), Vote: proto.Uint64(2), Commit: proto.Uint64(30)}
	var want []*raftpb.Entry
	for i := uint64(1); i <= 40; i++ {
		e := ent(i, 1+i/10, fmt.Sprintf("entry %d", i))
		want = append(want, e)
		var own []*replica.Req
		if i%3 == 0 {
			own = []*replica.Req{req(i/3, "v")}
		}
		if err := s.Save(hs, []*raftpb.Entry{e}, nil, own); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.CreateSnapshot(20, &raftpb.ConfState{Voters: []uint64{1, 2, 3}}, []byte("app")); err != nil {
		t.Fatal(err)
	}
	if err := s.Compact(10); err != nil {
		t.Fatal(err)
	}
	crashed := fs.CrashClone(vfs.CrashCloneCfg{})
	defer s.Close() // the "dead" process's store, on the old filesystem

	r := mustOpen(t, memOptions(crashed))
	defer r.Close()
	got, gcs, err := r.InitialState()
	if err != nil || !proto.Equal(got, hs) || !slices.Equal(gcs.GetVoters(), []uint64{1, 2, 3}) {
		t.Fatalf("InitialState = %v, %v, %v; want %v", got, gcs, err, hs)
	}
	if first, _ := r.FirstIndex(); first != 11 {
		t.Fatalf("FirstIndex = %d, want 11", first)
	}
	ents, err := r.Entries(11, 41, math.MaxUint64)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 30 {
		t.Fatalf("got %d entries, want 30", len(ents))
	}
	for k, e := range ents {
		if !proto.Equal(e, want[10+k]) {
			t.Fatalf("entry %d = %v, want %v", e.GetIndex(), e, want[10+k])
		}
	}
	snap, err := r.Snapshot()
	if err != nil || snap.GetMetadata().GetIndex() != 20 || string(snap.GetData()) != "app" {
		t.Fatalf("Snapshot = %v, %v", snap, err)
	}
	ops, err := r.OwnOps()
	if err != nil || len(ops) != 13 || ops[12].ID.Seq != 13 {
		t.Fatalf("OwnOps = %d ops, %v; want 13", len(ops), err)
	}
}

// TestRealDir runs a store in a real temporary directory: write, close,
// reopen.
func TestRealDir(t *testing.T) {
	opts := Options{Dir: t.TempDir(), Logger: quietLogger()}
	s := mustOpen(t, opts)
	if err := s.Save(&raftpb.HardState{Term: proto.Uint64(1), Commit: proto.Uint64(2)},
		[]*raftpb.Entry{ent(1, 1, "a"), ent(2, 1, "b")}, nil, []*replica.Req{req(1, "x")}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, opts)
	defer s.Close()
	if last, _ := s.LastIndex(); last != 2 {
		t.Fatalf("LastIndex after reopen = %d, want 2", last)
	}
	if hs, _ := s.HardState(); hs.GetCommit() != 2 {
		t.Fatalf("HardState after reopen = %v", hs)
	}
	if ops, _ := s.OwnOps(); len(ops) != 1 {
		t.Fatalf("OwnOps after reopen = %v", ops)
	}
}

// The equivalence test: seeded random sequences of operations run against
// raft.MemoryStorage and a Store, comparing every observable result.

type pair struct {
	t     *testing.T
	rng   *rand.Rand
	fs    *vfs.MemFS
	opts  Options
	ms    *raft.MemoryStorage
	s     *Store
	own   map[uint64]*replica.Req
	term  uint64
	trace []string
	// hsMaybe are the hard states written since the last write that was
	// surely fsynced, the first of them the one that write left: a
	// commit-only hard state is written without fsync (Save), so a crash
	// may leave any of them.
	hsMaybe []*raftpb.HardState
	// held are slices Entries returned, with a copy of their contents: no
	// later write may change what a caller holds.
	held [][2][]*raftpb.Entry
}

// appendsLive reports whether Save writes any of ents (some are past the
// compaction point), which makes it fsync.
func (p *pair) appendsLive(ents []*raftpb.Entry) bool {
	first, _ := p.ms.FirstIndex()
	return len(ents) > 0 && ents[len(ents)-1].GetIndex() >= first
}

// crashHardState checks the hard state a crash left against those it may
// have left, and makes the model follow it.
func (p *pair) crashHardState() {
	got, _, err := p.s.InitialState()
	if err != nil {
		p.fatalf("InitialState after crash: %v", err)
	}
	cur, _, _ := p.ms.InitialState()
	for _, h := range append(p.hsMaybe, cur) {
		if proto.Equal(h, got) || (raft.IsEmptyHardState(h) && raft.IsEmptyHardState(got)) {
			_ = p.ms.SetHardState(got)
			p.hsMaybe = []*raftpb.HardState{got}
			return
		}
	}
	p.fatalf("HardState after crash = %v, want one of %v", got, p.hsMaybe)
}

func (p *pair) fatalf(format string, args ...any) {
	p.t.Helper()
	tail := p.trace[max(0, len(p.trace)-15):]
	p.t.Fatalf("%s\nlast operations:\n  %s", fmt.Sprintf(format, args...), fmtLines(tail))
}

func fmtLines(l []string) string {
	var b bytes.Buffer
	for i, s := range l {
		if i > 0 {
			b.WriteString("\n  ")
		}
		b.WriteString(s)
	}
	return b.String()
}

func (p *pair) bounds() (offset, last uint64) {
	first, _ := p.ms.FirstIndex()
	last, _ = p.ms.LastIndex()
	return first - 1, last
}

// between draws uniformly from [lo, hi] (lo <= hi).
func (p *pair) between(lo, hi uint64) uint64 { return lo + p.rng.Uint64N(hi-lo+1) }

func (p *pair) step() {
	offset, last := p.bounds()
	switch n := p.rng.IntN(100); {
	case n < 50: // Save entries, maybe overwriting, maybe with a hard state and own ops
		lo := uint64(1)
		if offset > 2 {
			lo = offset - 2
		}
		e0 := p.between(lo, last+1)
		if p.rng.IntN(4) == 0 {
			p.term++
		}
		var ents []*raftpb.Entry
		for i := range p.rng.IntN(6) + 1 {
			ents = append(ents, ent(e0+uint64(i), p.term, randData(p.rng)))
		}
		var hs *raftpb.HardState
		if p.rng.IntN(2) == 0 {
			hs = &raftpb.HardState{Term: proto.Uint64(p.term), Vote: proto.Uint64(p.rng.Uint64N(4)), Commit: proto.Uint64(p.rng.Uint64N(last + 1))}
		}
		var own []*replica.Req
		for range p.rng.IntN(3) {
			q := req(p.rng.Uint64N(50)+1, randData(p.rng))
			own = append(own, q)
		}
		p.trace = append(p.trace, fmt.Sprintf("Save(hs=%v, ents=[%d..%d] term %d, own=%d)", hs != nil, e0, e0+uint64(len(ents))-1, p.term, len(own)))
		err := p.s.Save(hs, ents, nil, own)
		if err != nil {
			p.fatalf("Save: %v", err)
		}
		prev, _, _ := p.ms.InitialState()
		if hs != nil {
			_ = p.ms.SetHardState(hs)
		}
		cur, _, _ := p.ms.InitialState()
		if len(own) > 0 || p.appendsLive(ents) || cur.GetTerm() != prev.GetTerm() || cur.GetVote() != prev.GetVote() {
			p.hsMaybe = []*raftpb.HardState{cur} // synced: nothing older survives
		} else {
			p.hsMaybe = append(p.hsMaybe, cur)
		}
		_ = p.ms.Append(ents)
		for _, q := range own {
			p.own[q.ID.Seq] = q
		}
	case n < 60: // CreateSnapshot; MemoryStorage panics outside [offset, last]
		snapIdx := p.snapIndex()
		var i uint64
		if lo := max(offset, snapIdx+1); lo <= last && p.rng.IntN(5) != 0 {
			i = p.between(lo, last)
		} else {
			i = snapIdx - min(snapIdx, p.rng.Uint64N(2)) // out of date
		}
		cs := &raftpb.ConfState{Voters: []uint64{1, 2, p.rng.Uint64N(5) + 3}}
		if p.rng.IntN(2) == 0 {
			cs = nil
		}
		data := []byte(randData(p.rng))
		p.trace = append(p.trace, fmt.Sprintf("CreateSnapshot(%d)", i))
		want, werr := p.ms.CreateSnapshot(i, cs, data)
		got, gerr := p.s.CreateSnapshot(i, cs, data)
		p.sameErr("CreateSnapshot", werr, gerr)
		if werr == nil && !proto.Equal(normSnap(want), normSnap(got)) {
			p.fatalf("CreateSnapshot(%d) = %v, want %v", i, got, want)
		}
	case n < 75: // Compact; MemoryStorage panics past last
		i := p.between(offset-min(offset, 1), last)
		p.trace = append(p.trace, fmt.Sprintf("Compact(%d)", i))
		p.sameErr("Compact", p.ms.Compact(i), p.s.Compact(i))
	case n < 80: // apply a snapshot from a leader, sometimes an old one, sometimes with entries after it
		snapIdx := p.snapIndex()
		i := p.between(snapIdx-min(snapIdx, 2), last+8)
		if i == 0 {
			i = 1
		}
		p.term++
		snap := &raftpb.Snapshot{Data: []byte(randData(p.rng)), Metadata: &raftpb.SnapshotMetadata{
			Index: proto.Uint64(i), Term: proto.Uint64(p.term), ConfState: &raftpb.ConfState{Voters: []uint64{1, 2, 3}}}}
		var ents []*raftpb.Entry
		if p.rng.IntN(2) == 0 {
			ents = []*raftpb.Entry{ent(i+1, p.term, "after"), ent(i+2, p.term, "")}
		}
		p.trace = append(p.trace, fmt.Sprintf("Save(snapshot %d, %d entries)", i, len(ents)))
		werr := p.ms.ApplySnapshot(snap)
		gerr := p.s.Save(nil, ents, snap, nil)
		p.sameErr("apply snapshot", werr, gerr)
		if werr == nil {
			_ = p.ms.Append(ents)
		}
	case n < 84:
		upTo := p.rng.Uint64N(50)
		p.trace = append(p.trace, fmt.Sprintf("TruncateOwn(%d)", upTo))
		if err := p.s.TruncateOwn(upTo); err != nil {
			p.fatalf("TruncateOwn: %v", err)
		}
		for seq := range p.own {
			if seq <= upTo {
				delete(p.own, seq)
			}
		}
	case n < 92: // crash and restart: no Close, only synced data survives
		p.trace = append(p.trace, "crash")
		crashed := p.fs.CrashClone(vfs.CrashCloneCfg{})
		old := p.s
		p.fs, p.opts.FS = crashed, crashed
		p.s = mustOpen(p.t, p.opts)
		_ = old.Close()
		p.crashHardState()
	default: // clean restart
		p.trace = append(p.trace, "reopen")
		if err := p.s.Close(); err != nil {
			p.fatalf("Close: %v", err)
		}
		p.s = mustOpen(p.t, p.opts)
	}
}

// normSnap fills unset fields with their zero values: MemoryStorage leaves
// ConfState.AutoLeave unset or sets it to false depending on the call path.
func normSnap(s *raftpb.Snapshot) *raftpb.Snapshot {
	s = raftpb.EnsureSnapshot(proto.Clone(s).(*raftpb.Snapshot))
	raftpb.EnsureConfState(s.GetMetadata().GetConfState())
	return s
}

func (p *pair) snapIndex() uint64 {
	snap, _ := p.ms.Snapshot()
	return snap.GetMetadata().GetIndex()
}

func randData(rng *rand.Rand) string {
	if rng.IntN(5) == 0 {
		return ""
	}
	b := make([]byte, rng.IntN(40)+1)
	for i := range b {
		b[i] = 'a' + byte(rng.IntN(26))
	}
	return string(b)
}

// sameErr fails unless both errors are nil or both are the same raft sentinel.
func (p *pair) sameErr(what string, want, got error) {
	p.t.Helper()
	for _, sentinel := range []error{raft.ErrCompacted, raft.ErrUnavailable, raft.ErrSnapOutOfDate, raft.ErrSnapshotTemporarilyUnavailable} {
		if errors.Is(want, sentinel) != errors.Is(got, sentinel) {
			p.fatalf("%s: error %v, MemoryStorage says %v", what, got, want)
		}
	}
	if (want == nil) != (got == nil) {
		p.fatalf("%s: error %v, MemoryStorage says %v", what, got, want)
	}
}

// check compares every observable; full also compares every Entries range.
func (p *pair) check(full bool) {
	p.t.Helper()
	for _, h := range p.held {
		if !slices.Equal(h[0], h[1]) {
			p.fatalf("a slice returned by Entries changed under its caller")
		}
	}
	whs, wcs, _ := p.ms.InitialState()
	ghs, gcs, err := p.s.InitialState()
	if err != nil {
		p.fatalf("InitialState: %v", err)
	}
	if raft.IsEmptyHardState(whs) != raft.IsEmptyHardState(ghs) || (!raft.IsEmptyHardState(whs) && !proto.Equal(whs, ghs)) {
		p.fatalf("HardState = %v, want %v", ghs, whs)
	}
	if !proto.Equal(wcs, gcs) {
		p.fatalf("ConfState = %v, want %v", gcs, wcs)
	}
	wf, _ := p.ms.FirstIndex()
	wl, _ := p.ms.LastIndex()
	gf, err1 := p.s.FirstIndex()
	gl, err2 := p.s.LastIndex()
	if err1 != nil || err2 != nil || wf != gf || wl != gl {
		p.fatalf("First/LastIndex = %d, %d (%v, %v); want %d, %d", gf, gl, err1, err2, wf, wl)
	}
	ws, _ := p.ms.Snapshot()
	gs, err := p.s.Snapshot()
	if err != nil || !proto.Equal(normSnap(ws), normSnap(gs)) {
		p.fatalf("Snapshot = %v, %v; want %v", gs, err, ws)
	}
	for i := wf - min(wf, 2); i <= wl+2; i++ {
		wt, werr := p.ms.Term(i)
		gt, gerr := p.s.Term(i)
		p.sameErr(fmt.Sprintf("Term(%d)", i), werr, gerr)
		if wt != gt {
			p.fatalf("Term(%d) = %d, want %d", i, gt, wt)
		}
	}
	entries := func(lo, hi, maxSize uint64) {
		p.t.Helper()
		we, werr := p.ms.Entries(lo, hi, maxSize)
		ge, gerr := p.s.Entries(lo, hi, maxSize)
		what := fmt.Sprintf("Entries(%d, %d, %d)", lo, hi, maxSize)
		p.sameErr(what, werr, gerr)
		if !slices.EqualFunc(we, ge, func(a, b *raftpb.Entry) bool { return proto.Equal(a, b) }) {
			p.fatalf("%s = %v, want %v", what, ge, we)
		}
		if len(ge) > 0 && p.rng.IntN(10) == 0 {
			p.held = append(p.held[max(0, len(p.held)-20):], [2][]*raftpb.Entry{ge, slices.Clone(ge)})
		}
	}
	sizes := []uint64{0, 1, 30, 100, math.MaxUint64}
	if full {
		for lo := wf - min(wf, 1); lo <= wl+1; lo++ {
			for hi := lo; hi <= wl+1; hi++ {
				for _, sz := range sizes {
					entries(lo, hi, sz)
				}
			}
		}
	} else {
		for range 8 {
			lo := p.between(wf-min(wf, 1), wl+1)
			entries(lo, p.between(lo, wl+1), sizes[p.rng.IntN(len(sizes))])
		}
	}
	ops, err := p.s.OwnOps()
	if err != nil {
		p.fatalf("OwnOps: %v", err)
	}
	var want []*replica.Req
	for _, seq := range slices.Sorted(mapsKeys(p.own)) {
		want = append(want, p.own[seq])
	}
	if !slices.EqualFunc(reqBytes(ops), reqBytes(want), bytes.Equal) {
		p.fatalf("OwnOps: %d ops, want %d", len(ops), len(want))
	}
}

func mapsKeys(m map[uint64]*replica.Req) func(func(uint64) bool) {
	return func(yield func(uint64) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestEquivalence is the metamorphic test: a Store and raft.MemoryStorage,
// fed the same seeded operations, answer every query alike, across crashes
// and reopens, with the tail cache disabled, tiny and default.
//
// By default 3 seeds of 200 steps (minutes under the race detector on two
// busy cores); CORRECTABLES_LONG=1 (make test-long) runs 6 of 300.
func TestEquivalence(t *testing.T) {
	seeds, steps := 3, 200
	switch {
	case os.Getenv("CORRECTABLES_LONG") != "":
		seeds, steps = 6, 300
	case testing.Short():
		seeds, steps = 3, 100
	}
	for seed := range uint64(seeds) {
		for _, cache := range []int{-1, 3, 0} {
			t.Run(fmt.Sprintf("seed=%d/cache=%d", seed, cache), func(t *testing.T) {
				t.Parallel()
				fs := vfs.NewCrashableMem()
				opts := memOptions(fs)
				opts.TailCacheEntries = cache
				p := &pair{
					t: t, rng: rand.New(rand.NewPCG(seed, 1)), fs: fs, opts: opts,
					ms: raft.NewMemoryStorage(), s: mustOpen(t, opts),
					own: map[uint64]*replica.Req{}, term: 1,
				}
				defer func() { _ = p.s.Close() }()
				for i := range steps {
					p.step()
					p.check(i%20 == 0)
				}
				p.check(true)
			})
		}
	}
}

// TestConcurrentReaders: raft's reads may run beside the driver's Saves and
// Compacts (run with -race); every read sees a consistent log.
func TestConcurrentReaders(t *testing.T) {
	s := mustOpen(t, Options{Dir: "db", FS: vfs.NewMem(), NoSync: true, Logger: quietLogger(), TailCacheEntries: 16})
	defer s.Close()
	done := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		defer close(errc)
		for {
			select {
			case <-done:
				return
			default:
			}
			first, _ := s.FirstIndex()
			last, _ := s.LastIndex()
			if last < first {
				continue
			}
			ents, err := s.Entries(first, last+1, math.MaxUint64)
			if errors.Is(err, raft.ErrCompacted) {
				continue // compacted between the calls
			}
			if err != nil {
				errc <- err
				return
			}
			for k, e := range ents {
				if e.GetIndex() != ents[0].GetIndex()+uint64(k) {
					errc <- fmt.Errorf("entries not contiguous: %v", ents)
					return
				}
			}
		}
	}()
	for i := uint64(1); i <= 500; i++ {
		if err := s.Save(nil, []*raftpb.Entry{ent(i, 1, "x")}, nil, nil); err != nil {
			t.Fatal(err)
		}
		if i%50 == 0 {
			if err := s.Compact(i - 10); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(done)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}
