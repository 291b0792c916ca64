package controllers

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// Review of the term logic (issue 10, items 1-5): each test is one scenario in which a rule
// of DESIGN.md's term-lifecycle table does not hold, run through the real gather-side clocks
// (turn.measure) and the real decide.

// reviewTurn is a turn over scene s with a fresh replica memory on a clock the test moves.
func reviewTurn(s *scene) (*turn, *time.Time) {
	r := &Reconciler{}
	r.init()
	now := metav1.Now().Time
	r.mem.now = func() time.Time { return now }
	lock := &lockv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "l", UID: "lock-uid"}}
	lock.Spec, lock.Status = *s.in.spec, *s.in.status
	t := &turn{r: r, lock: lock, key: "ns/l", in: s.in}
	t.in.spec, t.in.status = &t.lock.Spec, &t.lock.Status
	return t, &now
}

// holderUnknown: the published holder is neither in the cache nor answered by the API server
// (its GET failed): holderPod returns (nil, false).
func (s *scene) holderUnknown() *scene {
	s.in.holder.pod, s.in.holder.gone = nil, false
	s.in.pods = s.in.pods[1:]
	return s
}

// TestReviewKeyVanishedHolderUnknownGrantsNobody: the key vanished and the holder's GET
// failed. decideHeld treats "unknown" (reason "", recheck set) as "still eligible" and
// decides a regrant whose next pod is nil; grantTo then dereferences it (pod.Name).
func TestReviewKeyVanishedHolderUnknownGrantsNobody(t *testing.T) {
	d := decide(&newScene().noKey().holderUnknown().in)
	if (d.verb == actGrant || d.verb == actRegrant) && d.next == nil {
		t.Fatalf("decide = verb %d (actRegrant=%d) with next == nil: grantTo(ctx, nil, ...) panics on pod.Name; want a wait for the holder's evidence", d.verb, actRegrant)
	}
	if d.verb != actWait {
		t.Errorf("decide = verb %d, want actWait (%d) until the API server answers for the holder", d.verb, actWait)
	}
}

// TestReviewReturnToHeldNeedsTheHolderSeen: a Releasing term whose holder cannot be read
// (not cached, GET failing) goes back to Held: measure counts "no end reason" as continuous
// eligibility, and decideReleasing keeps the term with no evidence that the pod exists,
// let alone that it is Running and Ready (DESIGN: "holder eligible again while Releasing").
func TestReviewReturnToHeldNeedsTheHolderSeen(t *testing.T) {
	s := newScene().releasing(0).holderUnknown()
	tr, now := reviewTurn(s)
	tr.measure()
	*now = now.Add(returnAfter(tr.in.status) + time.Second)
	tr.measure()
	d := decide(&tr.in)
	if d.verb == actKeep {
		t.Fatalf("decide = actKeep after %v of 'eligibility' measured while the holder pod was unknown (eligibleAgain=%v): a term went back to Held for a pod nobody saw",
			returnAfter(tr.in.status)+time.Second, tr.in.clocks.eligibleAgain)
	}
}

// TestReviewReleasingClockRestartsAfterHeld: the Releasing clock of a token survives a
// period in which this replica saw the term Held. Scenario: Releasing T observed (clock
// starts); the term is returned to Held (keep, whose status write landed but whose reply was
// lost, so memory.returned never ran); an hour later the holder goes NotReady and the
// Releasing write lands but its reply is lost again. The next turn finds the old clock, an
// hour "waited", and ends the term at once, although pods read Held until a moment ago.
func TestReviewReleasingClockRestartsAfterHeld(t *testing.T) {
	s := newScene().releasing(0).holder(notReady())
	tr, now := reviewTurn(s)
	tr.measure() // first observation of Releasing T: the clock starts
	tr.lock.Status.Phase = lockv1.PhaseHeld
	tr.in.g.rec.Phase = lockv1.PhaseHeld
	tr.measure() // the term is Held again (a keep whose acknowledgement was lost)
	*now = now.Add(time.Hour)
	tr.lock.Status.Phase = lockv1.PhaseReleasing
	tr.in.g.rec.Phase = lockv1.PhaseReleasing
	tr.measure() // Releasing again: this is the first observation of this Releasing
	d := decide(&tr.in)
	if d.verb == actEnd {
		next := "<none>"
		if d.next != nil {
			next = d.next.Name
		}
		t.Fatalf("decide = actEnd (next %s) with clocks.releasing=%v on the first observation of a new Releasing; want actWait for the full %v",
			next, tr.in.clocks.releasing, releaseWait(tr.in.spec, tr.in.status))
	}
}

