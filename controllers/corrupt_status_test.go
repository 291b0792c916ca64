package controllers_test

import (
	"strings"
	"testing"
	"time"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// TestHandEditedHolderIsRepublished: an administrator edits status.holder and holderUID to
// another pod (issue 15 item 8). The controller must take the status as corrupt: republish the
// holder etcd has for that token, end no term (same token, no transition) and say so in a
// Warning Event. Before the fix it ended the healthy term (HolderGone, naming a pod that never
// held the lock).
func TestHandEditedHolderIsRepublished(t *testing.T) {
	f := newFixture(t)
	f.pod("a-0", "a")
	secondApart()
	f.pod("a-1", "a")
	f.lock("lock", "a", nil)
	held := f.waitFor("lock", 20*time.Second, "held by a-0", heldBy("a-0"))
	edited := held.DeepCopy()
	edited.Status.Holder, edited.Status.HolderUID = "a-1", "00000000-0000-0000-0000-000000000001"
	if err := k8s.Status().Update(bg(), edited); err != nil {
		t.Fatalf("hand edit of the status: %v", err)
	}
	msg := f.waitEventMessage(t, lockv1.ReasonStatusCorrupt)
	if !strings.Contains(msg, "status named a-1") || !strings.Contains(msg, "republished the holder from etcd") {
		t.Errorf("StatusCorrupt Event = %q, want it to name the edited holder and say it was republished", msg)
	}
	now := f.waitFor("lock", 10*time.Second, "held by a-0 again", heldBy("a-0"))
	if now.Status.HolderUID != held.Status.HolderUID || now.Status.FencingToken != held.Status.FencingToken || now.Status.Transitions != held.Status.Transitions {
		t.Errorf("after the edit: %s, want a-0's term unchanged (token %d, transitions %d)", describe(now), held.Status.FencingToken, held.Status.Transitions)
	}
	// For longer than the lease, the term must stay as it was: a term the edit ended would
	// show Releasing or a new token within that time.
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if l := f.get("lock"); l.Status.FencingToken != held.Status.FencingToken || l.Status.Phase != lockv1.PhaseHeld {
			t.Fatalf("after the edit: %s, want a-0's term %d still Held", describe(l), held.Status.FencingToken)
		}
	}
}
