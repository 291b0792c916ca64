package controllers

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// Review 22h of 8ea2827 (while the other slots are full, an unpublished grant recording a
// restart's end is discarded, and the Releasing term waits its delay out).

// review22hStep decides as apply's loop does: a discard deletes the unpublished grant, and the
// same turn decides again without it.
func review22hStep(in *input) decision {
	d := decide(in)
	if d.verb == actDiscard {
		in.g = grant{}
		d = decide(in)
	}
	return d
}

// review22hPods: y the oldest (OldestReady's choice for a free slot), then x, a, b, z; x's
// container crashed and restarted with proof that the old process is gone.
func review22hPods() []corev1.Pod {
	pods := slotPods("y", "x", "a", "b", "z")
	containers(restartedAs("app", "containerd://app-1", 1))(&pods[1])
	lastEnded(137, "Error", "containerd://app-0")(&pods[1])
	return pods
}

// review22hRestartGrant is restartTerm's grant of slot's term to x, token 105, recording the
// end of x's term ended (its status write lost).
func review22hRestartGrant(in *input, ended int64) grant {
	return grant{holderUID: "uid-x", token: 105, rec: record{Name: "x", Phase: lockv1.PhaseHeld, Strategy: lockv1.StrategyOldestReady, LeaseSeconds: 10,
		Containers: []containerMark{{Name: "app", ID: "containerd://app-1"}}, Lock: in.uid,
		Ends: &endedTerm{Token: ended, Reason: lockv1.ReasonHolderRestarted, HolderUID: "uid-x"}}}
}

