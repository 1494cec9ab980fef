package replica

import (
	"cmp"
	"encoding/binary"
	"maps"
	"slices"
)

// readCtx is the context of a ReadIndex request: this incarnation's random
// id, then the read's number. raft hands back any read state it receives,
// also one answering a request of an earlier incarnation (before a crash)
// whose counter restarted at the same number; the incarnation tells them
// apart.
func readCtx(incarnation, id uint64) []byte {
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, incarnation), id)
}

// parseReadCtx returns the read's number, or 0 if the context is not one
// of this incarnation's.
func parseReadCtx(incarnation uint64, b []byte) uint64 {
	if len(b) != 16 || binary.BigEndian.Uint64(b) != incarnation {
		return 0
	}
	return binary.BigEndian.Uint64(b[8:])
}

func sortedKeys[V any](m map[uint64]V) []uint64 { return slices.Sorted(maps.Keys(m)) }

func sortedIDs[V any](m map[OpID]V) []OpID {
	return slices.SortedFunc(maps.Keys(m), func(a, b OpID) int {
		if c := cmp.Compare(a.Origin, b.Origin); c != 0 {
			return c
		}
		return cmp.Compare(a.Seq, b.Seq)
	})
}
