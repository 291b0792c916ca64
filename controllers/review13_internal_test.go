package controllers

// Tests from the adversarial review of issue 13 (holder-confirmed release, operator release,
// routing, the eligibility refactor). TestOperatorReleaseNeverReturnsToHeld and
// TestDeposedReplicaWritesNoSlice failed before their fixes. The review's
// TestChooseMatchesPreRefactor (the refactor grants exactly as before) is in pkg/eligibility.

import (
	"context"
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
