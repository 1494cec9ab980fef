package netem

import (
	"syscall"
	"time"
)

// preciseSleepUntil returns at t or shortly after (tens of microseconds):
// it sleeps in nanosleep(2), which holds the calling goroutine's thread
// (the runtime hands its processor to others meanwhile). Callers wait on a
// runtime timer first, so the sleep is at most timerSlack.
func preciseSleepUntil(t time.Time) {
	d := time.Until(t) - nanosleepOvershoot
	if d <= 0 {
		return
	}
	ts := syscall.NsecToTimespec(int64(d))
	for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
	}
}
