package client_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the tests if any goroutine outlives them: the prober, the
// Invoke goroutines and the gRPC connections must all end at Close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
