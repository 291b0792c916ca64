package controllers

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// Review 22i of 45e1d3e (while the other slots are full, another pod's unpublished grant
// recording a restart's end is published at once as that end, with no grant). Its premise:
// a grant recording Ends{HolderRestarted} for another pod than the ended holder is made only
// by endTerm after the Releasing term's full lock delay; the restart fast path (restartTerm)
// grants the same pod, which fastPathGrant tells apart.

// TestReview22iRestartEndForAnotherPodOnlyAfterDelay checks that premise over the states of a
// slot's term x (not full, so every end may grant): Held or Releasing for every reason the
// status can show, the key ours (recorded Held or Releasing) or gone, x's container restarted
// with proof, without proof, not restarted, or x not Ready, x's own release or none, this
// replica's Releasing clock before or at the delay, x eligible again long enough or not. A
// decision that ends x's term for HolderRestarted and grants a pod either grants x itself (the
// fast path, whose record fastPathGrant takes as its own) or another pod only once x's term
// has waited the full lock delay as Releasing.
func TestReview22iRestartEndForAnotherPodOnlyAfterDelay(t *testing.T) {
	type podState struct {
		name string
		opt  func(*corev1.Pod)
	}
	podStates := []podState{
		{"restarted with proof", func(p *corev1.Pod) {
			containers(restartedAs("app", "containerd://app-1", 1))(p)
			lastEnded(137, "Error", "containerd://app-0")(p)
		}},
		{"restarted without proof", containers(restartedAs("app", "containerd://app-1", 1))},
		{"not restarted", func(*corev1.Pod) {}},
		{"not Ready", notReady()},
	}
	reasons := []string{lockv1.ReasonGranted, lockv1.ReasonHolderRestarted, lockv1.ReasonHolderNotReady, lockv1.ReasonOperatorRelease, lockv1.ReasonStatusCorrupt}
	type keyState int
	const (
		keyHeld keyState = iota
		keyReleasing
		keyGone
	)
	l0 := slotLockOf(3, map[int32]slotTerm{0: {pod: "x", token: 100, releasing: true}, 1: {pod: "a", token: 101}})
	v0 := l0.Status.SlotView(0)
	wait := releaseWait(&l0.Spec, &v0)
	seen, fastPaths, afterDelay := 0, 0, 0
	for _, releasing := range []bool{false, true} {
		for _, reason := range reasons {
			if !releasing && reason != lockv1.ReasonGranted {
				continue
			}
			for _, ps := range podStates {
				for _, key := range []keyState{keyHeld, keyReleasing, keyGone} {
					for _, released := range []bool{false, true} {
						for _, clock := range []time.Duration{0, time.Second, wait} {
							for _, again := range []time.Duration{0, time.Hour} {
								pods := slotPods("y", "x", "a", "b")
								ps.opt(&pods[1])
								l := slotLockOf(3, map[int32]slotTerm{0: {pod: "x", token: 100, releasing: releasing}, 1: {pod: "a", token: 101}})
								in, s := slotInput(l, 0, pods)
								if s.full || s.retired || in.holder.pod == nil || in.holder.pod.Name != "x" {
									t.Fatalf("slot 0: full %v retired %v holder %v, want x's open slot", s.full, s.retired, in.holder.pod)
								}
								in.status.History[0].Reason = reason
								switch key {
								case keyReleasing:
									in.g.rec.Phase, in.g.rec.Reason = lockv1.PhaseReleasing, reason
								case keyGone:
									in.g = grant{}
								}
								if released {
									in.release.holderUID, in.release.holderToken = "uid-x", 100
								}
								if releasing {
									in.clocks.releasing, in.clocks.eligibleAgain, in.clocks.mayReturn = clock, again, true
								}
								row := fmt.Sprintf("releasing %v (%s), x %s, key %d, released %v, clock %v, eligible again %v", releasing, reason, ps.name, key, released, clock, again)
								d := review22hStep(&in)
								seen++
								if d.verb != actEnd || d.next == nil || d.reason != lockv1.ReasonHolderRestarted {
									continue
								}
								if d.next.UID == in.status.HolderUID {
									fastPaths++
									continue
								}
								if !releasing || clock < wait {
									t.Errorf("%s: decide = verb %d reason %q next %s: x's term ended for %s and the slot granted to another pod before x's lock delay (%v) ran out",
										row, d.verb, d.reason, d.next.Name, lockv1.ReasonHolderRestarted, wait)
									continue
								}
								afterDelay++
							}
						}
					}
				}
			}
		}
	}
	if fastPaths == 0 || afterDelay == 0 {
		t.Errorf("over %d states: %d restart fast paths, %d restart ends granting another pod after the delay; want both reached", seen, fastPaths, afterDelay)
	}
	t.Logf("%d states: %d restart fast paths (x again), %d restart ends granting another pod after the delay", seen, fastPaths, afterDelay)
}