// TestReview22hFullRestartDiscardKeepsDelay settles review 22h's first question on 8ea2827:
// in every state that reaches the discard of a restart grant (or decides again after it),
// x's Releasing term keeps its lock delay: no other pod enters the slot, x gets no new term
// while the slot is full, and nothing ends the term with no grant before the delay unless
// proof of the whole pod's stop (attestation) comes. The first row fails on 5be615e (before
// 8ea2827: the recorded end published at once, no grant), as does the deleting row.
func TestReview22hFullRestartDiscardKeepsDelay(t *testing.T) {
	pods := review22hPods()
	shrinking := func() *lockv1.DistributedLock { // spec.slots 2; z's removed slot 2 still ending
		return slotLockOf(2, map[int32]slotTerm{0: {pod: "x", token: 100, releasing: true}, 1: {pod: "a", token: 101}, 2: {pod: "z", token: 102, releasing: true}})
	}
	shrunk := func() *lockv1.DistributedLock { // z's removed slot has ended: full no more
		return slotLockOf(2, map[int32]slotTerm{0: {pod: "x", token: 100, releasing: true}, 1: {pod: "a", token: 101}})
	}
	slot0 := func(t *testing.T, l *lockv1.DistributedLock, wantFull bool) input {
		t.Helper()
		in, s := slotInput(l, 0, pods)
		if s.full != wantFull || s.retired || in.holder.pod == nil || in.holder.pod.Name != "x" {
			t.Fatalf("slot 0: full %v retired %v holder %v, want full %v, declared, x's", s.full, s.retired, in.holder.pod, wantFull)
		}
		return in
	}
	wantWait := func(t *testing.T, what string, d decision) {
		t.Helper()
		if d.verb != actWait || d.next != nil {
			t.Errorf("%s: decide = verb %d reason %q next %v, want actWait: x's Releasing term keeps its lock delay (x's restarted process may lead token 100 until it ends)",
				what, d.verb, d.reason, d.next)
		}
	}
	l0 := shrinking()
	v0 := l0.Status.SlotView(0)
	wait := releaseWait(&l0.Spec, &v0)

	t.Run("the restart grant is discarded, the term waits", func(t *testing.T) {
		in := slot0(t, shrinking(), true)
		in.clocks.releasing = time.Second
		in.g = review22hRestartGrant(&in, 100)
		wantWait(t, "full, x's restart grant found 1 s into the delay", review22hStep(&in))
	})
	t.Run("the discard turn's status write lost: the next turn finds no key", func(t *testing.T) {
		in := slot0(t, shrinking(), true)
		in.clocks.releasing = 2 * time.Second
		in.g = grant{}
		wantWait(t, "full, no key, 2 s into the delay", review22hStep(&in))
	})
	t.Run("full clears within the delay: no regrant, no grant to another pod", func(t *testing.T) {
		in := slot0(t, shrunk(), false)
		in.clocks.releasing = 3 * time.Second
		in.g = grant{}
		wantWait(t, "not full, no key, x restarted and Ready, 3 s into the delay", review22hStep(&in))
	})
	t.Run("full clears within the delay: x's own release does not end it (a restart may have come between)", func(t *testing.T) {
		in := slot0(t, shrunk(), false)
		in.clocks.releasing = 3 * time.Second
		in.g = grant{}
		in.release.holderUID, in.release.holderToken = "uid-x", 100
		wantWait(t, "not full, no key, x's release of token 100, 3 s into the delay", review22hStep(&in))
	})
	t.Run("full clears after the key is found again (the discard's reply lost): the same pod's new term", func(t *testing.T) {
		in := slot0(t, shrunk(), false)
		in.clocks.releasing = 3 * time.Second
		in.g = review22hRestartGrant(&in, 100)
		if d := review22hStep(&in); d.verb != actAdopt {
			t.Errorf("not full, x's restart grant found 3 s into the delay: decide = %+v, want actAdopt (restartTerm's outcome: x's new term, no other pod)", d)
		}
	})
	t.Run("the delay over, still full: an end with no grant", func(t *testing.T) {
		in := slot0(t, shrinking(), true)
		in.clocks.releasing = wait
		in.g = grant{}
		if d := review22hStep(&in); d.verb != actEnd || d.next != nil {
			t.Errorf("full, no key, x's delay over: decide = %+v, want actEnd with no grant", d)
		}
	})
	t.Run("the delay over, full cleared: the next pod, never x at once", func(t *testing.T) {
		in := slot0(t, shrunk(), false)
		in.clocks.releasing = wait
		in.g = grant{}
		if d := review22hStep(&in); d.verb != actEnd || d.next == nil || d.next.Name == "x" {
			t.Errorf("not full, no key, x's delay over: decide = %+v, want actEnd granting the next pod (not x)", d)
		}
	})
	t.Run("the lock being deleted: discard, wait, then end with no grant", func(t *testing.T) {
		in := slot0(t, shrinking(), true)
		in.deleting = true
		in.clocks.releasing = time.Second
		in.g = review22hRestartGrant(&in, 100)
		wantWait(t, "deleting, full, x's restart grant 1 s into the delay", review22hStep(&in))
		in.clocks.releasing = wait
		if d := review22hStep(&in); d.verb != actEnd || d.next != nil {
			t.Errorf("deleting, x's delay over: decide = %+v, want actEnd with no grant", d)
		}
	})
	t.Run("a retired slot: discard, wait, then end with no grant", func(t *testing.T) {
		l := slotLockOf(2, map[int32]slotTerm{0: {pod: "a", token: 100}, 1: {pod: "b", token: 101}, 2: {pod: "x", token: 102, releasing: true}})
		in, s := slotInput(l, 2, pods)
		if !s.retired || in.holder.pod == nil || in.holder.pod.Name != "x" {
			t.Fatalf("slot 2: retired %v holder %v, want a retired slot of x's", s.retired, in.holder.pod)
		}
		in.clocks.releasing = time.Second
		in.g = review22hRestartGrant(&in, 102)
		wantWait(t, "retired slot 2, x's restart grant 1 s into the delay", review22hStep(&in))
		in.clocks.releasing = wait
		if d := review22hStep(&in); d.verb != actEnd || d.next != nil {
			t.Errorf("retired slot 2, x's delay over: decide = %+v, want actEnd with no grant", d)
		}
	})
	t.Run("a Held term: the restart grant is the same pod's new term", func(t *testing.T) {
		l := slotLockOf(2, map[int32]slotTerm{0: {pod: "x", token: 100}, 1: {pod: "a", token: 101}, 2: {pod: "z", token: 102, releasing: true}})
		in, s := slotInput(l, 0, pods)
		if !s.full {
			t.Fatalf("slot 0 not full")
		}
		in.g = review22hRestartGrant(&in, 100)
		if d := review22hStep(&in); d.verb != actAdopt {
			t.Errorf("full, x Held, x's restart grant: decide = %+v, want actAdopt (the same pod's new term: no pod added, no delay running)", d)
		}
	})
	t.Run("a restart end without proof, recorded after the delay: ends with no grant on this replica's clock", func(t *testing.T) {
		in := slot0(t, shrinking(), true)
		in.status.History[0].Reason = lockv1.ReasonHolderRestarted
		in.g = grant{holderUID: "uid-y", token: 105, rec: record{Name: "y", Phase: lockv1.PhaseHeld, Strategy: lockv1.StrategyOldestReady, LeaseSeconds: 10,
			Containers: []containerMark{{Name: "app", ID: "containerd://app-0"}}, Lock: in.uid,
			Ends: &endedTerm{Token: 100, Reason: lockv1.ReasonHolderRestarted, HolderUID: "uid-x"}}}
		in.clocks.releasing = wait
		if d := review22hStep(&in); d.verb != actEnd || d.next != nil || d.reason != lockv1.ReasonHolderRestarted {
			t.Errorf("full, y's grant recording x's restart end after the delay, this replica's delay over: decide = %+v, want actEnd %q with no grant",
				d, lockv1.ReasonHolderRestarted)
		}
	})
}

