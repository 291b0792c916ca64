package controllers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// Routing across a controller failover: a new replica has written no slice yet, so it asks
// the API server what the slice lists before it publishes a status that ends that pod's
// term (found by the adversarial review of issue 13; both tests failed before the fix with
// "the lock became ... while the EndpointSlice still listed db-0").

// TestRoutingFailoverEmptiesBeforeReleasing: replica-a routes db-0; it stops; db-0 turns NotReady
// while no controller runs; replica-b starts with empty route memory, and its first turn of
// the lock writes Releasing. routeBefore skips emptying because this replica "listed"
// nothing, so the slice still lists db-0 while Releasing is published.
func TestRoutingFailoverEmptiesBeforeReleasing(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(bg())
	t.Cleanup(cancel)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: f.ns}, Spec: corev1.ServiceSpec{
		Ports: []corev1.ServicePort{{Name: "pg", Port: 5432}},
	}}
	if err := k8s.Create(bg(), svc); err != nil {
		t.Fatalf("create Service: %v", err)
	}
	log := f.recordRoutes(ctx, "db")
	a0 := f.podWithIP("db-0", "db", "10.1.0.10")
	secondApart()
	f.podWithIP("db-1", "db", "10.1.0.11")
	f.lock("db", "db", func(s *lockv1.DistributedLockSpec) {
		s.Routing = &lockv1.Routing{Service: "db"}
		s.LockDelaySeconds = new(int32(10))
	})
	f.waitFor("db", 20*time.Second, "held by db-0", heldBy("db-0"))
	eventually(t, 10*time.Second, func() bool { return fmt.Sprint(slicePods(f.routedSlice("db"))) == "[db-0]" },
		func() string {
			return fmt.Sprintf("EndpointSlice lists %v, want [db-0]", slicePods(f.routedSlice("db")))
		})

	f.stop()
	f.setReady(a0, false)
	f.stop = f.startController("replica-b", 3*time.Second)
	f.waitFor("db", 30*time.Second, "Releasing", inPhase(lockv1.PhaseReleasing))
	eventually(t, 10*time.Second, func() bool { return fmt.Sprint(slicePods(f.routedSlice("db"))) == "[]" },
		func() string { return fmt.Sprintf("EndpointSlice lists %v, want []", slicePods(f.routedSlice("db"))) })
	eventually(t, 5*time.Second, func() bool { return log.lastSliceLists() }, func() string { return "the watch saw no empty slice" })
	cancel()
	switches := log.check(t)
	t.Logf("EndpointSlice switches: %v", switches)
}

// TestRoutingFailoverEmptiesBeforeNextHolder: replica-a routes db-0 and stops; db-0 releases its
// term while no controller runs; replica-b's first turn ends the term and grants db-1 in one
// status write. With empty route memory the slice still lists db-0 when Held by db-1 is
// written.
func TestRoutingFailoverEmptiesBeforeNextHolder(t *testing.T) {
	f := newFixture(t)
	f.releaseSetup()
	ctx, cancel := context.WithCancel(bg())
	t.Cleanup(cancel)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: f.ns}, Spec: corev1.ServiceSpec{
		Ports: []corev1.ServicePort{{Name: "pg", Port: 5432}},
	}}
	if err := k8s.Create(bg(), svc); err != nil {
		t.Fatalf("create Service: %v", err)
	}
	log := f.recordRoutes(ctx, "db")
	a0, c0 := f.workerPod("db-0", "db")
	f.updatePodStatus(a0, func(p *corev1.Pod) { p.Status.PodIP, p.Status.PodIPs = "10.1.0.10", []corev1.PodIP{{IP: "10.1.0.10"}} })
	secondApart()
	a1, _ := f.workerPod("db-1", "db")
	f.updatePodStatus(a1, func(p *corev1.Pod) { p.Status.PodIP, p.Status.PodIPs = "10.1.0.11", []corev1.PodIP{{IP: "10.1.0.11"}} })
	l := f.lock("db", "db", func(s *lockv1.DistributedLockSpec) {
		s.Routing = &lockv1.Routing{Service: "db"}
		s.LockDelaySeconds = new(int32(30))
	})
	held := f.waitFor("db", 20*time.Second, "held by db-0", heldBy("db-0"))
	eventually(t, 10*time.Second, func() bool { return fmt.Sprint(slicePods(f.routedSlice("db"))) == "[db-0]" },
		func() string {
			return fmt.Sprintf("EndpointSlice lists %v, want [db-0]", slicePods(f.routedSlice("db")))
		})

	f.stop()
	if err := setAnnotation(c0, l, lockv1.AnnotationHolderRelease, lockv1.HolderReleaseValue(a0.UID, held.Status.FencingToken)); err != nil {
		t.Fatalf("holder's own release refused: %v", err)
	}
	f.stop = f.startController("replica-b", 3*time.Second)
	f.waitFor("db", 30*time.Second, "held by db-1", heldBy("db-1"))
	eventually(t, 10*time.Second, func() bool { return fmt.Sprint(slicePods(f.routedSlice("db"))) == "[db-1]" },
		func() string {
			return fmt.Sprintf("EndpointSlice lists %v, want [db-1]", slicePods(f.routedSlice("db")))
		})
	eventually(t, 5*time.Second, func() bool { return log.lastSliceLists("db-1") }, func() string { return "the watch saw no slice listing db-1" })
	cancel()
	switches := log.check(t)
	t.Logf("EndpointSlice switches: %v", switches)
}
