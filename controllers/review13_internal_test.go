package controllers

// Tests from the adversarial review of issue 13 (holder-confirmed release, operator release,
// routing, the eligibility refactor). TestOperatorReleaseNeverReturnsToHeld and
// TestDeposedReplicaWritesNoSlice failed before their fixes; TestChooseMatchesPreRefactor
// passed (the refactor grants exactly as before).

import (
	"context"
	"fmt"
	"math/rand"
	"sort"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// TestOperatorReleaseNeverReturnsToHeld: an operator's release moved the term to Releasing
// (history says OperatorRelease). If the release-request annotation is then removed (or
// overwritten by another value, e.g. a GitOps tool re-applying the manifest), nothing any
// more says the term is ending by the operator's will: the eligible holder must still not
// return to Held (the operator release never returns a Releasing term to Held).
func TestOperatorReleaseNeverReturnsToHeld(t *testing.T) {
	s := newScene().releasing(time.Second).do(func(in *input) {
		in.status.History[0].Reason = lockv1.ReasonOperatorRelease
		in.g.rec.Reason = lockv1.ReasonOperatorRelease
		in.clocks.eligibleAgain, in.clocks.mayReturn = 10*time.Second, true
	}) // no request annotation any more
	d := decide(&s.in)
	if d.verb == actKeep {
		t.Errorf("operator release withdrawn during Releasing: decide = actKeep (back to Held, same token); want the term to keep Releasing")
	}
}

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

// TestChooseMatchesPreRefactor: the rank-based choose grants exactly as the old choose, on
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
		a, b := oldChoose(spec, pods, exclude), choose(spec, pods, exclude)
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

// deposedFence is a controller election this replica no longer holds.
type deposedFence struct{}

func (deposedFence) Token() int64          { return 3 }
func (deposedFence) IsOwner() clientv3.Cmp { return clientv3.Cmp{} }
func (deposedFence) Valid() bool           { return false }

// TestDeposedReplicaWritesNoSlice: routeAfter (called on the path where the turn's
// status is unchanged, before and without any election check) writes the EndpointSlice from
// the status this replica's cache shows, although its election is no longer valid. A deposed
// replica whose lock cache still shows Held by a-0 (the new leader has since published
// Releasing and emptied the slice) lists a-0 again: slice writes carry no epoch fence.
func TestDeposedReplicaWritesNoSlice(t *testing.T) {
	sch := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(sch)
	_ = lockv1.AddToScheme(sch)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "pg", Port: 5432}}}}
	holder := testPod("a-0")
	holder.Namespace, holder.Status.PodIP = "ns", "10.0.0.1"
	lock := &lockv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns", UID: "uid-lock"},
		Spec:   lockv1.DistributedLockSpec{Routing: &lockv1.Routing{Service: "db"}},
		Status: lockv1.DistributedLockStatus{Phase: lockv1.PhaseHeld, Holder: "a-0", HolderUID: holder.UID, FencingToken: 7}}
	c := fake.NewClientBuilder().WithScheme(sch).WithObjects(svc, lock).Build()
	r := &Reconciler{Client: c, Recorder: events.NewFakeRecorder(100), Election: deposedFence{}}
	tr := &turn{r: r, lock: lock, key: lockKey("ns", "db")}
	tr.in.pods = []corev1.Pod{*holder}
	tr.routeAfter(context.Background())
	var list discoveryv1.EndpointSliceList
	if err := c.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	for _, s := range list.Items {
		if len(s.Endpoints) > 0 {
			t.Errorf("a replica whose election is not valid wrote EndpointSlice %s listing %s", s.Name, s.Endpoints[0].TargetRef.Name)
		}
	}
}
