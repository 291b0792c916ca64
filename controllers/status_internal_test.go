package controllers

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// TestPublishGrantClosesOpenTerms: adopting an unpublished grant for the published holder
// (its key vanished, the regrant's status write was lost) leaves no history entry open
// besides the new term.
func TestPublishGrantClosesOpenTerms(t *testing.T) {
	st := &lockv1.DistributedLockStatus{
		Phase: lockv1.PhaseHeld, Holder: "a-0", HolderUID: "uid-a-0", FencingToken: 5, MaxFencingToken: 5,
		History: []lockv1.Term{{Holder: "a-0", HolderUID: "uid-a-0", Token: 5, Reason: lockv1.ReasonGranted}},
	}
	now := metav1.Now()
	publishGrant(st, "a-0", grant{holderUID: "uid-a-0", token: 9, rec: record{LeaseSeconds: 10}}, 0, lockv1.ReasonGranted, now)
	if len(st.History) != 2 {
		t.Fatalf("history has %d entries, want 2", len(st.History))
	}
	if open := st.History[0]; open.Token != 9 || open.Ended != nil {
		t.Errorf("history[0] = token %d ended %v, want the open term 9", open.Token, open.Ended)
	}
	if old := st.History[1]; old.Ended == nil || old.Reason != lockv1.ReasonKeyVanished {
		t.Errorf("history[1] = ended %v reason %q, want ended with %s", old.Ended, old.Reason, lockv1.ReasonKeyVanished)
	}
}
