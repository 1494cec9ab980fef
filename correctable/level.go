package correctable

import (
	"cmp"
	"fmt"
)

// Level is a consistency level: a rank that orders levels from weakest to
// strongest, and a name for people. Two levels are equal when both rank and
// name are equal; strength compares ranks only. Level is comparable and
// may be used as a map key.
//
// The standard levels are spaced 100 apart so that a binding may declare
// its own levels in between or below (for example a cache level of rank 50,
// weaker than Eventual). The zero Level is not a level: IsZero reports it.
type Level struct {
	rank int
	name string
}

// Standard levels: the six consistency guarantees of Pileus (SOSP 2013, §3),
// in the total order this package uses. Pileus orders them only partially
// (monotonic reads and read-my-writes are incomparable); bindings that offer
// both choose which one they deliver first, and this order is the default.
var (
	// Eventual: any replica's state; the weakest standard level.
	Eventual = NewLevel("eventual", 100)
	// MonotonicReads: never older than what this session read before.
	MonotonicReads = NewLevel("monotonic-reads", 200)
	// ReadMyWrites: includes every write of this session.
	ReadMyWrites = NewLevel("read-my-writes", 300)
	// Causal: includes everything this session read or wrote, and their
	// causal past.
	Causal = NewLevel("causal", 400)
	// BoundedStaleness: no older than a bound on time.
	BoundedStaleness = NewLevel("bounded-staleness", 500)
	// Strong: linearizable; the strongest standard level.
	Strong = NewLevel("strong", 600)
)

// NewLevel returns the level with the given name and rank. A higher rank is
// a stronger level. Bindings declare their own levels with it.
func NewLevel(name string, rank int) Level {
	return Level{rank: rank, name: name}
}

// Rank returns the level's rank; higher is stronger.
func (l Level) Rank() int { return l.rank }

// Name returns the level's name.
func (l Level) Name() string { return l.name }

// IsZero reports whether l is the zero Level, which names no level.
func (l Level) IsZero() bool { return l == Level{} }

// Compare returns -1 if l is weaker than o, +1 if l is stronger, and 0 if
// both have the same rank.
func (l Level) Compare(o Level) int { return cmp.Compare(l.rank, o.rank) }

// AtLeast reports whether l is at least as strong as o.
func (l Level) AtLeast(o Level) bool { return l.rank >= o.rank }

// String returns the level's name, or its rank when it has no name.
func (l Level) String() string {
	if l.name == "" {
		return fmt.Sprintf("level(%d)", l.rank)
	}
	return l.name
}
