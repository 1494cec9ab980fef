package storage

import "golang.org/x/sys/unix"

// fallocate allocates the first size bytes of the file fd and sets its
// size to at least size (mode 0: not FALLOC_FL_KEEP_SIZE). Errors are
// ignored (see preallocFS.extend).
func fallocate(fd uintptr, size int64) {
	_ = unix.Fallocate(int(fd), 0, 0, size)
}
