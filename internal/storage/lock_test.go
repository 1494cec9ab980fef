package storage

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// A second Open of a directory in use says so, naming the directory and
// its lock file; the first Store is unaffected.
func TestOpenLockedDirectory(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = Open(Options{Dir: dir})
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
	for _, want := range []string{dir, filepath.Join(dir, "LOCK"), "another running replica"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("second Open: %q does not mention %q", err, want)
		}
	}
	if _, err := s.LastIndex(); err != nil {
		t.Errorf("first Store after a refused second Open: %v", err)
	}
}
