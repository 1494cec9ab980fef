package client

import "testing"

// TestShareOut: a batch reply's size is shared out over its calls so that
// the shares add up to it (Stats.BytesReceived stays the payload received)
// and differ by at most one byte; without a size, every call falls back to
// measuring its own reply.
func TestShareOut(t *testing.T) {
	for _, tc := range []struct {
		n int64
		k int
	}{{0, 1}, {7, 1}, {10, 3}, {2, 5}, {1 << 20, 512}, {1000003, 7}} {
		share := shareOut(tc.n, tc.k)
		sum, lo, hi := 0, int(tc.n), 0
		for i := range tc.k {
			s := share(i)
			sum += s
			lo, hi = min(lo, s), max(hi, s)
		}
		if int64(sum) != tc.n || hi-lo > 1 {
			t.Errorf("shareOut(%d, %d): shares sum to %d, from %d to %d", tc.n, tc.k, sum, lo, hi)
		}
	}
	if s := shareOut(-1, 3)(0); s != -1 {
		t.Errorf("shareOut without a size: %d, want -1", s)
	}
}
