package controllers

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// Review 22d of 67cebaa (a full slot's Releasing term with proof of a restart ends at once,
// with no grant).

// TestReview22dFullRestartEndSkipsDelay: spec.slots lowered from 3 to 2. Slot 0 is x's,
// Releasing for 1 s (the crash's NotReady); slot 1 is a's; the removed slot 2 is still z's,
// ending. x's container restarted with proof that the old process is gone, so slot 0 is
// full. 67cebaa ends x's term at once with no grant (decideReleasing's new "e.proof && ...
// && in.full" case). But the proof is of the OLD process only: the restarted process may
// have read Held before the Releasing write was acknowledged and may lead token 100 until its
// own validity runs out, which only the lock delay bounds (restart.go: "Another pod gets the
// lock only after Releasing and the full delay either way"). restartTerm is safe because its
// new term is the same pod's; an end with no grant leaves slot 0 empty and forgets the delay,
// so once z's removed slot ends (full clears), slot 0's next turn (decideNoHolder) grants
// another pod at once: two pods act under slot 0 at once (x's new process by token 100, y
// by its new token), and across the lock x, a and y hold valid terms under spec.slots 2.
// Want: while full, a proven restart does not cut the Releasing term's delay short (wait it
// out, then end with no grant), as for any other Releasing end that is not attested.
func TestReview22dFullRestartEndSkipsDelay(t *testing.T) {
	in, pods, wait := fullRestartedX(t)
	d := decide(&in)
	if d.verb != actEnd {
		return // the delay is kept (actWait) or the term otherwise not ended before it
	}
	if d.next != nil && d.next.UID == in.holder.pod.UID {
		return // restartTerm: the same pod's new term (the fix): no other pod in slot 0, no pod added
	}
	// What follows once z's removed slot ends (full clears) while x's delay still runs:
	// slot 0 has no term, and its turn grants at once.
	d2, next, full2 := afterFullClears(pods)
	t.Errorf("slot 0 full, x Releasing for %v of its %v lock delay, restarted with proof: decide = verb %d reason %q next %v: x's term ended before the delay; "+
		"once full clears (z's removed slot ended) slot 0's next turn decides verb %d next %q (full %v) at once, while x's restarted process may still lead token 100 "+
		"(it may have read Held before the Releasing write): two pods under slot 0 at once, and x, a and %s valid under spec.slots 2. "+
		"Want x's Releasing term to wait the lock delay (actWait) while the slot is full, then end with no grant",
		in.clocks.releasing, wait, d.verb, d.reason, d.next, d2.verb, next, full2, next)
}

// fullRestartedX is the state of reviews 22d and 22g: spec.slots lowered from 3 to 2; slot 0
// is x's, Releasing for 1 s of its lock delay (wait); slot 1 is a's; the removed slot 2 is
// still z's, ending; so slot 0 is full. x's container crashed and restarted: proof that the
// old process is gone. y, the oldest pod, is OldestReady's choice for a free slot.
func fullRestartedX(t *testing.T) (in input, pods []corev1.Pod, wait time.Duration) {
	t.Helper()
	pods = slotPods("y", "x", "a", "z")
	real := slotLockOf(2, map[int32]slotTerm{0: {pod: "x", token: 100, releasing: true}, 1: {pod: "a", token: 101}, 2: {pod: "z", token: 102, releasing: true}})
	in, s := slotInput(real, 0, pods)
	if !s.full || s.retired || in.holder.pod == nil || in.holder.pod.Name != "x" {
		t.Fatalf("slot 0: full %v retired %v holder %v, want a full, declared slot of x's", s.full, s.retired, in.holder.pod)
	}
	containers(restartedAs("app", "containerd://app-1", 1))(in.holder.pod)
	lastEnded(137, "Error", "containerd://app-0")(in.holder.pod)
	in.clocks.releasing = time.Second
	if e := termEnd(&in); !e.proof || e.reason != lockv1.ReasonHolderRestarted {
		t.Fatalf("termEnd = %+v, want a restart with proof", e)
	}
	return in, pods, releaseWait(in.spec, in.status)
}

// afterFullClears decides slot 0 once z's removed slot has ended (full clears) with x's term
// ended and published: slot 0 has no term. It returns the decision, the pod it grants ("" for
// none) and whether the slot is full.
func afterFullClears(pods []corev1.Pod) (d decision, next string, full bool) {
	after := slotLockOf(2, map[int32]slotTerm{1: {pod: "a", token: 101}})
	in, s := slotInput(after, 0, pods)
	d = decide(&in)
	if d.next != nil {
		next = d.next.Name
	}
	return d, next, s.full
}
