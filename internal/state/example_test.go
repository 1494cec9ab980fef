package state_test

import (
	"fmt"

	"github.com/correctables/correctables/internal/state"
)

// A replica executes ops tentatively, keeping each Undo, and rolls back a
// suffix in LIFO order when a new op must be ordered before it (Creek §4.2).
func Example_rollback() {
	s := state.New(state.DefaultLimits())
	s.Apply(state.Op{Kind: state.OpEnqueue, Key: "tickets", Value: []byte("A1")})
	s.Apply(state.Op{Kind: state.OpEnqueue, Key: "tickets", Value: []byte("A2")})

	// Tentative: a weak dequeue by client 1.
	r1, u1 := s.Apply(state.Op{Kind: state.OpDequeue, Key: "tickets"})
	fmt.Printf("tentative: %s #%d, %d left\n", r1.Value, r1.Int, r1.Len)

	// An op with an earlier timestamp arrives: roll back, execute it, re-execute.
	s.Revert(u1)
	r0, _ := s.Apply(state.Op{Kind: state.OpDequeue, Key: "tickets"})
	r1, _ = s.Apply(state.Op{Kind: state.OpDequeue, Key: "tickets"})
	fmt.Printf("reordered: %s #%d, then %s #%d, %d left\n", r0.Value, r0.Int, r1.Value, r1.Int, r1.Len)
	// Output:
	// tentative: A1 #1, 1 left
	// reordered: A1 #1, then A2 #2, 0 left
}
