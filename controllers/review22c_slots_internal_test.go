package controllers

import (
	"testing"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// Review 22c of a9af7b6 (decideUnpublished discards an unpublished grant to another pod while
// the slot is full).

// fullSlotWithEndedRelease: spec.slots lowered from 3 to 2. Slot 0 is a's, the removed slot 2
// is still z's (Held: its SlotRemoved Releasing not even started), and slot 1's x was
// Releasing (NotReady) for the full lock delay, which this replica measured: the turn that
// ended x's term ran while spec.slots was 3 (not full) and granted slot 1 to y, and its status
// write failed on the resourceVersion the spec edit changed. x is Ready again and never
// restarted. The slot's input, with y's unpublished grant when unpublished is set, else with
// no key (the ending turn's delete committed and no grant followed it).
func fullSlotWithEndedRelease(t *testing.T, unpublished bool) input {
	t.Helper()
	pods := slotPods("a", "x", "z", "y")
	real := slotLockOf(2, map[int32]slotTerm{0: {pod: "a", token: 100}, 1: {pod: "x", token: 101, releasing: true}, 2: {pod: "z", token: 102}})
	in, s := slotInput(real, 1, pods)
	if !s.full || s.retired {
		t.Fatalf("slot 1: full %v retired %v, want a full, declared slot", s.full, s.retired)
	}
	if in.holder.pod == nil || in.holder.pod.Name != "x" {
		t.Fatalf("slot 1's holder pod = %v, want x", in.holder.pod)
	}
	in.clocks.releasing = releaseWait(in.spec, in.status) // x's lock delay is over
	in.g = grant{}
	if unpublished {
		in.g = grant{holderUID: "uid-y", token: 105, rec: record{Name: "y", Phase: lockv1.PhaseHeld, Strategy: lockv1.StrategyOldestReady, LeaseSeconds: 10,
			Containers: []containerMark{{Name: "app", ID: "containerd://app-0"}},
			Ends:       &endedTerm{Token: 101, Reason: lockv1.ReasonHolderNotReady, HolderUID: "uid-x"}}}
	}
	return in
}

// TestReview22cFullSlotRegrantsEndedHolder: a9af7b6 discards y's grant (a grant beyond
// spec.slots), and the same turn decides again on the slot without a key: decideReleasing's
// key-vanished rule, which comes before the delay's end and does not look at full, grants x
// a new term at once. x's term had ended by the delay (it was Releasing; whatever x did then
// is over), so this is a new valid term in a full slot: a, z and x hold valid terms at once
// under spec.slots 2, which the discard was meant to prevent ("no grant beyond N", DESIGN's
// slot rules: across the lock no more than N pods hold valid terms at once). The same regrant
// follows without a9af7b6's discard when the ending turn granted nobody (full) and only its
// status write was lost (second row, pre-existing).
func TestReview22cFullSlotRegrantsEndedHolder(t *testing.T) {
	for _, tc := range []struct {
		row         string
		unpublished bool
	}{
		{"y's unpublished grant discarded, then decided again", true},
		{"no grant: the end's key delete committed, its status write lost (pre-existing)", false},
	} {
		t.Run(tc.row, func(t *testing.T) {
			in := fullSlotWithEndedRelease(t, tc.unpublished)
			if tc.unpublished {
				d := decide(&in)
				switch {
				case d.verb == actEnd && d.next == nil && d.reason == lockv1.ReasonHolderNotReady:
					return // the end y's grant records, published with no grant (the fix of review 22c's second finding)
				case d.verb != actDiscard:
					t.Fatalf("slot 1 full with y's unpublished grant: decide = %+v, want discard (a9af7b6) or the recorded end with no grant", d)
				}
				in.g = grant{} // apply's releaseKey, then decide again in the same turn
			}
			d := decide(&in)
			if d.next != nil || d.verb == actRegrant || d.verb == actGrant || d.verb == actKeep {
				name := ""
				if d.next != nil {
					name = d.next.Name
				}
				t.Errorf("slot 1 full (a holds slot 0, z the removed slot 2), x's Releasing over its lock delay, no key: decide = verb %d reason %q next %q: "+
					"a new term for %s, so a, z and %s hold valid terms at once under spec.slots 2; want the term ended with no grant (actEnd, no next)",
					d.verb, d.reason, name, name, name)
			}
		})
	}
}

// TestReview22cFullSlotDiscardCostsProvenEnd: liveness. The grant's record says it ended the
// published term by x's own release (review 20e: adopted without judging x again, whose pod
// may be gone by then). Under full, a9af7b6 discards it, and the slot is judged again
// without the record: x's pod is gone, so no restart can be ruled out and the release is not
// taken, and the term goes through Releasing and the full lock delay (KeyVanished), a term
// that should end at once waiting, as before 20e. While it waits it counts against
// spec.slots in every other slot's turn (openTerms).
func TestReview22cFullSlotDiscardCostsProvenEnd(t *testing.T) {
	pods := slotPods("a", "x", "z", "y")
	real := slotLockOf(2, map[int32]slotTerm{0: {pod: "a", token: 100}, 1: {pod: "x", token: 101}, 2: {pod: "z", token: 102}})
	in, s := slotInput(real, 1, pods)
	if !s.full {
		t.Fatalf("slot 1 not full")
	}
	in.release.holderUID, in.release.holderToken = "uid-x", 101
	// x's pod deleted since the handoff (its kubelet's terminal update not seen here).
	in.holder.pod, in.holder.gone = nil, true
	var rest = in.pods[:0:0]
	for _, p := range in.pods {
		if p.Name != "x" {
			rest = append(rest, p)
		}
	}
	in.pods = rest
	in.g = grant{holderUID: "uid-y", token: 105, rec: record{Name: "y", Phase: lockv1.PhaseHeld, Strategy: lockv1.StrategyOldestReady, LeaseSeconds: 10,
		Containers: []containerMark{{Name: "app", ID: "containerd://app-0"}},
		Ends:       &endedTerm{Token: 101, Reason: lockv1.ReasonHolderReleased, HolderUID: "uid-x"}}}
	if !endsPublished(&in) {
		t.Fatalf("the grant does not record the end of the published term")
	}
	d := decide(&in)
	if d.verb == actDiscard {
		in.g = grant{}
		d = decide(&in)
	}
	if d.verb != actEnd || d.next != nil || d.reason != lockv1.ReasonHolderReleased {
		t.Errorf("x released its term (the grant records it), slot 1 full: after the turn, decide = verb %d reason %q next %v; "+
			"want x's term ended at once for its release (actEnd %q, no grant while full), not Releasing and the full lock delay",
			d.verb, d.reason, d.next, lockv1.ReasonHolderReleased)
	}
}
