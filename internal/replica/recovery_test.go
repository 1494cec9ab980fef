package replica

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/correctables/correctables/internal/state"
)

// single is one replica alone, driven by hand over raft.MemoryStorage, with
// its persisted own operations kept as a driver would.
type single struct {
	t      *testing.T
	cfg    Config
	stor   *raft.MemoryStorage
	own    []*Req
	r      *Replica
	stable int
	views  []View
	snaps  int
}

func newSingle(t *testing.T, snapshotEntries int) *single {
	s := &single{t: t, stor: raft.NewMemoryStorage()}
	s.cfg = Config{ID: 1, Peers: []uint64{1}, Storage: s.stor, Clock: func() int64 { return 1e12 },
		Rand: rand.New(rand.NewPCG(1, 1)), SnapshotEntries: snapshotEntries}
	s.restart()
	for i := 0; !s.r.IsLeader(); i++ {
		if i > 100 {
			t.Fatal("single replica did not become leader in 100 ticks")
		}
		s.r.Tick()
		s.drive()
	}
	return s
}

func (s *single) restart() {
	s.t.Helper()
	s.cfg.OwnOps = append([]*Req(nil), s.own...)
	r, err := New(s.cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	s.r = r
}

func (s *single) drive() {
	s.t.Helper()
	for s.r.HasReady() {
		rd, err := s.r.Ready()
		if err != nil {
			s.t.Fatal(err)
		}
		if rd.HardState != nil && !raft.IsEmptyHardState(rd.HardState) {
			if err := s.stor.SetHardState(proto.Clone(rd.HardState).(*raftpb.HardState)); err != nil {
				s.t.Fatal(err)
			}
		}
		if err := s.stor.Append(rd.Entries); err != nil {
			s.t.Fatal(err)
		}
		s.own = append(s.own, rd.Persist...)
		if rd.CreateSnapshot != nil {
			s.snaps++
		}
		for _, v := range rd.Views {
			if v.Stable {
				s.stable++
			}
		}
		s.views = append(s.views, rd.Views...)
		s.r.Advance(rd)
		if err := s.r.CheckInvariants(); err != nil {
			s.t.Fatal(err)
		}
	}
}

// waitUnfenced checks that a restarted leader refuses updates, then ticks
// until it leads again and takes them.
func (s *single) waitUnfenced() {
	s.t.Helper()
	if !s.r.Fenced() {
		s.t.Fatal("a restarted leader is not fenced")
	}
	if err := s.r.Submit(ClientRequest{Client: 9, Seq: 1, Want: WantStable, Op: state.Op{Kind: state.OpPut, Key: "k", Value: []byte("v")}}); !errors.Is(err, ErrBusy) {
		s.t.Fatalf("a fenced replica's Submit returned %v, want ErrBusy", err)
	}
	for i := 0; s.r.Fenced(); i++ {
		if i > 100 {
			s.t.Fatal("restarted replica still fenced after 100 ticks")
		}
		s.r.Tick()
		s.drive()
	}
}

func (s *single) putWeak(n int) {
	s.t.Helper()
	for i := range n {
		if err := s.r.Submit(ClientRequest{Client: 1, Seq: uint64(i + 1), Want: WantTentative | WantStable,
			Op: state.Op{Kind: state.OpPut, Key: fmt.Sprint("k", i%50), Value: []byte("v")}}); err != nil {
			s.t.Fatal(err)
		}
		s.drive()
	}
}

// tickUntilStable ticks until n operations have their stable views, failing
// after maxTicks ticks.
func (s *single) tickUntilStable(n, maxTicks int) {
	s.t.Helper()
	for i := 0; s.stable < n; i++ {
		if i > maxTicks {
			s.t.Fatalf("%d of %d weak puts committed after %d ticks", s.stable, n, maxTicks)
		}
		s.r.Tick()
		s.drive()
	}
}

// Once NoopBatch own weak operations wait for an entry, the replica
// proposes them at once: under load weak operations commit at the rate they
// arrive, not a no-op period's worth at a time (before, they waited for the
// tick's no-op, and Submit refused them past MaxTentative).
func TestWeakOpsProposedWithoutWaitingForTheNoop(t *testing.T) {
	s := newSingle(t, -1)
	n := 4 * s.r.cfg.NoopBatch
	s.putWeak(n) // no tick from here on
	if s.stable < n-s.r.cfg.NoopBatch {
		t.Fatalf("%d of %d weak puts committed without a tick; want all but the last %d", s.stable, n, s.r.cfg.NoopBatch)
	}
}

// A restart replays the committed log before the own operations come back:
// own operations the log commits are never tentative again (before, every
// own operation since the last snapshot came back tentative and each
// replayed entry rescanned them all, so restart time grew cubically).
func TestRestartDoesNotMakeCommittedOwnOpsTentative(t *testing.T) {
	s := newSingle(t, -1)
	const n = 2000
	s.putWeak(n)
	s.tickUntilStable(n, 200)
	hash := s.r.CommittedStateHash()
	if len(s.own) != n {
		t.Fatalf("%d own operations persisted, want %d", len(s.own), n)
	}
	s.restart()
	if got := s.r.TentativeLen(); got != 0 {
		t.Fatalf("after restart %d operations are tentative; want 0 (all %d are committed in the log)", got, n)
	}
	if got := s.r.CommittedStateHash(); got != hash {
		t.Fatalf("restarted committed state %x, want %x", got, hash)
	}
	if got := s.r.Stamp().VV[1]; got != n {
		t.Fatalf("restarted VV[1] = %d, want %d", got, n)
	}
	// It led the term it crashed in: it takes no update until it has
	// applied an entry of a later term (its own, once it leads again).
	s.waitUnfenced()
	// It goes on issuing fresh sequence numbers.
	s.putWeak(1)
	if got := s.r.Stamp().VV[1]; got != n+1 {
		t.Fatalf("after one more put VV[1] = %d, want %d", got, n+1)
	}
}

// Snapshots are bounded by bytes and by time as well as by entries: a few
// large entries, or a trickle of writes, still get compacted.
func TestSnapshotsBoundedByBytesAndTime(t *testing.T) {
	t.Run("bytes", func(t *testing.T) {
		s := newSingle(t, 1_000_000)
		s.r.cfg.SnapshotBytes = 64 << 10
		s.r.cfg.SnapshotTicks = 1 << 30
		for i := range 8 {
			if err := s.r.Submit(ClientRequest{Client: 1, Seq: uint64(i + 1), Strong: true, Want: WantStable,
				Op: state.Op{Kind: state.OpPut, Key: fmt.Sprint("big", i), Value: make([]byte, 32<<10)}}); err != nil {
				t.Fatal(err)
			}
			s.drive()
		}
		for i := 0; s.stable < 8 && i < 100; i++ {
			s.r.Tick()
			s.drive()
		}
		if s.snaps == 0 {
			t.Fatalf("no snapshot after %d KiB of entries with SnapshotBytes 64 KiB", 8*32)
		}
	})
	// A snapshot writes the whole state: the bytes bound follows the last
	// snapshot's size, so that snapshots of a state much larger than
	// SnapshotBytes cost at most the bytes applied between them.
	t.Run("bytes-follow-state", func(t *testing.T) {
		s := newSingle(t, 1_000_000)
		s.r.cfg.SnapshotBytes = 64 << 10
		s.r.cfg.SnapshotTicks = 1 << 30
		seq := uint64(0)
		put := func(n int) {
			for i := range n {
				seq++
				if err := s.r.Submit(ClientRequest{Client: 1, Seq: seq, Strong: true, Want: WantStable,
					Op: state.Op{Kind: state.OpPut, Key: fmt.Sprint("big", i%16), Value: make([]byte, 32<<10)}}); err != nil {
					t.Fatal(err)
				}
				s.drive()
				for j := 0; s.stable < int(seq) && j < 100; j++ {
					s.r.Tick()
					s.drive()
				}
			}
		}
		put(16) // a state of 512 KiB, eight times SnapshotBytes
		before := s.snaps
		put(64) // 2 MiB more of entries
		taken := s.snaps - before
		// At 64 KiB a snapshot would come every second put (32 of them);
		// at the state's 512 KiB, every 16th.
		if taken < 1 || taken > 6 {
			t.Fatalf("%d snapshots over 2 MiB of entries on a 512 KiB state, want 1-6 (one per state size applied)", taken)
		}
	})
	// Nor is it far above a small state's size: with the servers' 16 MiB,
	// a state of 128 KiB written over and over gets a snapshot about every
	// MiB of entries (snapshotLogRatio times the state, at least
	// minSnapshotBytes), the first one before any snapshot told its size.
	t.Run("bytes-follow-small-state", func(t *testing.T) {
		s := newSingle(t, 1_000_000)
		s.r.cfg.SnapshotTicks = 1 << 30
		if s.r.cfg.SnapshotBytes != 16<<20 {
			t.Fatalf("SnapshotBytes %d, want the default 16 MiB", s.r.cfg.SnapshotBytes)
		}
		for i := range 128 { // 4 MiB of entries over 4 keys
			if err := s.r.Submit(ClientRequest{Client: 1, Seq: uint64(i + 1), Strong: true, Want: WantStable,
				Op: state.Op{Kind: state.OpPut, Key: fmt.Sprint("k", i%4), Value: make([]byte, 32<<10)}}); err != nil {
				t.Fatal(err)
			}
			s.drive()
			for j := 0; s.stable < i+1 && j < 100; j++ {
				s.r.Tick()
				s.drive()
			}
		}
		if s.snaps < 2 || s.snaps > 6 {
			t.Fatalf("%d snapshots over 4 MiB of entries on a 128 KiB state, want 2-6 (about one per MiB)", s.snaps)
		}
	})
	t.Run("time", func(t *testing.T) {
		s := newSingle(t, 1_000_000)
		s.r.cfg.SnapshotTicks = 50
		s.putWeak(1)
		for range 60 {
			s.r.Tick()
			s.drive()
		}
		if s.snaps == 0 {
			t.Fatal("no snapshot 60 ticks after a write with SnapshotTicks 50")
		}
	})
}

// Strong reads submitted together share one ReadIndex request (one raft
// heartbeat round), as etcd's server batches linearizable reads.
func TestStrongReadsShareOneReadIndex(t *testing.T) {
	s := newSingle(t, -1)
	s.putWeak(1)
	batches := s.r.nextBatch
	const n = 50
	for i := range n {
		if err := s.r.Submit(ClientRequest{Client: 2, Seq: uint64(i + 1), Strong: true, Want: WantStable,
			Op: state.Op{Kind: state.OpGet, Key: "k0"}}); err != nil {
			t.Fatal(err)
		}
	}
	before := s.stable
	s.drive()
	// The reads follow the weak put, still tentative when they came: its
	// final view comes too, from the one entry that committed it for them.
	if got := s.stable - before; got != n+1 || len(s.r.reads) != 0 {
		t.Fatalf("%d stable views for %d strong reads and the weak put they follow; %d reads wait", got, n, len(s.r.reads))
	}
	if got := s.r.nextBatch - batches; got != 1 {
		t.Fatalf("%d ReadIndex requests for %d reads submitted together; want 1", got, n)
	}
}

// A strong read sees the weak writes the replica had received when it
// arrived, acknowledged by their preliminary view and not yet committed
// (they are its causal context, Creek §3, as a strong update's): the
// replica proposes them in an entry at once and serves the read after them.
// Reading the committed state at the read index alone missed them.
func TestStrongReadSeesWeakWritesItFollows(t *testing.T) {
	s := newSingle(t, -1)
	for i, v := range []string{"a", "b"} {
		if err := s.r.Submit(ClientRequest{Client: 1, Seq: uint64(i + 1), Want: WantTentative,
			Op: state.Op{Kind: state.OpPut, Key: "k", Value: []byte(v)}}); err != nil {
			t.Fatal(err)
		}
		s.drive()
	}
	if s.r.committedVV.Covers(s.r.vv) {
		t.Fatal("the weak puts committed before the read: the test needs them tentative")
	}
	s.views = nil
	if err := s.r.Submit(ClientRequest{Client: 2, Seq: 1, Strong: true, Want: WantStable,
		Op: state.Op{Kind: state.OpGet, Key: "k"}}); err != nil {
		t.Fatal(err)
	}
	s.drive()
	var got []View
	for _, v := range s.views {
		if v.Client == 2 {
			got = append(got, v)
		}
	}
	if len(got) != 1 || !got[0].Stable || !got[0].Result.Found || string(got[0].Result.Value) != "b" {
		t.Fatalf("strong read after two acknowledged weak puts: %+v, want one stable view of \"b\"", got)
	}
	// Nothing tentative: the next read goes without an entry.
	last := s.r.applied
	if err := s.r.Submit(ClientRequest{Client: 2, Seq: 2, Strong: true, Want: WantStable,
		Op: state.Op{Kind: state.OpGet, Key: "k"}}); err != nil {
		t.Fatal(err)
	}
	s.drive()
	if s.r.applied != last || len(s.r.reads) != 0 {
		t.Errorf("a strong read with nothing tentative applied %d entries, %d reads wait", s.r.applied-last, len(s.r.reads))
	}
}

// The results kept for snapshots stay small whatever the values: a result
// over maxKeptResult is kept as a digest. A lagging origin still answers a
// waiting client exactly when the digest matches its tentative result, and
// says the result is lost (never a wrong one) when it does not.
func TestLargeResultsKeptAsDigests(t *testing.T) {
	s := newSingle(t, -1)
	big := func(b byte) state.Result {
		return state.Result{Found: true, Value: bytes.Repeat([]byte{b}, 64<<10)}
	}
	for i := uint64(1); i <= 3000; i++ {
		s.r.rememberResult(OpID{2, i}, big(byte(i)))
	}
	kept := 0
	for _, cr := range s.r.results[2] {
		kept += resultSize(cr.res) + len(cr.digest)
	}
	if limit := 2 * s.r.cfg.MaxTentative * (maxKeptResult + 64); kept > limit {
		t.Fatalf("results of 3000 64 KiB puts keep %d bytes; want at most %d", kept, limit)
	}
	// Through a snapshot's encoding and back.
	s.r.confState = &raftpb.ConfState{Voters: []uint64{1}}
	data, err := s.r.snapshotData()
	if err != nil {
		t.Fatal(err)
	}
	snap := &raftpb.Snapshot{Data: data, Metadata: &raftpb.SnapshotMetadata{Index: proto.Uint64(s.r.applied), ConfState: s.r.confState}}
	sc, err := s.r.decodeSnapshot(snap)
	if err != nil {
		t.Fatal(err)
	}
	s.r.results = sc.results
	s.r.committedVV[2] = 3000
	s.r.waiting[OpID{2, 2999}] = &waiter{client: 7, seq: 1, tentative: big(byte(2999 % 256)), sent: true}
	s.r.waiting[OpID{2, 3000}] = &waiter{client: 7, seq: 2, tentative: big(0xee), sent: true}
	s.r.out.Views = nil
	if err := s.r.answerFromSnapshot(); err != nil {
		t.Fatal(err)
	}
	if len(s.r.out.Views) != 2 {
		t.Fatalf("%d views, want 2", len(s.r.out.Views))
	}
	match, diff := s.r.out.Views[0], s.r.out.Views[1]
	if match.Lost || !match.Confirmed || !match.Result.Equal(big(byte(2999%256))) || !match.Last {
		t.Fatalf("matching digest: view %+v, want the tentative result, confirmed", match)
	}
	if !diff.Lost || !diff.Last || diff.Result.Value != nil {
		t.Fatalf("differing digest: view %+v, want Lost without a result", diff)
	}
}

// A restart's replay commits its operations in bounded batches: one flush
// of all that a 16 MiB read of the log holds built and kept a scratch
// array of every operation in it (tens of MB for 100,000 small writes, a
// few hundred ms of a restart in BenchmarkRecovery). The state and the
// committed order are those of the log.
func TestReplayCommitsInBoundedBatches(t *testing.T) {
	s := newSingle(t, -1)
	n := 3*flushCommitsEvery + 100
	s.putWeak(n)
	s.tickUntilStable(n, 500)
	hash, committed := s.r.CommittedStateHash(), s.r.Committed()
	s.restart()
	if got := s.r.CommittedStateHash(); got != hash {
		t.Fatalf("restarted committed state %x, want %x", got, hash)
	}
	if got := s.r.Committed(); !slices.Equal(got, committed) {
		t.Fatalf("restarted committed order differs: %d operations, want %d", len(got), len(committed))
	}
	if got := s.r.TentativeLen(); got != 0 {
		t.Fatalf("after restart %d operations are tentative; want 0", got)
	}
	// The scratch arrays of a flush hold at most a batch (plus what one
	// entry adds past the bound).
	for _, c := range []int{cap(s.r.undone), cap(s.r.missing)} {
		if c > 2*flushCommitsEvery {
			t.Fatalf("after replaying %d operations the replica keeps a scratch array of %d; want at most %d", n, c, 2*flushCommitsEvery)
		}
	}
}
