package controllers

import (
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// eligible reports whether a pod may hold a lock: Running, Ready=True, not being deleted.
func eligible(p *corev1.Pod) bool {
	return p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && podReady(p)
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

// choose picks the next holder among eligible pods by strategy, skipping the UID in exclude
// (the holder whose term just ended). It returns nil when none is eligible. With Preferred
// and no holder, the preferred pod is granted at once when eligible; preemption of another
// holder is decided elsewhere.
func choose(spec *lockv1.DistributedLockSpec, pods []corev1.Pod, exclude string) *corev1.Pod {
	var cands []*corev1.Pod
	for i := range pods {
		p := &pods[i]
		if eligible(p) && string(p.UID) != exclude {
			cands = append(cands, p)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	if spec.Strategy == lockv1.StrategyPreferred {
		for _, p := range cands {
			if p.Name == spec.PreferredHolder {
				return p
			}
		}
	}
	byName := func(a, b *corev1.Pod) bool { return a.Name < b.Name }
	switch spec.Strategy {
	case lockv1.StrategyFirstReady:
		sort.SliceStable(cands, func(i, j int) bool {
			ti, tj := readySince(cands[i]), readySince(cands[j])
			if !ti.Equal(&tj) {
				return ti.Before(&tj)
			}
			return byName(cands[i], cands[j])
		})
	default: // OldestReady, and Preferred while the preferred pod is not eligible
		sort.SliceStable(cands, func(i, j int) bool {
			ti, tj := cands[i].CreationTimestamp, cands[j].CreationTimestamp
			if !ti.Equal(&tj) {
				return ti.Before(&tj)
			}
			return byName(cands[i], cands[j])
		})
	}
	return cands[0]
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
