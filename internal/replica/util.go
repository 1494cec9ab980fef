package replica

import (
	"cmp"
	"encoding/binary"
	"maps"
	"slices"
)

func readCtx(id uint64) []byte { return binary.BigEndian.AppendUint64(nil, id) }

func parseReadCtx(b []byte) uint64 {
	if len(b) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(b)
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
