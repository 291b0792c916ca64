package controllers

import (
	"testing"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// Second review of fenced slots (issue 22), of the fixes bca9d40 and 2b04bee: pure decisions
// on slotView / slotCandidates (slots_internal_test.go's helpers).

// TestReview22bFullSlotAdoptsNoUnpublishedGrant: spec.slots lowered from 3 to 2 while slot 1's
// grant to d was in flight: its etcd create committed, its status write then failed on the
// resourceVersion the spec edit changed (the usual way a shrink meets a grant). The next
// reconcile judges slot 1 with a holding slot 0 and c holding the removed slot 2, whose term
// has not even started Releasing yet: the lock's open terms are already spec.slots (full).
// 2b04bee makes such a slot grant nothing (decideNoHolder, endTerm), but decideUnpublished
// does not look at full: it adopts d's grant, which publishes d Held, and three pods (a, c,
// d) hold valid terms at once under spec.slots 2. No pod leads by an unpublished grant, so
// discarding it costs nothing; a grant decided on spec.slots 3 must not be published under 2.
func TestReview22bFullSlotAdoptsNoUnpublishedGrant(t *testing.T) {
	pods := slotPods("a", "c", "d")
	unpublished := grant{holderUID: "uid-d", token: 105, rec: record{Name: "d", Phase: lockv1.PhaseHeld, Strategy: lockv1.StrategyOldestReady,
		LeaseSeconds: 10, Lock: "lock-uid", Containers: []containerMark{{Name: "app", ID: "containerd://app-0"}}}}
	for _, listed := range []bool{false, true} {
		name := "slot 1 never listed"
		if listed {
			name = "slot 1 listed without a term"
		}
		t.Run(name, func(t *testing.T) {
			real := slotLockOf(2, map[int32]slotTerm{0: {pod: "a", token: 100}, 2: {pod: "c", token: 102}})
			if listed {
				pending := real.Status.SlotView(1)
				pending.Phase = lockv1.PhasePending
				real.Status.SetSlot(1, pending, false)
			}
			in, s := slotInput(real, 1, pods)
			if !s.full || s.retired {
				t.Fatalf("slot 1: full %v retired %v, want a full, declared slot", s.full, s.retired)
			}
			in.g = unpublished
			d := decide(&in)
			if d.verb == actAdopt {
				open := 1 // d, once adopted
				for i := range real.Status.SlotCount() {
					if real.Status.SlotView(i).HolderUID != "" {
						open++
					}
				}
				t.Errorf("slot 1 of spec.slots 2 while a (slot 0) and c (removed slot 2) hold terms: decide adopts d's unpublished grant: %d pods with open terms under spec.slots 2, want discard", open)
			} else if d.verb != actDiscard {
				t.Errorf("slot 1 full with an unpublished grant: decide = %+v, want discard", d)
			}
		})
	}
}
