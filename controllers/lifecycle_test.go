package controllers_test

import (
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// TestNotReadyThenReadyNewTermSamePod: a holder NotReady -> Releasing; Ready again inside
// the lock delay -> the same pod gets a new term at once (a new token: a return never keeps
// the token, which its process would lead as another writer), and no other pod is granted.
// Before, it went back to Held with the same token.
func TestNotReadyThenReadyNewTermSamePod(t *testing.T) {
	f := newFixture(t)
	a0 := f.pod("a-0", "a")
	f.pod("a-1", "a")
	f.lock("lock", "a", func(s *lockv1.DistributedLockSpec) { s.LockDelaySeconds = ptrTo[int32](60) })
	first := f.waitFor("lock", 20*time.Second, "held", inPhase(lockv1.PhaseHeld))
	holder := a0
	if first.Status.Holder != "a-0" {
		t.Fatalf("holder = %s, want a-0 (oldest)", first.Status.Holder)
	}
	f.setReady(holder, false)
	f.waitFor("lock", 10*time.Second, "Releasing", inPhase(lockv1.PhaseReleasing))
	f.setReady(holder, true)
	back := f.waitFor("lock", 20*time.Second, "Held again", inPhase(lockv1.PhaseHeld))
	if back.Status.Holder != "a-0" || back.Status.FencingToken <= first.Status.FencingToken {
		t.Errorf("after return: holder %s token %d, want a-0 with a token above %d", back.Status.Holder, back.Status.FencingToken, first.Status.FencingToken)
	}
	if got := f.keyToken("lock"); got != back.Status.FencingToken {
		t.Errorf("etcd token = %d, want the published %d", got, back.Status.FencingToken)
	}
	if len(back.Status.History) < 2 || back.Status.History[1].Token != first.Status.FencingToken || back.Status.History[1].Reason != lockv1.ReasonHolderNotReady {
		t.Errorf("history = %+v, want the new term, then token %d ended %s", back.Status.History, first.Status.FencingToken, lockv1.ReasonHolderNotReady)
	}
}

// TestFlappingHolderMovesOn: a holder that keeps bouncing between NotReady and Ready loses
// the lock to another candidate after at most two returns.
func TestFlappingHolderMovesOn(t *testing.T) {
	f := newFixture(t)
	a0 := f.pod("a-0", "a")
	secondApart()
	f.pod("a-1", "a")
	f.lock("lock", "a", func(s *lockv1.DistributedLockSpec) { s.LockDelaySeconds = ptrTo[int32](4) })
	first := f.waitFor("lock", 20*time.Second, "held by a-0", heldBy("a-0"))
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		l := f.get("lock")
		if l.Status.Holder == "a-1" && l.Status.Phase == lockv1.PhaseHeld {
			if l.Status.FencingToken <= first.Status.FencingToken {
				t.Errorf("token = %d, want > %d", l.Status.FencingToken, first.Status.FencingToken)
			}
			return
		}
		f.setReady(a0, false)
		f.waitFor("lock", 10*time.Second, "Releasing or moved on", func(l *lockv1.DistributedLock) bool {
			return l.Status.Phase == lockv1.PhaseReleasing || l.Status.Holder == "a-1"
		})
		f.setReady(a0, true)
		time.Sleep(2500 * time.Millisecond) // eligible a little past max(L/3, 2 s): long enough to return, if allowed
	}
	t.Fatalf("flapping holder kept the lock for 60 s: %s", describe(f.get("lock")))
}

// TestSuspendAndResume: suspend ends the term through Releasing and grants nothing; resume
// grants again with a larger token.
func TestSuspendAndResume(t *testing.T) {
	f := newFixture(t)
	f.pod("a-0", "a")
	f.lock("lock", "a", nil)
	first := f.waitFor("lock", 20*time.Second, "held", heldBy("a-0"))
	f.editLock("lock", func(l *lockv1.DistributedLock) { l.Spec.Suspend = true })
	f.waitFor("lock", 20*time.Second, "Suspended", inPhase(lockv1.PhaseSuspended))
	if msg := f.waitEventMessage(t, lockv1.ReasonSuspended); !strings.Contains(msg, "no one is granted until it is false again") || strings.Contains(msg, "next holder") {
		t.Errorf("Suspended Event = %q, want it to say no one is granted and promise no next holder", msg)
	}
	if tok := f.keyToken("lock"); tok != 0 {
		t.Errorf("etcd key token %d while suspended, want no key", tok)
	}
	f.editLock("lock", func(l *lockv1.DistributedLock) { l.Spec.Suspend = false })
	next := f.waitFor("lock", 20*time.Second, "held again", heldBy("a-0"))
	if next.Status.FencingToken <= first.Status.FencingToken {
		t.Errorf("token after resume = %d, want > %d", next.Status.FencingToken, first.Status.FencingToken)
	}
	if h := next.Status.History; len(h) < 2 || h[1].Reason != lockv1.ReasonSuspended {
		t.Errorf("history = %+v, want the ended term with reason Suspended", h)
	}
}

