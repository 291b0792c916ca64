package controllers_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// TestSelectorWithoutMatchLabels: a lock selecting by matchExpressions alone (no label to
// index it under) still hears of a pod created after it, and a matchLabels lock in the same
// namespace does not take that pod.
func TestSelectorWithoutMatchLabels(t *testing.T) {
	f := newFixture(t)
	f.lock("expr", "", func(s *lockv1.DistributedLockSpec) {
		s.Candidates.Selector = &lockv1.LabelSelector{MatchExpressions: []lockv1.LabelSelectorRequirement{
			{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"x", "z"}},
		}}
	})
	f.lock("labels", "y", nil)
	reconciled := func(l *lockv1.DistributedLock) bool { return l.Status.ObservedGeneration == l.Generation }
	f.waitFor("expr", 20*time.Second, "reconciled with no candidate", reconciled)
	f.waitFor("labels", 20*time.Second, "reconciled with no candidate", reconciled)
	f.pod("x-0", "x")
	f.waitFor("expr", 20*time.Second, "held by x-0", heldBy("x-0"))
	f.pod("y-0", "y")
	f.waitFor("labels", 20*time.Second, "held by y-0", heldBy("y-0"))
	if got := f.get("expr").Status.Holder; got != "x-0" {
		t.Errorf("expr lock holder = %q, want x-0", got)
	}
}

// TestRelabelledHolderEndsTerm: a holder relabelled out of the selector goes to Releasing
// (SelectorChanged); when its containers then stop, the pod no longer matches any selector,
// and only the holder index brings the lock back: the next pod is granted at once instead
// of after the 30 s lock delay.
func TestRelabelledHolderEndsTerm(t *testing.T) {
	f := newFixture(t)
	first := f.pod("a-0", "a")
	f.lock("lock", "a", func(s *lockv1.DistributedLockSpec) { s.LockDelaySeconds = ptrTo[int32](30) })
	held := f.waitFor("lock", 20*time.Second, "held by a-0", heldBy("a-0"))
	f.pod("a-1", "a")
	var p corev1.Pod
	if err := k8s.Get(bg(), objectKey(f.ns, first.Name), &p); err != nil {
		t.Fatal(err)
	}
	p.Labels["app"] = "elsewhere"
	if err := k8s.Update(bg(), &p); err != nil {
		t.Fatalf("relabel a-0: %v", err)
	}
	f.waitFor("lock", 20*time.Second, "Releasing", inPhase(lockv1.PhaseReleasing))
	start := time.Now()
	f.terminate(&p)
	next := f.waitFor("lock", 20*time.Second, "held by a-1", heldBy("a-1"))
	if waited := time.Since(start); waited > 15*time.Second {
		t.Errorf("a-1 granted %v after a-0's containers stopped; want well under the 30 s lock delay", waited)
	}
	if next.Status.FencingToken <= held.Status.FencingToken {
		t.Errorf("token %d after %d, want higher", next.Status.FencingToken, held.Status.FencingToken)
	}
	if h := next.Status.History; len(h) < 2 || h[1].Reason != lockv1.ReasonHolderTerminated {
		t.Errorf("history = %+v, want the ended term with reason HolderTerminated", h)
	}
}
