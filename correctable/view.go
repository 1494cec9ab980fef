package correctable

import "time"

// View is one result of an operation: a value and the consistency level it
// satisfies. A Correctable delivers its views in order of strength.
type View[T any] struct {
	// Value is the result as seen at Level.
	Value T
	// Level is the consistency level the value satisfies.
	Level Level
	// Final reports that this is the last view: the Correctable closed
	// with it.
	Final bool
	// Confirmed reports that the storage confirmed the previous view's
	// value without sending it again (a payload-free confirmation); Value
	// then holds the previous view's value.
	Confirmed bool
	// Elapsed is the time from the invocation to the arrival of the view.
	Elapsed time.Duration
	// Stamp is opaque to this package: bindings use it to carry the replica
	// state the view was read at (for example a version vector).
	Stamp any
}

// State is the state of a Correctable (Correctables §3.1, Figure 3).
type State int

const (
	// StateUpdating: not closed yet; preliminary views may still arrive.
	StateUpdating State = iota
	// StateFinal: closed with a final view.
	StateFinal
	// StateError: closed with an error.
	StateError
)

// String returns the state's name.
func (s State) String() string {
	switch s {
	case StateUpdating:
		return "updating"
	case StateFinal:
		return "final"
	case StateError:
		return "error"
	default:
		return "state(?)"
	}
}