// TestSelectorEditedAwayFromHolder: the holder no longer matches -> Releasing -> the pod
// that matches holds, with a larger token.
func TestSelectorEditedAwayFromHolder(t *testing.T) {
	f := newFixture(t)
	f.pod("a-0", "a")
	f.pod("b-0", "b")
	f.lock("lock", "a", nil)
	first := f.waitFor("lock", 20*time.Second, "held by a-0", heldBy("a-0"))
	f.editLock("lock", func(l *lockv1.DistributedLock) {
		l.Spec.Candidates.Selector = lockv1.MatchLabels(map[string]string{"app": "b"})
	})
	next := f.waitFor("lock", 20*time.Second, "held by b-0", heldBy("b-0"))
	if next.Status.FencingToken <= first.Status.FencingToken {
		t.Errorf("token = %d, want > %d", next.Status.FencingToken, first.Status.FencingToken)
	}
	if h := next.Status.History; len(h) < 2 || h[1].Reason != lockv1.ReasonSelectorChanged {
		t.Errorf("history = %+v, want the ended term with reason SelectorChanged", h)
	}
}

// TestKeyDeletedBehindController: an operator deletes the etcd key; the eligible holder is
// granted again at once with a new token.
func TestKeyDeletedBehindController(t *testing.T) {
	f := newFixture(t)
	f.pod("a-0", "a")
	f.lock("lock", "a", nil)
	first := f.waitFor("lock", 20*time.Second, "held", heldBy("a-0"))
	if _, err := f.cli.Delete(bg(), f.engine.Path(f.ns+"/lock")); err != nil {
		t.Fatalf("delete key: %v", err)
	}
	// Nothing in Kubernetes changes: the controller learns of it from its grant's watch.
	next := f.waitFor("lock", 20*time.Second, "regranted", func(l *lockv1.DistributedLock) bool {
		return l.Status.Phase == lockv1.PhaseHeld && l.Status.FencingToken > first.Status.FencingToken
	})
	if next.Status.Holder != "a-0" {
		t.Errorf("holder = %s, want a-0 again", next.Status.Holder)
	}
	if got := f.keyToken("lock"); got != next.Status.FencingToken {
		t.Errorf("etcd token = %d, want %d", got, next.Status.FencingToken)
	}
	if h := next.Status.History; len(h) < 2 || h[0].Reason != lockv1.ReasonRegranted || h[1].Reason != lockv1.ReasonKeyVanished {
		t.Errorf("history = %+v, want Regranted after KeyVanished", h)
	}
}

// TestLockDeletedReleasesKey: deleting a held lock publishes Releasing, waits, deletes the
// etcd key, then lets the object go.
func TestLockDeletedReleasesKey(t *testing.T) {
	f := newFixture(t)
	f.pod("a-0", "a")
	l := f.lock("lock", "a", nil)
	f.waitFor("lock", 20*time.Second, "held", heldBy("a-0"))
	if err := k8s.Delete(bg(), l); err != nil {
		t.Fatalf("delete lock: %v", err)
	}
	f.waitFor("lock", 10*time.Second, "Releasing", inPhase(lockv1.PhaseReleasing))
	msg := f.waitEventMessage(t, lockv1.ReasonDeleted)
	if !strings.Contains(msg, "deletion waits up to 2s for the term of a-0") || strings.Contains(msg, "next holder") {
		t.Errorf("Deleted Event = %q, want it to say the deletion waits up to 2s and promise no next holder", msg)
	}
	eventually(t, 20*time.Second, func() bool {
		var cur lockv1.DistributedLock
		return apierrors.IsNotFound(k8s.Get(bg(), objectKey(f.ns, "lock"), &cur))
	}, func() string { return "lock deleted; status: " + describe(f.get("lock")) })
	if tok := f.keyToken("lock"); tok != 0 {
		t.Errorf("lock object gone but etcd key remains with token %d", tok)
	}
}

// waitEventMessage waits for an Event with reason about the fixture's lock and returns its note.
func (f *fixture) waitEventMessage(t *testing.T, reason string) string {
	t.Helper()
	return f.waitEventNote(t, reason, "")
}

// waitEventNote is waitEventMessage for the Event of reason with action (any when "").
func (f *fixture) waitEventNote(t *testing.T, reason, action string) string {
	t.Helper()
	var note string
	eventually(t, 10*time.Second, func() bool {
		var evs eventsv1.EventList
		if err := k8s.List(bg(), &evs, client.InNamespace(f.ns)); err != nil {
			t.Fatalf("list events: %v", err)
		}
		for _, e := range evs.Items {
			if e.Reason == reason && e.Regarding.Kind == "DistributedLock" && (action == "" || e.Action == action) {
				note = e.Note
				return true
			}
		}
		return false
	}, func() string { return "no Event with reason " + reason + " and action " + action })
	return note
}
