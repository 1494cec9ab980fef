package correctable

import "errors"

// Errors returned by the producer side (Resolver), by Invoke and by the
// combinators. They are wrapped with context; test for them with errors.Is.
var (
	// ErrClosed is returned by Resolver methods called after the
	// Correctable has closed, and by an Emitter after the final view.
	ErrClosed = errors.New("correctable: already closed")

	// ErrWeakerLevel is returned when a view claims a level weaker than
	// the view before it. The view is dropped.
	ErrWeakerLevel = errors.New("correctable: view weaker than the previous one")

	// ErrTooManyViews is returned by Resolver.Update once a Correctable
	// holds MaxViews preliminary views. The view is dropped.
	ErrTooManyViews = errors.New("correctable: too many preliminary views")

	// ErrNothingToConfirm is returned when a view is marked Confirmed but
	// there is no previous view whose value it could confirm.
	ErrNothingToConfirm = errors.New("correctable: confirmation without a previous view")

	// ErrNilError is returned by Resolver.Fail when called with a nil error.
	ErrNilError = errors.New("correctable: Fail called with a nil error")

	// ErrInvalidLevels is returned (through the returned Correctable) by
	// Invoke when the requested levels are not declared by the binding, are
	// not ordered weakest to strongest, or when the binding declares no
	// levels or levels out of order.
	ErrInvalidLevels = errors.New("correctable: invalid consistency levels")

	// ErrUnrequestedLevel is returned by an Emitter when the binding emits
	// a view at a level the invocation did not request. The view is dropped.
	ErrUnrequestedLevel = errors.New("correctable: view at a level that was not requested")

	// ErrIncomplete closes a Correctable when its binding's Submit returned
	// without error but without emitting the final view.
	ErrIncomplete = errors.New("correctable: binding returned without a final view")

	// ErrLevelNotReached closes the Correctable returned by FirstAtLeast
	// when its input closed without a view at the requested level.
	ErrLevelNotReached = errors.New("correctable: closed below the requested level")
)
