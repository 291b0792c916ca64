package controllers

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// Review of fenced slots (issue 22): slot cases of the term rules the slot tests do not
// cover, as pure decisions on slotView / slotCandidates / storeSlot (slots_internal_test.go's
// helpers).

// TestReview22RetiredSlotDiscardsUnpublishedGrant: spec.slots was lowered from 2 to 1 while
// slot 1's grant to b was in flight (its etcd create committed; its status write then failed
// on the resourceVersion the spec edit changed). Slot 1 is now retired: it must grant
// nothing, and no pod leads by an unpublished grant, so the grant is deleted. Adopting it
// publishes b Held in a slot that no longer exists, a term that starts after the shrink: with
// spec.slots 1, a (slot 0) and b (slot 1) then both lead.
func TestReview22RetiredSlotDiscardsUnpublishedGrant(t *testing.T) {
	pods := slotPods("a", "b", "c")
	unpublished := grant{holderUID: "uid-b", token: 105, rec: record{Name: "b", Phase: lockv1.PhaseHeld, Strategy: lockv1.StrategyOldestReady,
		LeaseSeconds: 10, Lock: "lock-uid", Containers: []containerMark{{Name: "app", ID: "containerd://app-0"}}}}

	t.Run("slot listed without a term", func(t *testing.T) {
		real := slotLockOf(1, map[int32]slotTerm{0: {pod: "a", token: 100}})
		pending := real.Status.SlotView(1)
		pending.Phase = lockv1.PhasePending
		real.Status.SetSlot(1, pending, false)
		in, s := slotInput(real, 1, pods)
		if !s.retired {
			t.Fatalf("slot 1 of a 1-slot lock not retired")
		}
		in.g = unpublished
		if d := decide(&in); d.verb != actDiscard {
			t.Errorf("retired slot 1 with an unpublished grant to b: decide = %+v (verb %d), want discard (%d): a removed slot grants nothing", d, d.verb, actDiscard)
		}
	})

	t.Run("slot found only by its key", func(t *testing.T) {
		real := slotLockOf(1, map[int32]slotTerm{0: {pod: "a", token: 100}, 2: {pod: "c", token: 102, releasing: true}})
		if n := slotCount(real, "ns/l", []string{"ns/l/slot/1", "ns/l/slot/2"}); n != 3 {
			t.Fatalf("slotCount = %d, want 3", n)
		}
		in, _ := slotInput(real, 1, pods)
		in.g = unpublished
		d := decide(&in)
		if d.verb == actAdopt {
			// What the adoption publishes: b Held in slot 1 next to a Held in slot 0.
			v, s := slotView(real, 1)
			st := v.Status.DeepCopy()
			publishGrant(st, "b", in.g, 1, lockv1.ReasonGranted, metav1.Now())
			after, _ := storeSlot(s, st, true)
			held := 0
			for i := range after.Status.SlotCount() {
				if after.Status.SlotView(i).Phase == lockv1.PhaseHeld {
					held++
				}
			}
			t.Errorf("retired slot 1: decide adopts b's unpublished grant: %d slots Held with spec.slots 1 (slotsHeld %q), want discard", held, after.Status.SlotsHeld)
		} else if d.verb != actDiscard {
			t.Errorf("retired slot 1: decide = %+v, want discard", d)
		}
	})
}

// TestReview22PreferredPreemptsOneSlot: strategy Preferred, spec.preferredHolder p, two
// slots held by a and b, p eligible for the lock delay and holding no slot. p can take one
// slot: one term is preempted. Each slot's turn judges preemption on its own view, so both
// a's and b's terms end for one preferred pod, and the slot p does not get goes through
// Releasing and the delay for nothing (then back to a pod with a new token): a pod that keeps
// its slot should keep its term.
func TestReview22PreferredPreemptsOneSlot(t *testing.T) {
	pods := slotPods("a", "b", "p")
	real := slotLockOf(2, map[int32]slotTerm{0: {pod: "a", token: 100}, 1: {pod: "b", token: 101}})
	real.Spec.Strategy, real.Spec.PreferredHolder = lockv1.StrategyPreferred, "p"

	preempted := 0
	for i := range int32(2) {
		in, s := slotInput(real, i, pods)
		in.g.rec.Strategy = lockv1.StrategyPreferred
		in.clocks.preferred = lockDly * time.Second
		d := decide(&in)
		if d.verb != actRelease {
			continue
		}
		if d.reason != lockv1.ReasonPreempted {
			t.Fatalf("slot %d: decide = %+v, want release for Preempted or wait", i, d)
		}
		preempted++
		st := in.status.DeepCopy()
		publishReleasing(st, d.reason)
		s.real = real
		real, _ = storeSlot(s, st, true)
	}
	if preempted != 1 {
		t.Errorf("one preferred pod without a slot preempted %d slots' terms, want 1: %s", preempted, real.Status.SlotsHeld)
	}
}

