package controllers

import (
	"testing"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// Review 22g of 50704dd, 77632bd and 8b0ceed (a full slot's proven restart waits out the
// delay; an unpublished grant to the slot's own holder is adopted only while Held).

// TestReview22gFullUnpublishedRestartEndSkipsDelay: spec.slots 3. Slot 0 is x's, Releasing
// for 1 s (the crash's NotReady); slot 1 is a's; slot 2 is z's. x's container restarts with
// proof that the old process is gone, and slot 0 is not full (a and z: 2 < 3), so the turn
// ends x's term and grants x a new term (restartTerm; its grant records the end it makes,
// Ends{100, HolderRestarted}); its status write then fails on the resourceVersion of the edit
// that lowers spec.slots to 2. The next turn finds the slot full (a, and z in the removed
// slot 2) and the Releasing term's own unpublished grant: 50704dd's full branch publishes the
// end the grant records at once, with no grant. That is 22d's defect by another door: the
// proof is of x's OLD process only; the restarted one may have read Held before the
// Releasing write and lead token 100 until x's lock delay, and restartTerm is safe only
// because its new term is the same pod's. With the end published, slot 0 has no term and no
// delay, so once z's removed slot ends (full clears) slot 0 grants another pod at once,
// within x's delay: two pods under slot 0 (x's new process by 100, y by its new token), and
// x, a and y valid under spec.slots 2. decideReleasing's own rule for the same state (50704dd)
// is to wait the delay out and then end with no grant; the unpublished grant must not cut it.
func TestReview22gFullUnpublishedRestartEndSkipsDelay(t *testing.T) {
	in, pods, wait := fullRestartedX(t)
	// Without the unpublished grant, the full slot keeps x's delay (50704dd).
	if d := decide(&in); d.verb != actWait {
		t.Fatalf("slot 0 full, x Releasing for %v of %v, restarted with proof, x's own key: decide = %+v, want actWait", in.clocks.releasing, wait, d)
	}
	// restartTerm's grant (decided while spec.slots was 3), its status write lost.
	in.g = grant{holderUID: "uid-x", token: 105, rec: record{Name: "x", Phase: lockv1.PhaseHeld, Strategy: lockv1.StrategyOldestReady, LeaseSeconds: 10,
		Containers: []containerMark{{Name: "app", ID: "containerd://app-1"}}, Lock: in.uid,
		Ends: &endedTerm{Token: 100, Reason: lockv1.ReasonHolderRestarted, HolderUID: "uid-x"}}}
	d := decide(&in)
	if d.verb == actDiscard {
		in.g = grant{} // apply's releaseKey, then decide again in the same turn
		d = decide(&in)
	}
	if d.verb != actEnd {
		if d.verb == actAdopt || d.next != nil {
			t.Fatalf("slot 0 full, x within its delay: decide = %+v, want no new term while full", d)
		}
		return // x's Releasing term keeps its delay
	}
	if d.next != nil {
		t.Fatalf("slot 0 full: decide = %+v, a grant while full", d)
	}
	// The end published: slot 0 has no term. z's removed slot ends (attested, or its own
	// delay, which started before x's): full clears while x's delay still runs.
	d2, next, full2 := afterFullClears(pods)
	t.Errorf("slot 0 full, x Releasing for %v of its %v lock delay, restarted with proof, its unpublished restart grant found: decide = verb %d reason %q next %v: "+
		"x's term ended before its delay, with no grant; once full clears slot 0's next turn decides verb %d next %q (full %v) at once, while x's restarted process "+
		"may still lead token 100: two pods under slot 0, and x, a and %s valid under spec.slots 2. Want the grant discarded and x's Releasing term to wait its delay",
		in.clocks.releasing, wait, d.verb, d.reason, d.next, d2.verb, next, full2, next)
}
