package controllers

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/pkg/eligibility"
)

// ending says whether and why the published holder's term must end.
type ending struct {
	// reason is "" while the term may continue.
	reason string
	// attested: the holder's work is known to have stopped (its own release of this term,
	// or attestedTerminated, now or remembered from a pod event of this term); the next
	// grant may follow at once.
	attested bool
	// proof: a container the grant recorded restarted since (restart.go), nothing else ends
	// the term (reason HolderRestarted), and the restart proves that the old process is gone
	// (restartProof, exitSeen): the same pod may get a new term at once.
	proof bool
	// pod is the holder pod when it exists with the published UID.
	pod *corev1.Pod
	// recheck asks for another turn (Preferred preemption timing, a failed GET).
	recheck time.Duration
}

// termEnd evaluates the published holder against the term-ending rules, in order: proof
// that it stopped first (the fast path: its own release when no restart can have come
// between the grant and it, then attested termination), then
// every end that must go through Releasing, an operator's request among them, and last a
// restart of its container when nothing else ends the term.
func termEnd(in *input) ending {
	h := in.holder
	e := ending{pod: h.pod}
	spec := in.spec
	switch {
	case holderReleased(in) && !mayHaveRestarted(in):
		e.reason, e.attested = lockv1.ReasonHolderReleased, true
	case h.remembered || (h.pod != nil && attestedTerminated(h.pod, h.node)):
		e.reason, e.attested = lockv1.ReasonHolderTerminated, true
	case in.deleting:
		e.reason = lockv1.ReasonDeleted
	case operatorRequested(in):
		// Before the holder's own state: the operator's reason is the one recorded. It is
		// never a return to Held, and never shortens a wait (it proves nothing).
		e.reason = lockv1.ReasonOperatorRelease
	case h.gone:
		e.reason = lockv1.ReasonHolderGone
	case h.pod == nil:
		// The API server could not be asked: keep the term; the next turn asks again.
		e.recheck = time.Second
	case h.pod.DeletionTimestamp != nil:
		e.reason = lockv1.ReasonHolderTerminating
	case in.selector == nil || !in.selector.Matches(labels.Set(h.pod.Labels)):
		e.reason = lockv1.ReasonSelectorChanged
	case in.retired:
		e.reason = lockv1.ReasonSlotRemoved
	case spec.Suspend:
		e.reason = lockv1.ReasonSuspended
	case !eligibility.Eligible(h.pod) && !restartExcuses(in, &e):
		e.reason = lockv1.ReasonHolderNotReady
	case in.g.present() && in.g.rec.Strategy != "" && in.g.rec.Strategy != spec.Strategy:
		e.reason = lockv1.ReasonStrategyChanged
	case spec.Strategy == lockv1.StrategyPreferred:
		e.reason, e.recheck = preemption(in)
	}
	if e.reason == "" && h.pod != nil && in.g.present() && in.g.token == in.status.FencingToken && restartedSince(h.pod, in.g.rec.Containers) {
		e.reason, e.proof = lockv1.ReasonHolderRestarted, restartProof(h.pod) && exitSeen(h.pod, in.g.rec.Containers)
	}
	return e
}

// preemption decides Preferred preemption: the preferred pod takes over once it has been
// continuously eligible for the lock delay.
func preemption(in *input) (string, time.Duration) {
	p := preferredPod(in.spec, in.pods)
	if p == nil || p.UID == in.status.HolderUID || !eligibility.Eligible(p) || in.openSlot {
		// in.openSlot: a lock of several slots preempts one slot for the preferred pod, and
		// none while another is free or ending (that one goes to it; review 22)
		return "", 0
	}
	delay := time.Duration(in.spec.EffectiveLockDelaySeconds()) * time.Second
	if in.clocks.preferred >= delay {
		return lockv1.ReasonPreempted, 0
	}
	return "", delay - in.clocks.preferred
}

// preferredReturns is what an operator's release of holder adds to its Event: with strategy
// Preferred the released preferred holder gets the lock back by preemption.
func preferredReturns(spec *lockv1.DistributedLockSpec, holder string) string {
	if spec.Strategy != lockv1.StrategyPreferred || spec.PreferredHolder != holder {
		return ""
	}
	return fmt.Sprintf("; strategy Preferred: %s is spec.preferredHolder, so once the next holder is granted the lock returns to %s after it has been eligible for the lock delay (set spec.preferredHolder to another pod, or release with kubectl dlock release --prefer, to keep it away)", holder, holder)
}

// preferredPod is the candidate named spec.preferredHolder, or nil.
func preferredPod(spec *lockv1.DistributedLockSpec, pods []corev1.Pod) *corev1.Pod {
	if spec.Strategy != lockv1.StrategyPreferred {
		return nil
	}
	for i := range pods {
		if pods[i].Name == spec.PreferredHolder {
			return &pods[i]
		}
	}
	return nil
}
