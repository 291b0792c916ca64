package eligibility

// From the adversarial review of issue 13 (the eligibility refactor): it passed, the
// refactor grants exactly as before. Moved here from controllers with Choose (issue 25).

import (
	"fmt"
	"math/rand"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// oldChoose is choose as it was at d4ad555.
func oldChoose(spec *lockv1.DistributedLockSpec, pods []corev1.Pod, exclude string) *corev1.Pod {
	var cands []*corev1.Pod
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && podReady(p) && string(p.UID) != exclude {
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
	default:
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

// TestChooseMatchesPreRefactor: the rank-based Choose grants exactly as the old choose, on
// random candidate sets (every strategy, eligibility mix, ties in time, exclusions).
func TestChooseMatchesPreRefactor(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	strategies := []lockv1.Strategy{lockv1.StrategyOldestReady, lockv1.StrategyFirstReady, lockv1.StrategyPreferred}
	for n := 0; n < 20000; n++ {
		var pods []corev1.Pod
		for i := range rng.Intn(6) {
			var opts []podOpt
			opts = append(opts, created(int64(rng.Intn(3))))
			switch rng.Intn(5) {
			case 0:
				opts = append(opts, notReady())
			case 1:
				opts = append(opts, deleting())
			case 2:
				opts = append(opts, phase(corev1.PodPending))
			}
			p := testPod(fmt.Sprintf("p-%d", rng.Intn(9)*10+i), opts...)
			if rng.Intn(2) == 0 && len(p.Status.Conditions) > 0 {
				p.Status.Conditions[0].LastTransitionTime = metav1.Unix(int64(rng.Intn(3)), 0)
			}
			pods = append(pods, *p)
		}
		spec := &lockv1.DistributedLockSpec{Strategy: strategies[rng.Intn(3)]}
		if len(pods) > 0 && rng.Intn(3) > 0 {
			spec.PreferredHolder = pods[rng.Intn(len(pods))].Name
		}
		exclude := ""
		if len(pods) > 0 && rng.Intn(2) == 0 {
			exclude = string(pods[rng.Intn(len(pods))].UID)
		}
		a, b := oldChoose(spec, pods, exclude), Choose(spec, pods, exclude)
		if (a == nil) != (b == nil) || a != nil && a.UID != b.UID {
			t.Fatalf("case %d: strategy %s preferred %q exclude %q: old %v, new %v", n, spec.Strategy, spec.PreferredHolder, exclude, name(a), name(b))
		}
	}
}

func name(p *corev1.Pod) string {
	if p == nil {
		return "<nil>"
	}
	return p.Name
}
