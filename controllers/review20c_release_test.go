package controllers_test

// Adversarial review 20c of issue 20: the wiring of TestReview20cReleaseAfterProvenRestart.

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// TestReview20cReleaseAfterProvenRestartEnvtest: a-0 holds token tok. Its container restarts
// with proof (one container, the old one's exit in lastState) while an operator's Releasing
// runs (the operator's term has no fast path, so the controller waits the full delay). The
// restarted process may have read Held before the operator's Releasing was published and may
// lead tok, cut off from the API server, until its own deadline: only the lock delay bounds
// that. Then a holder release of tok is admitted from a-0's pod-bound token: the old process's
// release, held in flight across its death (or a late retry), which the API server cannot
// tell apart from the new process's. The controller takes it as attestation and grants a-1
// at once, without the 600 s lock delay. Control: without the restart, the release ends the
// term at once (the shipped rule); with an unproven restart the controller already waited.
// Fails on 712fd0b; its pure rows are in TestDecide ("... a holder release ...").
func TestReview20cReleaseAfterProvenRestartEnvtest(t *testing.T) {
	f := newFixture(t)
	f.releaseSetup()
	a0, c0 := f.workerPod("a-0", "a")
	secondApart()
	f.workerPod("a-1", "a")
	l := f.lock("lock", "a", func(s *lockv1.DistributedLockSpec) { s.LockDelaySeconds = new(int32(600)) })
	held := f.waitFor("lock", 20*time.Second, "held by a-0", heldBy("a-0"))
	tok := held.Status.FencingToken

	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"%d",%q:"drain node-3"}}}`, lockv1.AnnotationReleaseRequest, tok, lockv1.AnnotationReleaseReason)
	if err := k8s.Patch(bg(), l.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatalf("operator request: %v", err)
	}
	f.waitFor("lock", 10*time.Second, "Releasing a-0's term", func(l *lockv1.DistributedLock) bool {
		return l.Status.Phase == lockv1.PhaseReleasing && l.Status.Holder == "a-0" && l.Status.FencingToken == tok
	})

	// The kubelet restarts a-0's container (crash, liveness kill): a new containerID,
	// restartCount 1, the recorded container's exit in lastState: proof that the old process
	// is gone, and a new process that may lead tok.
	f.restarted(a0, 1)
	consistently(t, 2*time.Second, func() bool {
		g := f.get("lock")
		return g.Status.Phase == lockv1.PhaseReleasing && g.Status.Holder == "a-0"
	}, func() string { return "the operator's Releasing did not wait (control): " + describe(f.get("lock")) })

	if err := setAnnotation(c0, l, lockv1.AnnotationHolderRelease, lockv1.HolderReleaseValue(a0.UID, tok)); err != nil {
		t.Fatalf("holder release refused: %v", err)
	}
	var last *lockv1.DistributedLock
	consistently(t, 6*time.Second, func() bool {
		last = f.get("lock")
		return last.Status.Holder != "a-1"
	}, func() string {
		return fmt.Sprintf("a-1 granted at once after a release of token %d that arrived after a-0's container restarted (a new process that may lead %d; lock delay 600 s): %s",
			tok, tok, describe(last))
	})
}
