//go:build race

package server

// raceEnabled: the race detector slows byte-by-byte work (hashing megabyte
// values) about a hundredfold; tests that move many megabytes size down.
const raceEnabled = true
