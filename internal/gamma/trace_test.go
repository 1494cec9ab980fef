package gamma

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/correctables/correctables/client"
)

func TestTraceRoundTrip(t *testing.T) {
	ops := []Op{
		w("k", Hash([]byte("v1")), 0, 10),
		r("key with spaces\n\"quotes\"", Absent, 5, 6),
		{Key: "k", Value: Hash([]byte("v1")), Start: 11, Finish: 20, Strong: true},
	}
	var buf bytes.Buffer
	if err := WriteTrace(&buf, ops); err != nil {
		t.Fatal(err)
	}
	got, err := ReadTrace(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, ops) {
		t.Fatalf("read back %v, wrote %v", got, ops)
	}
}

func TestReadTraceRejects(t *testing.T) {
	for name, text := range map[string]string{
		"no header":        "w \"k\" 0000000000000001 0 1 weak\n",
		"empty":            "",
		"unknown kind":     TraceHeader + "\nx \"k\" 0000000000000001 0 1 weak\n",
		"unquoted key":     TraceHeader + "\nw k 0000000000000001 0 1 weak\n",
		"short value":      TraceHeader + "\nw \"k\" 1 0 1 weak\n",
		"write of nothing": TraceHeader + "\nw \"k\" - 0 1 weak\n",
		"finish < start":   TraceHeader + "\nr \"k\" - 5 1 weak\n",
		"bad level":        TraceHeader + "\nr \"k\" - 0 1 medium\n",
		"missing field":    TraceHeader + "\nr \"k\" - 0 1\n",
		"line too long":    TraceHeader + "\nr \"" + strings.Repeat("x", MaxTraceLine) + "\" - 0 1 weak\n",
	} {
		if _, err := ReadTrace(strings.NewReader(text)); !errors.Is(err, ErrBadTrace) {
			t.Errorf("%s: err %v, want ErrBadTrace", name, err)
		}
	}
}

// TestHashMatchesClient: the client's recorder and this package hash values
// the same way.
func TestHashMatchesClient(t *testing.T) {
	for _, v := range []string{"", "a", strings.Repeat("z", 128)} {
		if Hash([]byte(v)) != client.ValueHash([]byte(v)) {
			t.Fatalf("Hash(%q) differs from client.ValueHash", v)
		}
	}
}
