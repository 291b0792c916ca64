package eligibility

import (
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// Choose picks the next holder among eligible pods by strategy, skipping the UID in exclude
// (the holder whose term just ended). It returns nil when none is eligible. With Preferred
// and no holder, the preferred pod is granted at once when eligible; preemption of another
// holder is decided elsewhere (the controller's term lifecycle). pods are the pods the lock's
// selector matches; Choose does not match them again.
func Choose(spec *lockv1.DistributedLockSpec, pods []corev1.Pod, exclude string) *corev1.Pod {
	for _, p := range rank(spec, pods) {
		if Eligible(p) && string(p.UID) != exclude {
			return p
		}
	}
	return nil
}

// rank orders every pod by the strategy's preference, best first, eligible or not: under
// Preferred the preferred pod first; then by the last transition of Ready (FirstReady) or by
// creation time (OldestReady, and Preferred for the others); ties broken by name. Choose
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
