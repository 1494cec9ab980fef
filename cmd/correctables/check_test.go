package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/correctables/correctables/internal/gamma"
)

func runCheck(args ...string) (string, error) { return output(newCheckCmd(), args...) }

func TestCheckGamma(t *testing.T) {
	dir := t.TempDir()
	ms := int64(time.Millisecond)
	v1, v2 := gamma.Hash([]byte("one")), gamma.Hash([]byte("two"))
	ops := []gamma.Op{
		{Key: "k", Write: true, Value: v1, Start: 0, Finish: ms},
		{Key: "k", Write: true, Value: v2, Start: 100 * ms, Finish: 101 * ms},
		{Key: "k", Value: v1, Start: 104 * ms, Finish: 105 * ms}, // overwritten 3 ms before it started
		{Key: "j", Write: true, Value: v1, Start: 0, Finish: ms},
		{Key: "j", Value: v1, Start: 2 * ms, Finish: 3 * ms},
	}
	var buf bytes.Buffer
	if err := gamma.WriteTrace(&buf, ops); err != nil {
		t.Fatal(err)
	}
	trace := filepath.Join(dir, "trace")
	if err := os.WriteFile(trace, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := runCheck("gamma", trace)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"2 reads, 3 writes", "positive Γ   1 (0.3333 of the values", "Γ            3ms\n", `3ms        "k"`} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	out, err = runCheck("gamma", "--threshold", "5ms", trace)
	if err != nil || !strings.Contains(out, "positive Γ   0 (") {
		t.Errorf("threshold 5ms: %v\n%s", err, out)
	}

	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte(gamma.TraceHeader+"\nw \"k\" - 0 1 weak\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := runCheck("gamma", bad); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("bad trace: %v, want an error naming line 2", err)
	}
	if _, err := runCheck("gamma", filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing file: no error")
	}
	if _, err := runCheck("gamma", "--threshold", "-1ms", trace); err == nil {
		t.Error("a negative threshold: no error")
	}
}
