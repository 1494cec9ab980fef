package storage

import "golang.org/x/sys/unix"

const rawSyncSupported = true

// rawFdatasync is fdatasync(2) as a raw system call (see walFile),
// retried on EINTR as the standard library's own calls are.
func rawFdatasync(fd uintptr) error {
	for {
		_, _, e := unix.RawSyscall(unix.SYS_FDATASYNC, fd, 0, 0)
		switch e {
		case 0:
			return nil
		case unix.EINTR:
			continue
		default:
			return e
		}
	}
}
