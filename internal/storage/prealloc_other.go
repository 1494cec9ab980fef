//go:build !linux

package storage

// fallocate does nothing outside Linux: the log is written as Pebble makes
// it (see preallocFS).
func fallocate(fd uintptr, size int64) {}
