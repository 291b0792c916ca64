package main

import (
	"fmt"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// A lock with spec.slots above 1 has one term per slot (issue 22). The verbs show each slot
// by reading it as a one-slot lock (slotLock), so that every rule they apply to a one-slot
// lock (wait left, release refusals, eligibility) applies to each slot unchanged; a lock of
// one slot is shown exactly as before slots existed.

// slotCount is how many slots the verbs show for l: spec.slots, or more while a slot above
// spec.slots - 1 still has a term (it stays listed until the term ends).
func slotCount(l *lockv1.DistributedLock) int32 {
	return max(l.Spec.EffectiveSlots(), l.Status.SlotCount())
}

// slotLock is a copy of l whose status is slot i's term in a one-slot lock's shape
// (status.SlotView).
func slotLock(l *lockv1.DistributedLock, i int32) *lockv1.DistributedLock {
	v := l.DeepCopy()
	v.Status = l.Status.SlotView(i)
	return v
}

// removedNote marks a slot at or above spec.slots, which is removed once its term ends.
func removedNote(l *lockv1.DistributedLock, slot int32) string {
	if slot < l.Spec.EffectiveSlots() {
		return ""
	}
	return fmt.Sprintf(" (being removed: spec.slots is %d)", l.Spec.EffectiveSlots())
}