// TestReview22iFullRecordedRestartEndNeverGrants: while full, whatever pod an unpublished
// restart-end grant names and whatever ended holder it records, the full branch never
// publishes a grant, and it ends x's term at once only for a record that is not the fast
// path's (fastPathGrant): the same pod's, or one of a controller before review 20f (no
// HolderUID), is discarded and x's term waits out its delay on this replica's clock.
func TestReview22iFullRecordedRestartEndNeverGrants(t *testing.T) {
	for _, tc := range []struct {
		row        string
		pod, ended string
		wantEnd    bool
	}{
		{"another pod's grant, x's end (endTerm after the delay)", "y", "uid-x", true},
		{"another pod's grant, no ended holder (before review 20f)", "y", "", false},
		{"another pod's grant naming itself as the ended holder", "y", "uid-y", false},
		{"another pod's grant, a third pod as the ended holder (a status edited while the key was gone)", "y", "uid-b", true},
		{"x's own grant (the fast path)", "x", "uid-x", false},
		{"x's own grant, no ended holder (before review 20f)", "x", "", false},
	} {
		t.Run(tc.row, func(t *testing.T) {
			pods := slotPods("y", "x", "a", "b", "z")
			containers(restartedAs("app", "containerd://app-1", 1))(&pods[1])
			l := slotLockOf(2, map[int32]slotTerm{0: {pod: "x", token: 100, releasing: true}, 1: {pod: "a", token: 101}, 2: {pod: "z", token: 102, releasing: true}})
			in, s := slotInput(l, 0, pods)
			if !s.full || in.holder.pod == nil || in.holder.pod.Name != "x" {
				t.Fatalf("slot 0: full %v holder %v, want a full slot of x's", s.full, in.holder.pod)
			}
			in.status.History[0].Reason = lockv1.ReasonHolderRestarted
			in.clocks.releasing = time.Second
			in.g = grant{holderUID: types.UID("uid-" + tc.pod), token: 105, rec: record{Name: tc.pod, Phase: lockv1.PhaseHeld, Strategy: lockv1.StrategyOldestReady, LeaseSeconds: 10,
				Containers: []containerMark{{Name: "app", ID: "containerd://app-1"}}, Lock: in.uid,
				Ends: &endedTerm{Token: 100, Reason: lockv1.ReasonHolderRestarted, HolderUID: types.UID(tc.ended)}}}
			d := review22hStep(&in)
			switch {
			case d.next != nil || d.verb == actAdopt || d.verb == actGrant || d.verb == actKeep || d.verb == actRegrant:
				t.Errorf("full: decide = verb %d reason %q next %v: a grant beyond spec.slots", d.verb, d.reason, d.next)
			case tc.wantEnd && (d.verb != actEnd || d.reason != lockv1.ReasonHolderRestarted):
				t.Errorf("full, a recorded end after the delay: decide = verb %d reason %q, want actEnd %q with no grant", d.verb, d.reason, lockv1.ReasonHolderRestarted)
			case !tc.wantEnd && d.verb != actWait:
				t.Errorf("full, the fast path's record: decide = verb %d reason %q, want actWait (x's term waits out its delay, 1 s in)", d.verb, d.reason)
			}
		})
	}
}
