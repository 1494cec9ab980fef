package netem

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// preciseTimer is a Linux timerfd read through the runtime's netpoller: the
// poller wakes when the fd fires, to the microsecond, while the runtime's
// own timers wait in whole milliseconds (timerSlack). A goroutine waiting on
// it holds no thread and no processor.
type preciseTimer struct {
	fd int
	f  *os.File
}

func newPreciseTimer() *preciseTimer {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil
	}
	// A non-blocking fd makes a pollable File: Read parks the goroutine.
	return &preciseTimer{fd: fd, f: os.NewFile(uintptr(fd), "timerfd")}
}

// sleepUntil returns at t or shortly after (tens of microseconds). A nil
// timer (no timerfd) sleeps on the runtime's timers.
func (t *preciseTimer) sleepUntil(at time.Time) {
	d := time.Until(at)
	if d <= 0 {
		return
	}
	if t == nil {
		time.Sleep(d)
		return
	}
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	if err := unix.TimerfdSettime(t.fd, 0, &spec, nil); err != nil {
		time.Sleep(d)
		return
	}
	var buf [8]byte // the expiration count
	if _, err := t.f.Read(buf[:]); err != nil {
		time.Sleep(time.Until(at))
	}
}

func (t *preciseTimer) close() {
	if t != nil {
		t.f.Close()
	}
}
