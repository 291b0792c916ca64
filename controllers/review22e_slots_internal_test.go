package controllers

import (
	"testing"
	"time"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// Review 22e of 43e3767 (a full slot's Releasing term with proof of a restart gives its pod a
// new term within the lock delay).

// TestReview22eFullRestartOutlivesDelay: spec.slots lowered from 3 to 2. Slot 0 is x's,
// Releasing (the crash's NotReady) since t=0; slot 1 is a's; the removed slot 2 is z's, whose
// SlotRemoved Releasing was acknowledged at t=D/2 (the shrink came after x's crash; D is the
// lock delay). At t=D/2+1s x's container has restarted with proof that the old process is
// gone, and 43e3767 gives x a new term at once because x's delay still runs ("the old term
// may still count"). But what of x may still act under the old term is bounded by x's delay:
// the old process is gone, and the restarted one, if it read Held before the Releasing write,
// stops by t=D. The new term has a lease of its own and runs past t=D. So from t=D to t=3D/2
// (z's delay, during which z, cut off, may still act) x, a and z hold valid terms at once
// under spec.slots 2; without the new term only a and z would (x's Releasing waits out its
// delay, then ends with no grant). docs/slots.md: while the removed slots' terms end, no
// lower slot's "ending holder [is] given a new term" if that would make more than the new
// count of open terms: x's, a's and z's are three. Want: while full, the proven restart waits
// (actWait) to the delay's end and then ends with no grant, as review 22d asked.
func TestReview22eFullRestartOutlivesDelay(t *testing.T) {
	pods := slotPods("y", "x", "a", "z")
	real := slotLockOf(2, map[int32]slotTerm{0: {pod: "x", token: 100, releasing: true}, 1: {pod: "a", token: 101}, 2: {pod: "z", token: 102, releasing: true}})
	in, s := slotInput(real, 0, pods)
	if !s.full || s.retired || in.holder.pod == nil || in.holder.pod.Name != "x" {
		t.Fatalf("slot 0: full %v retired %v holder %v, want a full, declared slot of x's", s.full, s.retired, in.holder.pod)
	}
	wait := releaseWait(in.spec, in.status)
	zSince := wait / 2 // z's SlotRemoved Releasing acknowledged at t = D/2
	containers(restartedAs("app", "containerd://app-1", 1))(in.holder.pod)
	lastEnded(137, "Error", "containerd://app-0")(in.holder.pod)
	now := zSince + time.Second // x restarted with proof at t = D/2 + 1s
	in.clocks.releasing = now
	if e := termEnd(&in); !e.proof || e.reason != lockv1.ReasonHolderRestarted {
		t.Fatalf("termEnd = %+v, want a restart with proof", e)
	}
	d := decide(&in)
	if d.next == nil {
		return // no new term while full: x's term waits its delay (actWait) or ends with no grant
	}
	// The new term, published: slot 0 is x's again, Held, with a new token and lease.
	after := slotLockOf(2, map[int32]slotTerm{0: {pod: "x", token: 103}, 1: {pod: "a", token: 101}, 2: {pod: "z", token: 102, releasing: true}})
	// At t = D + 1s, past x's old delay: z's removed slot still waits its own delay.
	at := wait + time.Second
	in2, _ := slotInput(after, 2, pods)
	in2.clocks.releasing = at - zSince
	d2 := decide(&in2)
	if d2.verb != actWait {
		t.Fatalf("removed slot 2 at t=%v (z Releasing for %v of %v): decide = %+v, want actWait (its delay runs)", at, in2.clocks.releasing, wait, d2)
	}
	var valid []string
	for i := range after.Status.SlotCount() {
		if v := after.Status.SlotView(i); v.HolderUID != "" {
			valid = append(valid, v.Holder)
		}
	}
	t.Errorf("slot 0 full (a in slot 1, z in the removed slot 2 Releasing since t=%v), x Releasing since t=0 and restarted with proof at t=%v: decide = verb %d reason %q next %s: "+
		"a new term while full. At t=%v, past x's lock delay (which bounds all x could do under token 100), slot 2 still waits (verb %d, requeue %v) and %v hold valid terms "+
		"under spec.slots %d: one beyond N that the restart added (without it x would hold nothing by then). Want actWait to the delay's end, then an end with no grant",
		zSince, now, d.verb, d.reason, d.next.Name, at, d2.verb, d2.requeue, valid, after.Spec.EffectiveSlots())
}

// TestReview22eFullAdoptsOwnGrantAfterDelay: as above, but slot 0's new term for x was
// decided (x Releasing, its key vanished or its container restarted with proof; spec.slots
// still 3, so not full) and its status write was lost (the spec edit that lowered spec.slots
// to 2 changed the resourceVersion; or the API server refused writes for a while). The turn
// that finds it, with the slot now full and x's lock delay, as this replica measured it from
// the Releasing write's acknowledgement, over, publishes it (decideUnpublished: "The slot's
// own holder's grant (a restart's new term) adds no pod"). It does: no pod leads by an
// unpublished grant, and x's old term ended with its delay (x leads nothing by token 100 any
// more), so publishing it now is a new valid term for x while a and z (the removed slot 2,
// its delay still running) hold theirs: three under spec.slots 2. decideReleasing itself
// gives x no new term once the delay is over while full (the end with no grant of review
// 22c); the unpublished grant's adoption must not either: discard it, and decide again.
func TestReview22eFullAdoptsOwnGrantAfterDelay(t *testing.T) {
	for _, tc := range []struct {
		row  string
		ends *endedTerm
	}{
		{"regrant (x's key vanished while Releasing)", nil},
		{"restart with proof", &endedTerm{Token: 100, Reason: lockv1.ReasonHolderRestarted, HolderUID: "uid-x"}},
	} {
		t.Run(tc.row, func(t *testing.T) {
			pods := slotPods("y", "x", "a", "z")
			real := slotLockOf(2, map[int32]slotTerm{0: {pod: "x", token: 100, releasing: true}, 1: {pod: "a", token: 101}, 2: {pod: "z", token: 102, releasing: true}})
			in, s := slotInput(real, 0, pods)
			if !s.full || s.retired || in.holder.pod == nil || in.holder.pod.Name != "x" {
				t.Fatalf("slot 0: full %v retired %v holder %v, want a full, declared slot of x's", s.full, s.retired, in.holder.pod)
			}
			in.clocks.releasing = releaseWait(in.spec, in.status) + time.Second // x's lock delay is over
			// Without the unpublished grant, the slot ends x's term with no grant (review 22c).
			if d := decide(&in); d.verb != actEnd || d.next != nil {
				t.Fatalf("slot 0 full, x's delay over, x's own key: decide = %+v, want an end with no grant", d)
			}
			in.g = grant{holderUID: "uid-x", token: 105, rec: record{Name: "x", Phase: lockv1.PhaseHeld, Strategy: lockv1.StrategyOldestReady, LeaseSeconds: 10,
				Containers: []containerMark{{Name: "app", ID: "containerd://app-1"}}, Ends: tc.ends, Lock: in.uid}}
			if d := decide(&in); d.verb == actAdopt {
				t.Errorf("slot 0 full (a in slot 1, the removed slot 2's z still Releasing), x's Releasing over its lock delay, x's unpublished grant (token 105): decide = %+v: "+
					"publishes a new term for x, whose old term is over: x, a and z valid under spec.slots 2. Want discard (no pod leads by it), then the end with no grant", d)
			}
		})
	}
}
