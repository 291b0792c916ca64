package controllers

import "testing"

// TestBehindOwnWriteAfterConfirm (review 22f): an uncached read at another's write F2
// (confirm), then this replica's own write W2 in the same reconcile: a cached copy still at
// F2 is behind W2 and must be read uncached again.
func TestBehindOwnWriteAfterConfirm(t *testing.T) {
	m := newMemory()
	m.wrote("ns/lock", "uid", "W1")
	if !m.behindOwnWrite("ns/lock", "uid", "F2") {
		t.Fatalf("cache at F2 after own write W1: behindOwnWrite = false, want true")
	}
	m.confirm("ns/lock", "uid", "F2")
	if m.behindOwnWrite("ns/lock", "uid", "F2") {
		t.Errorf("cache at F2 after an uncached read returned F2: behindOwnWrite = true, want false")
	}
	m.wrote("ns/lock", "uid", "W2")
	if !m.behindOwnWrite("ns/lock", "uid", "F2") {
		t.Errorf("cache at F2 after own write W2 (F2 confirmed before it): behindOwnWrite = false, want true: a stale cache looks current")
	}
	if m.behindOwnWrite("ns/lock", "uid", "W2") {
		t.Errorf("cache at own write W2: behindOwnWrite = true, want false")
	}
}
