package client

import (
	"maps"
	"testing"
)

func TestCoversAll(t *testing.T) {
	st := func(cc uint64, vv map[uint64]uint64) Stamp { return Stamp{CommittedCount: cc, VV: vv} }
	rd := func(cc uint64, vv, readVV map[uint64]uint64) Stamp {
		return Stamp{CommittedCount: cc, VV: vv, ReadVV: readVV}
	}
	for _, tc := range []struct {
		name   string
		stamps []Stamp // nearest first
		want   int
	}{
		{"one", []Stamp{st(1, map[uint64]uint64{1: 1})}, 0},
		{"the farther covers the nearer", []Stamp{st(3, map[uint64]uint64{1: 3}), st(3, map[uint64]uint64{1: 5, 2: 1})}, 1},
		{"the nearer covers the farther", []Stamp{st(3, map[uint64]uint64{1: 5, 2: 1}), st(3, map[uint64]uint64{1: 3})}, 0},
		{"equal: the longer committed order", []Stamp{st(2, map[uint64]uint64{1: 5}), st(4, map[uint64]uint64{1: 5})}, 1},
		{"equal in all: the nearest", []Stamp{st(4, map[uint64]uint64{1: 5}), st(4, map[uint64]uint64{1: 5})}, 0},
		{"a missing stamp is covered", []Stamp{{}, st(0, map[uint64]uint64{2: 1})}, 1},
		{"concurrent", []Stamp{st(1, map[uint64]uint64{1: 2, 2: 1}), st(1, map[uint64]uint64{1: 1, 2: 9})}, -1},
		// With ReadVV: what each answer's result depends on, not all it holds.
		{"concurrent, but each holds what the other's read depends on", []Stamp{
			rd(1, map[uint64]uint64{1: 2, 2: 1}, map[uint64]uint64{1: 1, 2: 1}),
			rd(1, map[uint64]uint64{1: 1, 2: 9}, map[uint64]uint64{1: 1, 2: 1}),
		}, 0},
		{"concurrent; only the farther holds what both depend on", []Stamp{
			rd(1, map[uint64]uint64{1: 2, 2: 1}, map[uint64]uint64{1: 1, 2: 1}),
			rd(1, map[uint64]uint64{1: 1, 2: 9}, map[uint64]uint64{1: 1, 2: 5}),
		}, 1},
		{"concurrent, and the reads depend on both", []Stamp{
			rd(1, map[uint64]uint64{1: 2, 2: 1}, map[uint64]uint64{1: 2, 2: 1}),
			rd(1, map[uint64]uint64{1: 1, 2: 9}, map[uint64]uint64{1: 1, 2: 5}),
		}, -1},
		{"an answer without ReadVV depends on all it holds", []Stamp{
			st(1, map[uint64]uint64{1: 2, 2: 1}),
			rd(1, map[uint64]uint64{1: 1, 2: 9}, map[uint64]uint64{1: 1, 2: 5}),
		}, -1},
		{"the same answer with a ReadVV", []Stamp{
			rd(1, map[uint64]uint64{1: 2, 2: 1}, map[uint64]uint64{1: 1, 2: 1}),
			rd(1, map[uint64]uint64{1: 1, 2: 9}, map[uint64]uint64{1: 1, 2: 5}),
		}, 1},
		{"one of three covers", []Stamp{
			st(1, map[uint64]uint64{1: 2}),
			st(1, map[uint64]uint64{1: 2, 2: 3}),
			st(1, map[uint64]uint64{1: 1, 2: 1}),
		}, 1},
	} {
		if got := coversAll(tc.stamps); got != tc.want {
			t.Errorf("%s: coversAll = %d, want %d", tc.name, got, tc.want)
		}
	}
	u := unionVV([]Stamp{st(0, map[uint64]uint64{1: 2, 2: 1}), st(0, map[uint64]uint64{1: 1, 3: 4})})
	if want := map[uint64]uint64{1: 2, 2: 1, 3: 4}; !maps.Equal(u, want) {
		t.Errorf("unionVV = %v, want %v", u, want)
	}
	u = unionVV([]Stamp{rd(0, map[uint64]uint64{1: 2, 2: 1}, map[uint64]uint64{1: 1}), st(0, map[uint64]uint64{1: 1, 3: 4})})
	if want := map[uint64]uint64{1: 1, 3: 4}; !maps.Equal(u, want) {
		t.Errorf("unionVV with a ReadVV = %v, want %v", u, want)
	}
}
