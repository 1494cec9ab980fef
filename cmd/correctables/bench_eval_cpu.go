package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The CPU the bench process got during a step. Every evaluation command
// runs its replicas, clients and emulated links in this one process, so on
// a shared machine its throughput is bounded by the CPU the scheduler gives
// it, not only by the emulated network. Linux keeps, per thread, the time
// spent running and the time spent runnable but waiting for a CPU
// (/proc/self/task/*/schedstat, "sched_info"); the sum over the threads,
// per second of the step, is the cores the process used and the cores'
// worth it waited. A wait several times the use means that the process was
// starved: a step that saturates then saturates on the machine.

// cpuSample is the process's running and waiting time at one moment.
type cpuSample struct {
	at        time.Time
	run, wait time.Duration
	ok        bool // false where schedstat is not available
}

// sampleCPU reads the schedstat of every thread of this process. Threads
// that exit between two samples take their time with them; the Go runtime
// rarely ends a thread, so the sum is close.
func sampleCPU() cpuSample {
	s := cpuSample{at: time.Now()}
	files, err := filepath.Glob("/proc/self/task/*/schedstat")
	if err != nil || len(files) == 0 {
		return s
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread exited
		}
		run, wait, err := parseSchedstat(string(b))
		if err != nil {
			return s
		}
		s.run += run
		s.wait += wait
	}
	s.ok = true
	return s
}

// parseSchedstat parses one schedstat line: nanoseconds on the CPU,
// nanoseconds waiting on a run queue, and time slices.
func parseSchedstat(line string) (run, wait time.Duration, err error) {
	f := strings.Fields(line)
	if len(f) < 2 {
		return 0, 0, fmt.Errorf("schedstat %q: want at least two fields", line)
	}
	r, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("schedstat %q: %w", line, err)
	}
	w, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("schedstat %q: %w", line, err)
	}
	return time.Duration(r), time.Duration(w), nil
}

// cores returns the cores used and the cores' worth of waiting between s
// and a later sample; ok is false if either sample is unavailable.
func (s cpuSample) cores(later cpuSample) (used, waited float64, ok bool) {
	el := later.at.Sub(s.at).Seconds()
	if !s.ok || !later.ok || el <= 0 {
		return 0, 0, false
	}
	return (later.run - s.run).Seconds() / el, (later.wait - s.wait).Seconds() / el, true
}

// cpuCells formats cores for the table and the CSV ("-" when unknown).
func cpuCells(used, waited float64, ok bool) (string, string) {
	if !ok {
		return "-", "-"
	}
	return strconv.FormatFloat(used, 'f', 2, 64), strconv.FormatFloat(waited, 'f', 2, 64)
}