// TestReview22ShrinkGrantsNoSlotOverN: spec.slots lowered from 3 to 2 while slot 1 had no
// term: slot 2 (c) retires through Releasing and the lock delay, during which c may still
// lead (its validity ends only once it reads Releasing, up to the delay). Granting slot 1 to
// d during that wait makes three pods (a, c, d) hold valid terms at once under spec.slots 2;
// before the shrink only two did. Counted across the lock, a grant waits while the lock's
// open terms (Held or Releasing, retired slots included) are already N.
func TestReview22ShrinkGrantsNoSlotOverN(t *testing.T) {
	pods := slotPods("a", "c", "d")
	real := slotLockOf(2, map[int32]slotTerm{0: {pod: "a", token: 100}, 2: {pod: "c", token: 102, releasing: true}})
	in, _ := slotInput(real, 1, pods)
	open := 0
	for i := range real.Status.SlotCount() {
		if real.Status.SlotView(i).HolderUID != "" {
			open++
		}
	}
	d := decide(&in)
	if d.verb == actGrant {
		t.Errorf("slot 1 with spec.slots 2 while a holds slot 0 and c's removed slot 2 waits its lock delay: decide grants %s: %d pods with open terms, want wait (%d open terms already)",
			d.next.Name, open+1, open)
	}
}

// TestReview22RegrownSlotKeepsItsTokensGrowing: slot 2 published q's term with token 80;
// spec.slots was lowered to 2, slot 2's term ended and the slot left status.slots (and with
// it its maxFencingToken); etcd was then restored as documented (--bump-revision
// --mark-compacted) from a snapshot taken before token 80, which holds a slot 2 grant to p
// with token 50; spec.slots is raised to 3 again. For a one-slot lock the same leftover is
// at or below status.maxFencingToken and is deleted as stale (actDropStale): here the
// regrown slot has no maximum left, so the grant is adopted and slot 2 publishes token 50
// after token 80, which every resource of slot 2 that saw 80 refuses (a slot's tokens only
// grow).
func TestReview22RegrownSlotKeepsItsTokensGrowing(t *testing.T) {
	pods := slotPods("a", "b", "p", "q")
	real := slotLockOf(3, map[int32]slotTerm{0: {pod: "a", token: 100}, 1: {pod: "b", token: 101}, 2: {pod: "q", token: 80}})

	// Shrink: slot 2 retired, its term ended, key deleted: stored without a term, dropped.
	real.Spec.Slots = 2
	_, s := slotView(real, 2)
	st := real.Status.SlotView(2)
	publishEnd(&st, lockv1.ReasonSlotRemoved, metav1.Now())
	st.Phase = lockv1.PhaseSuspended
	real, _ = storeSlot(s, &st, false)
	if real.Status.SlotCount() != 2 {
		t.Fatalf("slot 2 not removed: %+v", real.Status.Slots)
	}

	// Restore, then grow.
	real.Spec.Slots = 3
	in, _ := slotInput(real, 2, pods)
	in.g = grant{holderUID: "uid-p", token: 50, rec: record{Name: "p", Phase: lockv1.PhaseHeld, Strategy: lockv1.StrategyOldestReady,
		LeaseSeconds: 10, Lock: "lock-uid", Containers: []containerMark{{Name: "app", ID: "containerd://app-0"}}}}
	in.rev = 1000
	in.restoredStale = true // what Compacted would answer for any revision at or below 80
	if d := decide(&in); d.verb == actAdopt {
		t.Errorf("regrown slot 2 with a restored grant of token 50 after its term of token 80: decide adopts it (publishes token 50 after 80), want it dropped as stale or reported as a regression")
	}
}
