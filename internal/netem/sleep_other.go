//go:build !linux

package netem

import "time"

// preciseSleepUntil returns at t or after: elsewhere than Linux it is a
// runtime sleep, as precise as the platform's timers.
func preciseSleepUntil(t time.Time) {
	if d := time.Until(t); d > 0 {
		time.Sleep(d)
	}
}
