package loadgen

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is the kernel's USER_HZ, the unit of utime and stime in
// /proc/PID/stat: 100 on every Linux architecture Go supports (reading
// sysconf(_SC_CLK_TCK) would need cgo).
const clockTicks = 100

// ProcCPU returns the user+system CPU time process pid has used, from
// /proc/PID/stat (pid 0: this process).
func ProcCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(procPath(pid, "stat"))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(b)
}

// parseStatCPU reads utime and stime (fields 14 and 15) of a /proc/PID/stat
// line. The command name (field 2) is in parentheses and may hold spaces or
// parentheses: fields are counted from the last ')'.
func parseStatCPU(b []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("proc stat: no command name in %q", b)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime is field 14, stime 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("proc stat: %d fields after the command name", len(f))
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("proc stat: utime %q stime %q", f[11], f[12])
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// ProcPeakRSS returns the peak resident set size (VmHWM) of process pid in
// bytes, from /proc/PID/status (pid 0: this process).
func ProcPeakRSS(pid int) (uint64, error) {
	b, err := os.ReadFile(procPath(pid, "status"))
	if err != nil {
		return 0, err
	}
	return parseStatusKB(b, "VmHWM")
}

func parseStatusKB(b []byte, field string) (uint64, error) {
	for _, line := range strings.Split(string(b), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || name != field {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("proc status: %s: %q", field, rest)
		}
		kb, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("proc status: %s: %w", field, err)
		}
		return kb * 1024, nil
	}
	return 0, fmt.Errorf("proc status: no %s", field)
}

// ResetPeakRSS resets process pid's peak RSS to its current RSS (writing 5
// to /proc/PID/clear_refs, Linux 4.0 and later; needs the right to write
// it: the process's owner or root), so that VmHWM then measures a window.
func ResetPeakRSS(pid int) error {
	return os.WriteFile(procPath(pid, "clear_refs"), []byte("5"), 0)
}

func procPath(pid int, file string) string {
	if pid == 0 {
		return "/proc/self/" + file
	}
	return "/proc/" + strconv.Itoa(pid) + "/" + file
}

// Procs measures a set of server processes over a measured window.
type Procs struct {
	PIDs []int // 0 is this process
	// Note goes into ServerStats.Note.
	Note string

	cpu0      time.Duration
	resetPeak bool
}

// Begin resets the processes' peak RSS (if it can) and reads their CPU time;
// call it at the start of the window.
func (p *Procs) Begin() {
	p.resetPeak = true
	for _, pid := range p.PIDs {
		if ResetPeakRSS(pid) != nil {
			p.resetPeak = false
		}
	}
	p.cpu0 = p.cpu()
}

func (p *Procs) cpu() time.Duration {
	var sum time.Duration
	for _, pid := range p.PIDs {
		d, err := ProcCPU(pid)
		if err == nil {
			sum += d
		}
	}
	return sum
}

// End returns what the processes used since Begin: CPU summed, peak RSS the
// largest (since Begin if it could reset the peaks, else over the
// processes' lifetimes, and the note says so).
func (p *Procs) End() *ServerStats {
	s := &ServerStats{CPU: p.cpu() - p.cpu0, Procs: len(p.PIDs), Note: p.Note}
	for _, pid := range p.PIDs {
		if rss, err := ProcPeakRSS(pid); err == nil {
			s.PeakRSS = max(s.PeakRSS, rss)
		}
	}
	if !p.resetPeak {
		s.Note = strings.TrimPrefix(s.Note+"; peak RSS over the processes' lifetimes", "; ")
	}
	return s
}
