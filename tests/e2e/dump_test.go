package e2e

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/correctables/correctables/internal/history"
)

// dumpRecords writes the history as JSON to the file that
// CORRECTABLES_E2E_DUMP names, if it is set, so that a failed check can be
// run again offline (internal/history's TestDumpedHistory).
func dumpRecords(t *testing.T, records []history.Record) {
	path := os.Getenv("CORRECTABLES_E2E_DUMP")
	if path == "" {
		return
	}
	js, err := json.Marshal(records)
	if err == nil {
		err = os.WriteFile(path, js, 0o644)
	}
	if err != nil {
		t.Logf("writing the history to %s: %v", path, err)
		return
	}
	t.Logf("history written to %s", path)
}
