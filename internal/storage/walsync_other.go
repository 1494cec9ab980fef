//go:build !linux

package storage

import "errors"

// Raw syncs are made on Linux only; elsewhere wrapWAL leaves the log's
// files as they are.
const rawSyncSupported = false

func rawFdatasync(fd uintptr) error { return errors.New("storage: raw fdatasync is Linux only") }
