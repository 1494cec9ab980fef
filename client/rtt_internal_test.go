package client

import (
	"testing"
	"time"
)

// An endpoint's round-trip estimate is the median of its last window of
// samples, kept up to date as samples arrive (route reads it for every
// operation instead of sorting the samples each time).
func TestEndpointRTTIsTheMedianOfTheWindow(t *testing.T) {
	var e endpoint
	if got := e.rttLocked(); got != 0 {
		t.Fatalf("no samples: rtt %v, want 0", got)
	}
	ms := time.Millisecond
	for i, tc := range []struct{ sample, want time.Duration }{
		{5 * ms, 5 * ms},  // [5]
		{1 * ms, 5 * ms},  // [5 1]: the upper middle
		{3 * ms, 3 * ms},  // [5 1 3]
		{10 * ms, 3 * ms}, // [10 1 3]: 5 left the window
		{9 * ms, 9 * ms},  // [10 9 3]
		{8 * ms, 9 * ms},  // [10 9 8]
		{1 * ms, 8 * ms},  // [1 9 8]
	} {
		e.addSampleLocked(tc.sample, 3)
		if got := e.rttLocked(); got != tc.want {
			t.Fatalf("sample %d (%v): rtt %v, want %v (window %v)", i, tc.sample, got, tc.want, e.samples)
		}
	}
}
