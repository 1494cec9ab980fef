package storage

import "testing"

// The removal record survives a reopen; a fresh store has none.
func TestMarkRemovedSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if why, ok, err := s.Removed(); err != nil || ok || why != "" {
		t.Fatalf("fresh store: Removed() = %q, %v, %v; want none", why, ok, err)
	}
	if err := s.MarkRemoved("member 2 refused its messages"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkRemoved("x"); err == nil {
		t.Error("MarkRemoved on a closed store succeeded")
	}
	s, err = Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if why, ok, err := s.Removed(); err != nil || !ok || why != "member 2 refused its messages" {
		t.Fatalf("after reopen: Removed() = %q, %v, %v; want the recorded reason", why, ok, err)
	}
}
