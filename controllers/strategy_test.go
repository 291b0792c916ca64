package controllers_test

import (
	"fmt"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// TestFirstReady grants the pod that became Ready first, not the oldest.
func TestFirstReady(t *testing.T) {
	f := newFixture(t)
	old := f.pod("a-old", "a")
	f.setReady(old, false)
	secondApart()
	f.pod("a-young", "a")
	secondApart()
	f.setReady(old, true)
	f.lock("lock", "a", func(s *lockv1.DistributedLockSpec) { s.Strategy = lockv1.StrategyFirstReady })
	f.waitFor("lock", 20*time.Second, "held by a-young (ready first)", heldBy("a-young"))
}

// TestPreferredPreemption: the preferred pod is granted at once when nobody holds the lock;
// when it comes back after another pod took over, it preempts (through Releasing) once it
// has been eligible for the lock delay.
func TestPreferredPreemption(t *testing.T) {
	f := newFixture(t)
	other := f.pod("a-0", "a")
	_ = other
	pref := f.pod("a-pref", "a")
	f.lock("lock", "a", func(s *lockv1.DistributedLockSpec) {
		s.Strategy, s.PreferredHolder = lockv1.StrategyPreferred, "a-pref"
		s.LockDelaySeconds = ptrTo[int32](3)
	})
	first := f.waitFor("lock", 20*time.Second, "held by the preferred pod", heldBy("a-pref"))

	// The preferred pod goes away (attested), a-0 takes over at once.
	f.terminate(pref)
	f.deletePod(pref)
	second := f.waitFor("lock", 20*time.Second, "held by a-0", heldBy("a-0"))

	// The preferred pod returns: after 3 s of eligibility a-0 is preempted through Releasing.
	back := time.Now()
	f.pod("a-pref", "a")
	f.waitFor("lock", 20*time.Second, "Releasing (preempted)", inPhase(lockv1.PhaseReleasing))
	third := f.waitFor("lock", 30*time.Second, "held by a-pref again", heldBy("a-pref"))
	if waited := time.Since(back); waited < 6*time.Second {
		t.Errorf("preemption completed after %v, want at least eligibility (3 s) plus the lock delay (3 s)", waited)
	}
	if first.Status.FencingToken >= second.Status.FencingToken || second.Status.FencingToken >= third.Status.FencingToken {
		t.Errorf("tokens %d, %d, %d; want strictly increasing", first.Status.FencingToken, second.Status.FencingToken, third.Status.FencingToken)
	}
	if h := third.Status.History; len(h) < 2 || h[1].Reason != lockv1.ReasonPreempted {
		t.Errorf("history = %+v, want the preempted term with reason Preempted", h)
	}
}

// TestStrategyChangeEndsTerm: changing the strategy ends the term through Releasing.
func TestStrategyChangeEndsTerm(t *testing.T) {
	f := newFixture(t)
	f.pod("a-0", "a")
	f.lock("lock", "a", nil)
	first := f.waitFor("lock", 20*time.Second, "held", heldBy("a-0"))
	f.editLock("lock", func(l *lockv1.DistributedLock) { l.Spec.Strategy = lockv1.StrategyFirstReady })
	next := f.waitFor("lock", 20*time.Second, "held under the new strategy", func(l *lockv1.DistributedLock) bool {
		return l.Status.Phase == lockv1.PhaseHeld && l.Status.FencingToken > first.Status.FencingToken
	})
	if h := next.Status.History; len(h) < 2 || h[1].Reason != lockv1.ReasonStrategyChanged {
		t.Errorf("history = %+v, want the ended term with reason StrategyChanged", h)
	}
}

// TestNoCandidatesCondition: a selector that matches nothing is a condition and an Event,
// not an error.
func TestNoCandidatesCondition(t *testing.T) {
	f := newFixture(t)
	f.lock("lock", "nobody", nil)
	f.waitFor("lock", 20*time.Second, "Valid=False NoCandidates", func(l *lockv1.DistributedLock) bool {
		for _, c := range l.Status.Conditions {
			if c.Type == lockv1.ConditionValid && c.Status == "False" && c.Reason == lockv1.ReasonNoCandidates {
				return l.Status.Phase == lockv1.PhasePending
			}
		}
		return false
	})
	var evs eventsv1.EventList
	eventually(t, 10*time.Second, func() bool {
		if err := k8s.List(bg(), &evs, client.InNamespace(f.ns)); err != nil {
			t.Fatalf("list events: %v", err)
		}
		for _, e := range evs.Items {
			if e.Reason == lockv1.ReasonNoCandidates && e.Regarding.Name == "lock" && e.Type == "Warning" {
				return true
			}
		}
		return false
	}, func() string {
		return fmt.Sprintf("no Warning Event with reason %s for the lock among %d events", lockv1.ReasonNoCandidates, len(evs.Items))
	})
}
