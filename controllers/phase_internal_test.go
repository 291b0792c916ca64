package controllers

import (
	"testing"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// TestPhaseCounts: the per-phase counts follow each lock's latest phase, and a forgotten
// lock leaves them.
func TestPhaseCounts(t *testing.T) {
	r := &Reconciler{}
	r.init()
	steps := []struct {
		key   string
		phase lockv1.Phase
		want  map[lockv1.Phase]int
	}{
		{"a", lockv1.PhasePending, map[lockv1.Phase]int{lockv1.PhasePending: 1}},
		{"a", lockv1.PhaseHeld, map[lockv1.Phase]int{lockv1.PhaseHeld: 1}},
		{"b", lockv1.PhaseHeld, map[lockv1.Phase]int{lockv1.PhaseHeld: 2}},
		{"b", lockv1.PhaseHeld, map[lockv1.Phase]int{lockv1.PhaseHeld: 2}},
		{"a", lockv1.PhaseReleasing, map[lockv1.Phase]int{lockv1.PhaseHeld: 1, lockv1.PhaseReleasing: 1}},
		{"a", "", map[lockv1.Phase]int{lockv1.PhaseHeld: 1}},
		{"c", "", map[lockv1.Phase]int{lockv1.PhaseHeld: 1}},
	}
	for i, s := range steps {
		got := r.setPhase(s.key, s.phase)
		for _, p := range []lockv1.Phase{lockv1.PhasePending, lockv1.PhaseHeld, lockv1.PhaseReleasing, lockv1.PhaseSuspended} {
			if got[p] != s.want[p] {
				t.Errorf("step %d (%s -> %q): %s = %d, want %d", i, s.key, s.phase, p, got[p], s.want[p])
			}
		}
	}
}
