package storage

import (
	"encoding/binary"
	"fmt"
)

// Key prefixes; see the layout in doc.go.
const (
	prefixVersion   = 'v'
	prefixHardState = 'h'
	prefixTruncated = 't'
	prefixSnapshot  = 's'
	prefixSnapFile  = 'f'
	prefixLog       = 'l'
	prefixOwn       = 'o'
	prefixRemoved   = 'r'
)

// formatVersion is the layout this code writes. A change of layout bumps
// it; Open refuses a version it does not know. Version 2 keeps snapshots in
// files (snapfile.go); version 1, which kept them inline, is still read, and
// becomes 2 with the first snapshot file.
const (
	formatVersion       = 2
	formatVersionInline = 1
)

var (
	keyVersion   = []byte{prefixVersion}
	keyHardState = []byte{prefixHardState}
	keyTruncated = []byte{prefixTruncated}
	keySnapshot  = []byte{prefixSnapshot}
	keySnapFile  = []byte{prefixSnapFile}
)

// indexedKeyLen is the length of a log or own-operation key.
const indexedKeyLen = 9

func indexedKey(prefix byte, i uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{prefix}, i)
}

// logKey is the key of the log entry at index i.
func logKey(i uint64) []byte { return indexedKey(prefixLog, i) }

// logEnd is the upper bound of every log key.
func logEnd() []byte { return []byte{prefixLog + 1} }

// ownKey is the key of the own operation with sequence number seq.
func ownKey(seq uint64) []byte { return indexedKey(prefixOwn, seq) }

// ownEnd is the upper bound of every own-operation key.
func ownEnd() []byte { return []byte{prefixOwn + 1} }

// decodeIndexedKey returns the integer of a log or own-operation key.
func decodeIndexedKey(prefix byte, k []byte) (uint64, error) {
	if len(k) != 9 || k[0] != prefix {
		return 0, fmt.Errorf("%w: key %x under prefix %q", ErrCorrupt, k, prefix)
	}
	return binary.BigEndian.Uint64(k[1:]), nil
}

// truncated is the dummy entry: the last entry dropped from the log by a
// compaction or a snapshot. Its term is kept for raft's log matching.
type truncated struct {
	Index, Term uint64
}

func (t truncated) encode() []byte {
	b := binary.BigEndian.AppendUint64(nil, t.Index)
	return binary.BigEndian.AppendUint64(b, t.Term)
}

func decodeTruncated(b []byte) (truncated, error) {
	if len(b) != 16 {
		return truncated{}, fmt.Errorf("%w: truncated state of %d bytes", ErrCorrupt, len(b))
	}
	return truncated{Index: binary.BigEndian.Uint64(b), Term: binary.BigEndian.Uint64(b[8:])}, nil
}
