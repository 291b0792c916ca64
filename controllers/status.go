package controllers

import (
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/pkg/eligibility"
)

// Status transitions. Each takes the status to publish (a copy of the last published one)
// and changes only what the transition changes, so a reconcile that changes nothing writes
// nothing. Timestamps are for display; no decision reads them.

// publishGrant records a new term for pod with the grant's token.
func publishGrant(st *lockv1.DistributedLockStatus, pod string, g grant, leaseID clientv3.LeaseID, reason string, now metav1.Time) {
	if st.HolderUID != g.holderUID {
		st.Transitions++
	}
	st.Phase = lockv1.PhaseHeld
	st.Holder, st.HolderUID, st.FencingToken = pod, g.holderUID, g.token
	st.MaxFencingToken = max(st.MaxFencingToken, g.token)
	st.TermLeaseSeconds = g.rec.LeaseSeconds
	st.LeaseID = fmt.Sprintf("%x", int64(leaseID))
	st.AcquireTime = &now
	for i := range st.History {
		// A term still open here was superseded without a published end (its key vanished
		// and a grant whose status write was lost replaced it): close it.
		if h := &st.History[i]; h.Ended == nil {
			h.Ended = &now
			if h.Reason == "" || h.Reason == lockv1.ReasonGranted || h.Reason == lockv1.ReasonRegranted {
				h.Reason = lockv1.ReasonKeyVanished
			}
		}
	}
	st.History = append([]lockv1.Term{{Holder: pod, HolderUID: g.holderUID, Token: g.token, Acquired: now, Reason: reason}}, st.History...)
	if len(st.History) > lockv1.HistoryLimit {
		st.History = st.History[:lockv1.HistoryLimit]
	}
}

// publishReleasing marks the current term as ending for reason.
func publishReleasing(st *lockv1.DistributedLockStatus, reason string) {
	st.Phase = lockv1.PhaseReleasing
	if open := openTerm(st); open != nil {
		open.Reason = reason
	}
}

// publishEnd closes the current term with reason and clears the holder. The token fields
// keep their maximum: status.maxFencingToken never goes back.
func publishEnd(st *lockv1.DistributedLockStatus, reason string, now metav1.Time) {
	if open := openTerm(st); open != nil {
		open.Ended, open.Reason = &now, reason
	}
	st.Phase = lockv1.PhasePending
	st.Holder, st.HolderUID, st.FencingToken = "", "", 0
	st.TermLeaseSeconds, st.LeaseID, st.AcquireTime = 0, "", nil
}

// openTerm is the history entry of the published term, if any.
func openTerm(st *lockv1.DistributedLockStatus) *lockv1.Term {
	if len(st.History) > 0 && st.History[0].Ended == nil && st.History[0].Token == st.FencingToken && st.FencingToken != 0 {
		return &st.History[0]
	}
	return nil
}

// setCondition sets a condition, keeping LastTransitionTime when the status is unchanged.
func setCondition(st *lockv1.DistributedLockStatus, generation int64, typ string, ok bool, reason, msg string) {
	s := metav1.ConditionFalse
	if ok {
		s = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type: typ, Status: s, Reason: reason, Message: msg, ObservedGeneration: generation,
	})
}

// setHeldCondition derives the Held condition from the phase. Without a holder its message
// says why nobody holds the lock (noHolderMessage), from the turn's candidates.
func setHeldCondition(st *lockv1.DistributedLockStatus, generation int64, spec *lockv1.DistributedLockSpec, selErr error, pods []corev1.Pod) {
	switch st.Phase {
	case lockv1.PhaseHeld:
		setCondition(st, generation, lockv1.ConditionHeld, true, lockv1.ReasonHolderPublished,
			fmt.Sprintf("held by %s with token %d", st.Holder, st.FencingToken))
	case lockv1.PhaseReleasing:
		reason := lockv1.ReasonNoHolder
		if open := openTerm(st); open != nil && open.Reason != "" {
			reason = open.Reason
		}
		setCondition(st, generation, lockv1.ConditionHeld, false, reason,
			fmt.Sprintf("term of %s (token %d) is ending", st.Holder, st.FencingToken))
	case lockv1.PhaseSuspended:
		setCondition(st, generation, lockv1.ConditionHeld, false, lockv1.ReasonSuspended, "spec.suspend is true")
	default:
		setCondition(st, generation, lockv1.ConditionHeld, false, lockv1.ReasonNoHolder, noHolderMessage(spec, st, selErr, pods))
	}
}

// noHolderMessage is the Held=False NoHolder message: why no candidate is granted, for the
// best one (Explain's order), or which pod is granted next when one is eligible already.
func noHolderMessage(spec *lockv1.DistributedLockSpec, st *lockv1.DistributedLockStatus, selErr error, pods []corev1.Pod) string {
	if selErr != nil {
		return "no eligible candidate: spec.candidates.selector cannot be used (see the Valid condition)"
	}
	ex := eligibility.Explain(spec, st, pods)
	if ex.Next != "" {
		return fmt.Sprintf("no holder yet: pod %s is eligible and is granted next", ex.Next)
	}
	return eligibility.NoEligibleMessage(&ex, len(pods))
}

// validity is what only the controller can judge about a lock: Valid=True or a reason.
type validity struct {
	ok      bool
	reason  string
	message string
}

// judge returns the Valid condition for a lock given its candidate pods.
func judge(spec *lockv1.DistributedLockSpec, selErr error, pods []corev1.Pod) validity {
	switch {
	case selErr != nil:
		// One line that names the field and the bad key or value, not the label parser's
		// multi-line error.
		if msg := lockv1.SelectorProblem(spec.Candidates.Selector); msg != "" {
			return validity{reason: lockv1.ReasonInvalidSelector, message: msg}
		}
		return validity{reason: lockv1.ReasonInvalidSelector, message: selErr.Error()}
	case len(pods) == 0:
		return validity{reason: lockv1.ReasonNoCandidates, message: "spec.candidates.selector matches no pod in the namespace"}
	case spec.Strategy == lockv1.StrategyPreferred && !hasPod(pods, spec.PreferredHolder):
		return validity{reason: lockv1.ReasonPreferredHolderAbsent,
			message: fmt.Sprintf("preferred holder %q is not among the selected pods; granting as OldestReady", spec.PreferredHolder)}
	}
	// No count in the message: a condition that changed with every candidate pod would write
	// status for each one (status.eligibleCandidates is the debounced count).
	return validity{ok: true, reason: lockv1.ReasonSpecValid, message: "the selector matches candidate pods"}
}

func hasPod(pods []corev1.Pod, name string) bool {
	for i := range pods {
		if pods[i].Name == name {
			return true
		}
	}
	return false
}
