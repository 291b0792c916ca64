package eligibility

import (
	corev1 "k8s.io/api/core/v1"
)

// Ineligibility says which part of the eligibility rule (Running, Ready=True, not being
// deleted, selected) a pod fails. The empty value means eligible.
type Ineligibility string

// Why a pod is not eligible. notEligible decides with PodTerminating, PodNotRunning and
// PodNotReady; Explain refines PodNotRunning and PodNotReady from the pod's status for the
// reader, which changes no decision.
const (
	// PodTerminating: the pod has a deletion timestamp.
	PodTerminating Ineligibility = "Terminating"
	// PodNotRunning: the pod's phase is not Running (and not one of the refinements below).
	PodNotRunning Ineligibility = "NotRunning"
	// PodNotScheduled: the pod is Pending and not bound to a node.
	PodNotScheduled Ineligibility = "NotScheduled"
	// PodPending: the pod is Pending on a node (images, init containers, container creation).
	PodPending Ineligibility = "Pending"
	// PodFinished: the pod's phase is Succeeded or Failed.
	PodFinished Ineligibility = "Finished"
	// PodNotReady: the pod is Running and its Ready condition is not True.
	PodNotReady Ineligibility = "NotReady"
	// PodRestarting: the pod is Running, not Ready, and a container exited and awaits a restart.
	PodRestarting Ineligibility = "Restarting"
	// PodNotSelected: spec.candidates.selector does not match the pod (or cannot be used).
	PodNotSelected Ineligibility = "NotSelected"
)

// notEligible is the one statement of DESIGN.md's eligibility rule (Running, Ready=True, not
// being deleted): it says which part a pod fails, in that order, or "" when the pod may hold a
// lock. Eligible and Explain both read it, so an explanation cannot disagree with a grant.
func notEligible(p *corev1.Pod) Ineligibility {
	switch {
	case p.DeletionTimestamp != nil:
		return PodTerminating
	case p.Status.Phase != corev1.PodRunning:
		return PodNotRunning
	case !podReady(p):
		return PodNotReady
	}
	return ""
}

// Eligible reports whether a pod may hold a lock: Running, Ready=True, not being deleted.
// Whether the lock's selector matches the pod is the caller's to check.
func Eligible(p *corev1.Pod) bool {
	return notEligible(p) == ""
}

// Count counts the eligible pods (status.eligibleCandidates).
func Count(pods []corev1.Pod) int32 {
	var n int32
	for i := range pods {
		if Eligible(&pods[i]) {
			n++
		}
	}
	return n
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
