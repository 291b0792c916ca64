package controllers_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

func TestGrantOnCreate(t *testing.T) {
	f := newFixture(t)
	f.pod("a-0", "a")
	secondApart()
	f.pod("a-1", "a")
	f.lock("lock", "a", nil)
	l := f.waitFor("lock", 20*time.Second, "held by the oldest pod", heldBy("a-0"))
	if l.Status.FencingToken <= 0 || l.Status.MaxFencingToken != l.Status.FencingToken {
		t.Errorf("token %d, max %d; want a positive token equal to the max", l.Status.FencingToken, l.Status.MaxFencingToken)
	}
	if got := f.keyToken("lock"); got != l.Status.FencingToken {
		t.Errorf("etcd key CreateRevision = %d, want the published token %d", got, l.Status.FencingToken)
	}
	if l.Status.ControllerEpoch <= 0 {
		t.Errorf("controllerEpoch = %d, want > 0", l.Status.ControllerEpoch)
	}
	if l.Status.TermLeaseSeconds != 2 || l.Status.LeaseID == "" || l.Status.EligibleCandidates != 2 {
		t.Errorf("termLeaseSeconds %d, leaseID %q, eligibleCandidates %d; want 2, set, 2", l.Status.TermLeaseSeconds, l.Status.LeaseID, l.Status.EligibleCandidates)
	}
	if len(l.Status.History) != 1 || l.Status.History[0].Reason != lockv1.ReasonGranted {
		t.Errorf("history = %+v, want one Granted term", l.Status.History)
	}
}

// TestAttestedTerminationHandsOverAtOnce: containers terminated and the pod deleted (a
// graceful exit) -> the next pod holds with a larger token, without the lock delay.
func TestAttestedTerminationHandsOverAtOnce(t *testing.T) {
	f := newFixture(t)
	a0 := f.pod("a-0", "a")
	secondApart()
	f.pod("a-1", "a")
	f.lock("lock", "a", func(s *lockv1.DistributedLockSpec) { s.LockDelaySeconds = ptrTo[int32](600) })
	first := f.waitFor("lock", 20*time.Second, "held by a-0", heldBy("a-0"))
	f.terminate(a0)
	f.deletePod(a0)
	// The lock delay is 600 s: a handover inside 30 s can only be the attested path.
	next := f.waitFor("lock", 30*time.Second, "held by a-1", heldBy("a-1"))
	if next.Status.FencingToken <= first.Status.FencingToken {
		t.Errorf("token after handover = %d, want > %d", next.Status.FencingToken, first.Status.FencingToken)
	}
	if h := next.Status.History; len(h) < 2 || h[1].Reason != lockv1.ReasonHolderTerminated || h[1].Ended == nil {
		t.Errorf("history = %+v, want the ended term with reason HolderTerminated", h)
	}
}

// TestDeletedWithoutAttestationWaitsLockDelay: the holder's pod object vanishes without a
// terminated status -> Releasing, then the next holder only after the lock delay.
func TestDeletedWithoutAttestationWaitsLockDelay(t *testing.T) {
	f := newFixture(t)
	a0 := f.pod("a-0", "a")
	secondApart()
	f.pod("a-1", "a")
	f.lock("lock", "a", func(s *lockv1.DistributedLockSpec) { s.LockDelaySeconds = ptrTo[int32](4) })
	first := f.waitFor("lock", 20*time.Second, "held by a-0", heldBy("a-0"))
	deleted := time.Now()
	f.deletePod(a0)
	rel := f.waitFor("lock", 10*time.Second, "Releasing", inPhase(lockv1.PhaseReleasing))
	if rel.Status.Holder != "a-0" || rel.Status.FencingToken != first.Status.FencingToken {
		t.Errorf("Releasing shows %s token %d, want a-0 token %d", rel.Status.Holder, rel.Status.FencingToken, first.Status.FencingToken)
	}
	next := f.waitFor("lock", 20*time.Second, "held by a-1", heldBy("a-1"))
	if waited := time.Since(deleted); waited < 4*time.Second {
		t.Errorf("next holder after %v, want at least the 4 s lock delay", waited)
	}
	if next.Status.FencingToken <= first.Status.FencingToken {
		t.Errorf("token = %d, want > %d", next.Status.FencingToken, first.Status.FencingToken)
	}
	// The API server may show the pod terminating before it is gone; both end the term
	// through Releasing.
	if h := next.Status.History; len(h) < 2 || (h[1].Reason != lockv1.ReasonHolderGone && h[1].Reason != lockv1.ReasonHolderTerminating) {
		t.Errorf("history = %+v, want the ended term with reason HolderGone or HolderTerminating", h)
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestGracefulDeletionHandsOverAtOnce: a real graceful deletion marks the pod terminating
// first (Releasing), then the kubelet reports the containers terminated: that attestation
// ends the wait at once, without the lock delay.
func TestGracefulDeletionHandsOverAtOnce(t *testing.T) {
	f := newFixture(t)
	a0 := f.pod("a-0", "a")
	secondApart()
	f.pod("a-1", "a")
	f.lock("lock", "a", func(s *lockv1.DistributedLockSpec) { s.LockDelaySeconds = ptrTo[int32](600) })
	first := f.waitFor("lock", 20*time.Second, "held by a-0", heldBy("a-0"))
	// A finalizer keeps the terminating pod visible, as a kubelet's grace period does.
	var cur corev1.Pod
	if err := k8s.Get(bg(), client.ObjectKeyFromObject(a0), &cur); err != nil {
		t.Fatal(err)
	}
	cur.Finalizers = append(cur.Finalizers, "test.lockwarden.io/grace")
	if err := k8s.Update(bg(), &cur); err != nil {
		t.Fatalf("add finalizer: %v", err)
	}
	t.Cleanup(func() {
		var p corev1.Pod
		if err := k8s.Get(bg(), client.ObjectKeyFromObject(a0), &p); err == nil {
			p.Finalizers = nil
			_ = k8s.Update(bg(), &p)
		}
	})
	if err := k8s.Delete(bg(), &cur); err != nil {
		t.Fatalf("delete pod: %v", err)
	}
	rel := f.waitFor("lock", 10*time.Second, "Releasing (terminating)", inPhase(lockv1.PhaseReleasing))
	if h := rel.Status.History; len(h) == 0 || h[0].Reason != lockv1.ReasonHolderTerminating {
		t.Errorf("history = %+v, want the open term ending with HolderTerminating", h)
	}
	f.terminate(a0)
	next := f.waitFor("lock", 30*time.Second, "held by a-1 without the 600 s lock delay", heldBy("a-1"))
	if next.Status.FencingToken <= first.Status.FencingToken {
		t.Errorf("token = %d, want > %d", next.Status.FencingToken, first.Status.FencingToken)
	}
}
