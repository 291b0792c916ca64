package controllers

import (
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// notEligible is the one statement of DESIGN.md's eligibility rule (Running, Ready=True, not
// being deleted): it says which part a pod fails, in that order, or "" when the pod may hold a
// lock. eligible and Explain both read it, so an explanation cannot disagree with a grant.
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

// eligible reports whether a pod may hold a lock: Running, Ready=True, not being deleted.
func eligible(p *corev1.Pod) bool {
	return notEligible(p) == ""
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// readySince is when the pod last became Ready, by the API server's record. It orders
// FirstReady candidates only; no safety decision uses it.
func readySince(p *corev1.Pod) metav1.Time {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.LastTransitionTime
		}
	}
	return metav1.Time{}
}

// rank orders every pod by the strategy's preference, best first, eligible or not: under
// Preferred the preferred pod first; then by the last transition of Ready (FirstReady) or by
// creation time (OldestReady, and Preferred for the others); ties broken by name. choose
// grants the first eligible pod of this order.
func rank(spec *lockv1.DistributedLockSpec, pods []corev1.Pod) []*corev1.Pod {
	out := make([]*corev1.Pod, len(pods))
	for i := range pods {
		out[i] = &pods[i]
	}
	preferred := func(p *corev1.Pod) bool {
		return spec.Strategy == lockv1.StrategyPreferred && p.Name == spec.PreferredHolder
	}
	key := func(p *corev1.Pod) metav1.Time {
		if spec.Strategy == lockv1.StrategyFirstReady {
			return readySince(p)
		}
		return p.CreationTimestamp
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if pa, pb := preferred(a), preferred(b); pa != pb {
			return pa
		}
		if ta, tb := key(a), key(b); !ta.Equal(&tb) {
			return ta.Before(&tb)
		}
		return a.Name < b.Name
	})
	return out
}

// choose picks the next holder among eligible pods by strategy, skipping the UID in exclude
// (the holder whose term just ended). It returns nil when none is eligible. With Preferred
// and no holder, the preferred pod is granted at once when eligible; preemption of another
// holder is decided elsewhere.
func choose(spec *lockv1.DistributedLockSpec, pods []corev1.Pod, exclude string) *corev1.Pod {
	for _, p := range rank(spec, pods) {
		if eligible(p) && string(p.UID) != exclude {
			return p
		}
	}
	return nil
}

// countEligible counts the eligible pods.
func countEligible(pods []corev1.Pod) int32 {
	var n int32
	for i := range pods {
		if eligible(&pods[i]) {
			n++
		}
	}
	return n
}
