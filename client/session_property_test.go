package client

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// The model below keeps the ground truth the stamps summarise: which
// operations each replica holds, the committed order, and what each view
// of the session actually contained. The property: a view never claims a
// guarantee its contents do not give.

type modelOp struct {
	id  OpID
	key string
	ts  int64 // milliseconds; the model's clock
}

type modelReplica struct {
	recv      map[uint64]uint64 // per origin, the prefix received
	committed int               // committed prefix held
}

type modelView struct {
	key      string
	contents map[OpID]bool
}

func TestSessionNeverOverclaims(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		const replicas = 3
		keys := []string{"a", "b", "c"}
		var ops []modelOp                  // every write, by origin then seq
		byOrigin := map[uint64][]modelOp{} // origin's writes in order
		var committed []OpID               // the global committed order
		reps := make([]*modelReplica, replicas+1)
		for r := 1; r <= replicas; r++ {
			reps[r] = &modelReplica{recv: map[uint64]uint64{}}
		}
		now := int64(1_000)
		s := NewSession()
		s.now = func() time.Time { return time.UnixMilli(now) }
		// The session's history, as ground truth.
		var mine []modelOp           // the session's writes
		var reads []modelView        // every view the session observed
		var finals = map[OpID]bool{} // the session's writes whose final view arrived

		holds := func(r int, id OpID) bool { return reps[r].recv[id.Origin] >= id.Seq }
		commitPos := func(id OpID) int { return slices.Index(committed, id) }
		contents := func(r int, stable bool) map[OpID]bool {
			c := map[OpID]bool{}
			if stable {
				for _, id := range committed[:reps[r].committed] {
					c[id] = true
				}
				return c
			}
			for _, op := range ops {
				if holds(r, op.id) {
					c[op.id] = true
				}
			}
			return c
		}
		stampOf := func(r int) Stamp {
			v := map[uint64]uint64{}
			for o, q := range reps[r].recv {
				if q > 0 {
					v[o] = q
				}
			}
			// Stable time: the smallest timestamp of an operation not
			// received yet, or now if none is missing (the replica's own
			// clock; every later operation gets a later timestamp).
			st := now
			for _, op := range ops {
				if !holds(r, op.id) && op.ts < st {
					st = op.ts
				}
			}
			return Stamp{Replica: uint64(r), VV: v, CommittedCount: uint64(reps[r].committed), StableTime: uint64(st) << hlcLogicalBits}
		}
		receive := func(r int, o uint64) {
			if int(reps[r].recv[o]) < len(byOrigin[o]) {
				reps[r].recv[o]++
			}
		}

		steps := rapid.IntRange(1, 60).Draw(t, "steps")
		for range steps {
			now += int64(rapid.IntRange(0, 50).Draw(t, "dt"))
			switch rapid.IntRange(0, 5).Draw(t, "action") {
			case 0: // a write at an origin, by the session or by someone else
				o := uint64(rapid.IntRange(1, replicas).Draw(t, "origin"))
				op := modelOp{id: OpID{Origin: o, Seq: uint64(len(byOrigin[o]) + 1)}, key: rapid.SampledFrom(keys).Draw(t, "key"), ts: now}
				ops = append(ops, op)
				byOrigin[o] = append(byOrigin[o], op)
				reps[o].recv[o] = op.id.Seq
				if rapid.Bool().Draw(t, "session's") {
					mine = append(mine, op)
					st := stampOf(int(o))
					st.Op = op.id
					s.Observe(Put(op.key, nil), st, false)
					reads = append(reads, modelView{key: op.key, contents: contents(int(o), false)})
				}
			case 1: // gossip: a replica receives the next operation of an origin
				receive(rapid.IntRange(1, replicas).Draw(t, "to"), uint64(rapid.IntRange(1, replicas).Draw(t, "from")))
			case 2: // consensus commits the next operation of some origin
				o := uint64(rapid.IntRange(1, replicas).Draw(t, "commit origin"))
				n := 0
				for _, id := range committed {
					if id.Origin == o {
						n++
					}
				}
				if n < len(byOrigin[o]) {
					committed = append(committed, byOrigin[o][n].id)
				}
			case 3: // a replica learns the next committed entry (and its operation)
				r := rapid.IntRange(1, replicas).Draw(t, "learner")
				if reps[r].committed < len(committed) {
					id := committed[reps[r].committed]
					for !holds(r, id) {
						receive(r, id.Origin)
					}
					reps[r].committed++
				}
			case 4: // the final view of one of the session's writes
				for _, op := range mine {
					p := commitPos(op.id)
					if finals[op.id] || p < 0 || reps[op.id.Origin].committed <= p {
						continue
					}
					st := stampOf(int(op.id.Origin))
					st.Op = op.id
					finals[op.id] = true
					s.Observe(Put(op.key, nil), st, true)
					reads = append(reads, modelView{key: op.key, contents: contents(int(op.id.Origin), true)})
					break
				}
			case 5: // a read by the session, preliminary or final
				r := rapid.IntRange(1, replicas).Draw(t, "reader")
				key := rapid.SampledFrom(keys).Draw(t, "read key")
				stable := rapid.Bool().Draw(t, "final")
				if stable {
					// A final view (ReadIndex) reads the whole committed
					// order at the time: the replica catches up first.
					for reps[r].committed < len(committed) {
						id := committed[reps[r].committed]
						for !holds(r, id) {
							receive(r, id.Origin)
						}
						reps[r].committed++
					}
				}
				st := stampOf(r)
				g := s.Check(Get(key), st, stable)
				got := contents(r, stable)
				check(t, "read-my-writes", g.ReadMyWrites, func() error {
					for _, op := range mine {
						if op.key == key && !got[op.id] {
							return fmt.Errorf("misses write %v", op.id)
						}
					}
					return nil
				})
				check(t, "monotonic reads", g.MonotonicReads, func() error {
					for _, v := range reads {
						if v.key == key {
							if id, ok := missing(got, v.contents); ok {
								return fmt.Errorf("misses %v of an earlier read", id)
							}
						}
					}
					return nil
				})
				check(t, "causal", g.Causal, func() error {
					for _, op := range mine {
						if !got[op.id] {
							return fmt.Errorf("misses write %v", op.id)
						}
					}
					for _, v := range reads {
						if id, ok := missing(got, v.contents); ok {
							return fmt.Errorf("misses %v of an earlier view", id)
						}
					}
					return nil
				})
				check(t, "bounded staleness", g.Bounded, func() error {
					// Every committed write older than the claimed bound
					// (completed, in the sense of docs/consistency.md), and
					// for a preliminary view every write older than it.
					for _, op := range ops {
						old := op.ts < now-g.Staleness.Milliseconds()
						if old && (commitPos(op.id) >= 0 || !stable) && !got[op.id] {
							return fmt.Errorf("misses %v (ts %d, now %d, staleness %v)", op.id, op.ts, now, g.Staleness)
						}
					}
					return nil
				})
				check(t, "strong", g.Strong, func() error {
					if !stable || reps[r].committed != len(committed) {
						return fmt.Errorf("not the whole committed order")
					}
					return nil
				})
				s.Observe(Get(key), st, stable)
				reads = append(reads, modelView{key: key, contents: got})
			}
		}
	})
}

// check fails t if the view claims a guarantee whose truth check fails.
func check(t *rapid.T, name string, claimed bool, truth func() error) {
	if !claimed {
		return
	}
	if err := truth(); err != nil {
		t.Fatalf("view claims %s but %v", name, err)
	}
}

func missing(have, want map[OpID]bool) (OpID, bool) {
	for id := range want {
		if !have[id] {
			return id, true
		}
	}
	return OpID{}, false
}

// TestSessionClaimsSomething guards the property test against a Check that
// never claims anything: in a session on one up-to-date replica every
// guarantee holds.
func TestSessionClaimsSomething(t *testing.T) {
	s := NewSession()
	s.now = func() time.Time { return time.UnixMilli(1000) }
	w := writeStamp(vv{1: 1}, 0, 1, 1)
	w.StableTime = 1000 << hlcLogicalBits
	s.Observe(Put("k", nil), w, false)
	r := stamp(vv{1: 1}, 0)
	r.StableTime = 1000 << hlcLogicalBits
	g := s.Check(Get("k"), r, false)
	if !g.ReadMyWrites || !g.MonotonicReads || !g.Causal || !g.Bounded || g.Staleness != 0 || g.Strong {
		t.Fatalf("guarantees %v", g)
	}
}
