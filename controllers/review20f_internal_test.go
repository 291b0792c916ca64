package controllers

import (
	"testing"
	"time"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// Review 20f of 3022f26 (every end's grant records Ends; decideUnpublished adopts a grant whose
// Ends names the published token without judging the old holder again).

// F1: the release that the ending turn judged is no longer on the lock (an actor allowed to
// update the lock removed it: kubectl replace, a GitOps replace sync) and a-0's container
// restarted since. Status still says Held a-0 tok (the handoff's status write was lost), so
// the new process sees Held under its own UID, no release, and leads tok (pkg/leadership
// judge: grantLead). Nothing left attests tok's end, and the holder may run again. Before
// 3022f26 decideUnpublished judged termEnd and discarded the grant (then the key-vanished
// path: the holder restarted in its life, Releasing and the full delay).
func TestReview20fReleaseGoneHolderRestartedAdoptsAtOnce(t *testing.T) {
	for _, tc := range []struct {
		row  string
		s    *scene
		want action
	}{
		{"Ends{tok}, release removed since, a-0 restarted and Ready", handoffGrantUnpublished(true).holderRelease("", 0).restarted(), actDiscard},
		{"control: no Ends (pre-20e judging), same world", handoffGrantUnpublished(false).holderRelease("", 0).restarted(), actDiscard},
		{"Ends{tok} of a release, release removed since, a-0 never restarted: judged again (the end by a release stands only while the release names the term)", handoffGrantUnpublished(true).holderRelease("", 0), actDiscard},
	} {
		t.Run(tc.row, func(t *testing.T) {
			d := decide(&tc.s.in)
			if d.verb != tc.want {
				t.Errorf("decide = verb %d, want %d (actAdopt=%d actDiscard=%d): a-1 would be published Held while a-0, with nothing attesting tok's end, may lead tok", d.verb, tc.want, actAdopt, actDiscard)
			}
			if tc.want == actDiscard && d.verb == actDiscard {
				// what the turn does next once the grant is gone
				s2 := tc.s
				s2.in.g = grant{}
				d2 := decide(&s2.in)
				t.Logf("after the discard: verb %d reason %q", d2.verb, d2.reason)
			}
		})
	}
}

// F2: adopt() on the new path publishes the ended term's reason in history, but queues no
// End Event and counts no transition for it (the ending turn's Event and metric were lost
// with its status write; the restart fast path's adopt branch emits both).
func TestReview20fAdoptHandoffEmitsNoEndEvent(t *testing.T) {
	tr, _ := reviewTurn(handoffGrantUnpublished(true).gone())
	tr.st = *tr.lock.Status.DeepCopy()
	tr.adopt()
	var ended *lockv1.Term
	for i := range tr.st.History {
		if tr.st.History[i].Token == tok {
			ended = &tr.st.History[i]
		}
	}
	if ended == nil || ended.Ended == nil || ended.Reason != lockv1.ReasonHolderReleased {
		t.Fatalf("history of tok = %+v, want ended HolderReleased", ended)
	}
	t.Logf("history: tok %d ended %s; new holder %s token %d; queued events %d", ended.Token, ended.Reason, tr.st.Holder, tr.st.FencingToken, len(tr.events))
	// the restart fast path's adopt, for comparison
	rs := newScene().do(func(in *input) {
		in.g = grant{holderUID: "uid-a-0", token: tok + 5, rec: record{Name: "a-0", Phase: lockv1.PhaseHeld, LeaseSeconds: 10,
			Ends: &endedTerm{Token: tok, Reason: lockv1.ReasonHolderRestarted}}}
	})
	tr2, _ := reviewTurn(rs)
	tr2.st = *tr2.lock.Status.DeepCopy()
	tr2.adopt()
	t.Logf("restart fast path adopt: queued events %d", len(tr2.events))
	if len(tr.events) < len(tr2.events) {
		t.Errorf("handoff adopt queued %d events, the restart fast path's adopt %d: the handoff's End (%s, token %d) has no Event and no transition metric", len(tr.events), len(tr2.events), lockv1.ReasonHolderReleased, tok)
	}
}

// F3 (pre-existing, not 3022f26): an unproven restart's Releasing ends after the delay with
// reason HolderRestarted and grants ANOTHER pod; end() records Ends{reason HolderRestarted}
// on that grant (so did the code before 3022f26: ends was keyed on the reason), grantTo's
// onAck starts the restart-grant clock, and restartExcuses then excuses the new, never
// restarted holder's NotReady for its lease as if it were the fast path's term.
func TestReview20fOtherPodGrantAfterUnprovenRestartGetsRestartExcuse(t *testing.T) {
	wait := time.Duration(lockDly) * time.Second
	d := decide(&unprovenRestartReleasing(wait).in)
	next := ""
	if d.next != nil {
		next = d.next.Name
	}
	t.Logf("unproven restart's Releasing, delay over: verb %d reason %q next %q", d.verb, d.reason, next)
	if d.verb != actEnd || d.reason != lockv1.ReasonHolderRestarted || next != "a-1" {
		t.Skipf("premise does not hold")
	}
	// a-1's term as that end granted it: Ends{tok, HolderRestarted}; acknowledged on this
	// replica 2 s ago; a-1 NotReady now (single container, running).
	s := newScene().do(func(in *input) {
		in.status.Holder, in.status.HolderUID = "a-1", "uid-a-1"
		in.status.History[0].Holder, in.status.History[0].HolderUID = "a-1", "uid-a-1"
		in.g = grant{holderUID: "uid-a-1", token: tok, rec: record{Name: "a-1", Phase: lockv1.PhaseHeld, Strategy: lockv1.StrategyOldestReady, LeaseSeconds: 10,
			Ends: &endedTerm{Token: tok - 5, Reason: lockv1.ReasonHolderRestarted, HolderUID: "uid-a-0"}}}
		in.holder.pod = &in.pods[1]
		in.clocks.restartGrant = 2 * time.Second
	})
	notReady()(s.in.holder.pod)
	d = decide(&s.in)
	if d.verb != actRelease {
		t.Errorf("a-1 (another pod, never restarted) NotReady 2 s after its grant: decide = verb %d reason %q requeue %v, want actRelease (%d) HolderNotReady: the restart fast path's excuse applied to a handoff", d.verb, d.reason, d.requeue, actRelease)
	}
}
