package correctable_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: every
// dispatcher, speculation and Invoke goroutine must end once its Correctable
// closed and its callbacks returned.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