// TestReviewCrashThenDeleteIsNotAttestation: the state a crash awaiting restart leaves when a
// deletion arrives (deletionTimestamp, container terminated, phase still Running) is taken as
// attestation by the "deletion timestamp and all terminated" rule. It is the crash state plus
// an API-server write; the kubelet may already have restarted the container (its status
// write lagging), and a real graceful deletion always reports a terminal phase in the same
// update as the terminated containers (NOTES.md), so the rule is needed for no real sequence.
func TestReviewCrashThenDeleteIsNotAttestation(t *testing.T) {
	p := testPod("p", notReady(), containers(terminated("app", 2)), deleting())
	if attestedTerminated(p, nil) {
		t.Fatalf("attestedTerminated(deleting, container terminated, phase %s) = true: a crash awaiting restart plus a deletion ends the term without the lock delay", p.Status.Phase)
	}
}

// TestReviewPodGCAfterCrashIsNotAttestation: PodGC's Failed (condition DisruptionTarget,
// reason DeletionByPodGC) is not written by the kubelet; it copies whatever container states
// the kubelet last reported. When that last report was a crash awaiting restart
// (terminated, phase Running), the pod is Failed with every container terminated and passes
// the "terminal phase and all terminated" rule, although the node may be partitioned and
// the kubelet may have restarted the container since.
func TestReviewPodGCAfterCrashIsNotAttestation(t *testing.T) {
	p := testPod("p", notReady(), containers(terminated("app", 2)), phase(corev1.PodFailed), func(p *corev1.Pod) {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "DeletionByPodGC"})
	})
	if attestedTerminated(p, nil) {
		t.Fatalf("attestedTerminated(PodGC Failed over a crash awaiting restart) = true: a partitioned node's restarted process is taken as stopped")
	}
}

// TestReviewPublishedReleasingAsksForTheNextTurn: a turn that publishes a Releasing that etcd
// recorded and status did not show (a new epoch taking over after E1 died between its etcd
// write and its status write; or a Releasing status write that conflicted) asks for no
// later turn. Its own status write's event is filtered (notOwnWrite), etcd does not change,
// and a NotReady holder sends no more pod events: nothing wakes the lock when the lock
// delay is over. startReleasing asks for releaseWait; this path must too.
func TestReviewPublishedReleasingAsksForTheNextTurn(t *testing.T) {
	s := newScene().holder(notReady()).do(func(in *input) {
		in.g.rec.Phase, in.g.rec.Reason = lockv1.PhaseReleasing, lockv1.ReasonHolderNotReady
	})
	tr, _ := reviewTurn(s)
	tr.st = *tr.lock.Status.DeepCopy()
	d := decide(&tr.in)
	if d.verb != actPublishReleasing {
		t.Fatalf("decide = verb %d, want actPublishReleasing (%d)", d.verb, actPublishReleasing)
	}
	if _, err := tr.apply(context.Background(), d); err != nil {
		t.Fatalf("apply: %v", err)
	}
	if tr.requeue <= 0 {
		t.Fatalf("after publishing Releasing (phase %s) the turn asks for no later turn (requeue %v); want one within the lock delay %v",
			tr.st.Phase, tr.requeue, releaseWait(tr.in.spec, &tr.st))
	}
}
