package lease_test

import (
	"slices"
	"testing"
	"time"

	"github.com/lockwarden/lockwarden/internal/etcdtest"
)

// LockKeys lists the lock keys under a name prefix, and nothing else: not a lock whose name
// merely starts the same way without the prefix, not a released key, not a queue entry.
func TestLockKeys(t *testing.T) {
	e := newEnv(t)
	eng := e.engine(etcdtest.NewClient(t, []string{e.srv.Endpoint()}))
	s := e.session(eng, 5*time.Second)
	for _, k := range []string{"ns/a", "ns/a/slot/1", "ns/a/slot/2", "ns/ab/slot/1"} {
		if _, err := s.Grant(ctx(t), k, "uid"); err != nil {
			t.Fatalf("Grant(%s) = %v", k, err)
		}
	}
	tok, err := s.Grant(ctx(t), "ns/a/slot/3", "uid")
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Release(ctx(t), "ns/a/slot/3", tok); err != nil {
		t.Fatal(err)
	}
	got, err := eng.LockKeys(ctx(t), "ns/a/slot/")
	if err != nil {
		t.Fatalf("LockKeys = %v", err)
	}
	if want := []string{"ns/a/slot/1", "ns/a/slot/2"}; !slices.Equal(got, want) {
		t.Errorf("LockKeys(ns/a/slot/) = %q, want %q", got, want)
	}
	for _, bad := range []string{"", "/ns"} {
		if _, err := eng.LockKeys(ctx(t), bad); err == nil {
			t.Errorf("LockKeys(%q) = nil error, want invalid", bad)
		}
	}
}