// TestReview22hFullPublishesProvenEnds settles review 22h's third question: the ends the full
// branch still publishes at once, with no grant, are those that need no delay (an attested
// stop, the holder's own release that still names the term) or whose delay is over (it was
// measured by the replica that recorded it, and time only runs on): publishing one leaves the
// slot free of a term no process can still lead. The holder's release no longer naming the
// term is not published (review 20f).
func TestReview22hFullPublishesProvenEnds(t *testing.T) {
	pods := slotPods("y", "x", "a", "z")
	for _, tc := range []struct {
		row     string
		reason  string
		release bool
		want    action
	}{
		{"attested", lockv1.ReasonHolderTerminated, false, actEnd},
		{"the holder's release, still naming the term", lockv1.ReasonHolderReleased, true, actEnd},
		{"the holder's release, removed since", lockv1.ReasonHolderReleased, false, actWait},
		{"the delay over, by the recording replica's clock", lockv1.ReasonHolderNotReady, false, actEnd},
	} {
		t.Run(tc.row, func(t *testing.T) {
			l := slotLockOf(2, map[int32]slotTerm{0: {pod: "x", token: 100, releasing: true}, 1: {pod: "a", token: 101}, 2: {pod: "z", token: 102, releasing: true}})
			in, s := slotInput(l, 0, pods)
			if !s.full {
				t.Fatalf("slot 0 not full")
			}
			in.clocks.releasing = time.Second // this replica's clock: 1 s into x's delay
			if tc.release {
				in.release.holderUID, in.release.holderToken = "uid-x", 100
			}
			in.g = grant{holderUID: "uid-y", token: 105, rec: record{Name: "y", Phase: lockv1.PhaseHeld, Strategy: lockv1.StrategyOldestReady, LeaseSeconds: 10,
				Containers: []containerMark{{Name: "app", ID: "containerd://app-0"}}, Lock: in.uid,
				Ends: &endedTerm{Token: 100, Reason: tc.reason, HolderUID: "uid-x"}}}
			d := review22hStep(&in)
			if d.verb != tc.want || d.next != nil || (tc.want == actEnd && d.reason != tc.reason) {
				t.Errorf("full, y's grant recording x's end (%s): decide = verb %d reason %q next %v, want verb %d with no grant", tc.reason, d.verb, d.reason, d.next, tc.want)
			}
		})
	}
}

// TestReview22hFullRecordedRestartEndAfterDelayWaitsAgain: liveness, a cost of 8ea2827 beyond
// the one its review named. x's container restarted without proof, so slot 0's term went
// Releasing (HolderRestarted) and waited the full lock delay; the turn that ended it (spec.slots
// still 3, not full) granted the slot to y, recording the end (Ends{100, HolderRestarted}), and
// its status write was lost (the spec edit lowering spec.slots to 2). Then the replica lost
// its election; the one that took over finds y's unpublished grant with the slot full. That
// end is proven: another pod's grant records HolderRestarted only from endTerm after the
// Releasing term's delay (restartTerm grants the same pod; fastPathGrant tells them apart).
// 8ea2827 discards every recorded HolderRestarted end, so the new replica judges x's term
// again and, counting the delay from its own first observation, waits a second full lock
// delay, during which x's ended term still counts against spec.slots in every other slot's
// turn (openTerms). Review 22c's rule is that a recorded end is published at once, with no
// grant; only the restart fast path's own grant (the same pod's, which skipped the delay)
// must not be.
func TestReview22hFullRecordedRestartEndAfterDelayWaitsAgain(t *testing.T) {
	pods := slotPods("y", "x", "a", "z")
	containers(restartedAs("app", "containerd://app-1", 1))(&pods[1]) // restarted, no proof (no lastState)
	l := slotLockOf(2, map[int32]slotTerm{0: {pod: "x", token: 100, releasing: true}, 1: {pod: "a", token: 101}, 2: {pod: "z", token: 102, releasing: true}})
	in, s := slotInput(l, 0, pods)
	if !s.full || in.holder.pod == nil || in.holder.pod.Name != "x" {
		t.Fatalf("slot 0: full %v holder %v, want a full slot of x's", s.full, in.holder.pod)
	}
	in.status.History[0].Reason = lockv1.ReasonHolderRestarted
	in.g = grant{holderUID: "uid-y", token: 105, rec: record{Name: "y", Phase: lockv1.PhaseHeld, Strategy: lockv1.StrategyOldestReady, LeaseSeconds: 10,
		Containers: []containerMark{{Name: "app", ID: "containerd://app-0"}}, Lock: in.uid,
		Ends: &endedTerm{Token: 100, Reason: lockv1.ReasonHolderRestarted, HolderUID: "uid-x"}}}
	if fastPathGrant(in.g) {
		t.Fatalf("y's grant taken for the restart fast path's")
	}
	in.clocks.releasing = 0 // the new replica's first observation of x's Releasing term
	wait := releaseWait(in.spec, in.status)
	d := review22hStep(&in)
	if d.verb != actEnd || d.next != nil || d.reason != lockv1.ReasonHolderRestarted {
		t.Errorf("full, y's unpublished grant recording x's restart end after x's lock delay, found by a replica that took over: decide = verb %d reason %q next %v requeue %v: "+
			"x's ended term judged again, waiting a second lock delay (%v) while it counts against spec.slots; want the recorded end published at once with no grant (actEnd %q)",
			d.verb, d.reason, d.next, d.requeue, wait, lockv1.ReasonHolderRestarted)
	}
}
