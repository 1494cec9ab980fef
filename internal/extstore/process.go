package extstore

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// process is a server run as a child process, its output in a log file.
type process struct {
	cmd  *exec.Cmd
	log  string
	done chan error
}

// start runs name with args in dir, output to logPath. The child gets
// SIGKILL if this process dies first.
func start(dir, logPath, name string, args ...string) (*process, error) {
	out, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("extstore: %w", err)
	}
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("extstore: start %s: %w", name, err)
	}
	p := &process{cmd: cmd, log: logPath, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait(); out.Close() }()
	return p, nil
}

// exited reports whether the process has ended, with its log's tail.
func (p *process) exited() error {
	select {
	case err := <-p.done:
		p.done <- err
		tail, _ := os.ReadFile(p.log)
		if len(tail) > 2000 {
			tail = tail[len(tail)-2000:]
		}
		return fmt.Errorf("extstore: %s exited (%v); log %s ends:\n%s", p.cmd.Path, err, p.log, tail)
	default:
		return nil
	}
}

// stop sends SIGTERM to the process group, then SIGKILL after 10s.
func (p *process) stop() error {
	if p == nil {
		return nil
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		return errors.New("extstore: " + p.cmd.Path + " ignored SIGTERM for 10s; killed")
	}
}
