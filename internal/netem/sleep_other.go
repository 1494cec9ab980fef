//go:build !linux

package netem

import "time"

// preciseTimer is the runtime's timers elsewhere than Linux: as precise as
// the platform's.
type preciseTimer struct{}

func newPreciseTimer() *preciseTimer { return nil }

func (t *preciseTimer) sleepUntil(at time.Time) {
	if d := time.Until(at); d > 0 {
		time.Sleep(d)
	}
}

func (t *preciseTimer) close() {}
