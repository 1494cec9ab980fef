package history

import (
	"encoding/json"
	"os"
	"testing"
	"time"
)

// TestDumpedHistory checks a history that an end-to-end test wrote as JSON
// (tests/e2e: CORRECTABLES_E2E_DUMP), restricted to one key if
// CORRECTABLES_DUMP_KEY is set: the way to look again at a failure.
//
//	CORRECTABLES_DUMP_JSON=/tmp/h.json go test ./internal/history -run DumpedHistory -v
func TestDumpedHistory(t *testing.T) {
	path := os.Getenv("CORRECTABLES_DUMP_JSON")
	if path == "" {
		t.Skip("CORRECTABLES_DUMP_JSON is not set")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var recs []Record
	if err := json.Unmarshal(b, &recs); err != nil {
		t.Fatal(err)
	}
	key := os.Getenv("CORRECTABLES_DUMP_KEY")
	var sub []Record
	for _, r := range recs {
		if key == "" || r.Op.Key == key {
			sub = append(sub, r)
		}
	}
	res, err := CheckLinearizable(sub, nil, 60*time.Second)
	if err != nil {
		t.Fatalf("%d records: %v: %v", len(sub), res, err)
	}
	t.Logf("%d records: %v", len(sub), res)
}
