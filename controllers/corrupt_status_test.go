package controllers_test

import (
	"strings"
	"testing"
	"time"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// TestHandEditedHolderIsRepublished: an administrator edits status.holder and holderUID to
// another pod (issue 15 item 8). The controller must take the status as corrupt: republish the
// holder etcd has for that token, as Releasing (the pod the edit named may have led the token),
// and let no one lead again before the full lock delay, saying so in a Warning Event. Before
// the fix it ended the term as HolderGone, naming a pod that never held the lock.
func TestHandEditedHolderIsRepublished(t *testing.T) {
	f := newFixture(t)
	f.pod("a-0", "a")
	secondApart()
	f.pod("a-1", "a")
	f.lock("lock", "a", func(s *lockv1.DistributedLockSpec) { s.LockDelaySeconds = new(int32(4)) })
	held := f.waitFor("lock", 20*time.Second, "held by a-0", heldBy("a-0"))
	edited := held.DeepCopy()
	edited.Status.Holder, edited.Status.HolderUID = "a-1", "00000000-0000-0000-0000-000000000001"
	edit := time.Now()
	if err := k8s.Status().Update(bg(), edited); err != nil {
		t.Fatalf("hand edit of the status: %v", err)
	}
	// Two Events carry the reason (the republish, then the Releasing it starts); the
	// broadcaster may list the second first.
	msg := f.waitEventNote(t, lockv1.ReasonStatusCorrupt, "Republish")
	if !strings.Contains(msg, "status named a-1") || !strings.Contains(msg, "republished the holder from etcd") {
		t.Errorf("StatusCorrupt Event = %q, want it to name the edited holder and say it was republished", msg)
	}
	rel := f.waitFor("lock", 10*time.Second, "a-0's term Releasing", inPhase(lockv1.PhaseReleasing))
	if rel.Status.HolderUID != held.Status.HolderUID || rel.Status.FencingToken != held.Status.FencingToken {
		t.Errorf("after the edit: %s, want a-0's term %d republished as Releasing", describe(rel), held.Status.FencingToken)
	}
	next := f.waitFor("lock", 20*time.Second, "Held again", func(l *lockv1.DistributedLock) bool {
		return l.Status.Phase == lockv1.PhaseHeld
	})
	if waited := time.Since(edit); waited < 4*time.Second {
		t.Errorf("Held again %v after the edit, want no sooner than the 4 s lock delay", waited)
	}
	if next.Status.FencingToken <= held.Status.FencingToken {
		t.Errorf("Held again with token %d, want a new term (> %d), never the republished one again", next.Status.FencingToken, held.Status.FencingToken)
	}
}
