package controllers_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// TestNoHolderExplained (issue 15 item 7): when no candidate is eligible, the Held=False
// NoHolder condition says why for the best candidate, as the API server shows it, and says
// so again when the pod's state changes.
func TestNoHolderExplained(t *testing.T) {
	f := newFixture(t)
	f.lock("lock", "a", nil)
	f.waitForHeldMessage("lock", "no eligible candidate: 0 pods match spec.candidates.selector")

	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "a-0", Namespace: f.ns, Labels: map[string]string{"app": "a"},
			// A finalizer keeps the pod terminating below, as a kubelet's grace period does.
			Finalizers: []string{"test.lockwarden.io/grace"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.invalid/app"}}},
	}
	if err := k8s.Create(bg(), p); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	t.Cleanup(func() {
		var cur corev1.Pod
		if err := k8s.Get(bg(), client.ObjectKeyFromObject(p), &cur); err == nil {
			cur.Finalizers = nil
			_ = k8s.Update(bg(), &cur)
		}
	})
	f.updatePodStatus(p, func(p *corev1.Pod) { // what kube-scheduler writes
		p.Status.Phase = corev1.PodPending
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: "Unschedulable", Message: "0/1 nodes are available: 1 Insufficient cpu.", LastTransitionTime: metav1.Now()}}
	})
	f.waitForHeldMessage("lock", "no eligible candidate: pod a-0 is Pending (Unschedulable)")

	f.updatePodStatus(p, func(p *corev1.Pod) { // what a kubelet writes before readiness passes
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()},
			{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady",
				Message: "containers with unready status: [app]", LastTransitionTime: metav1.Now()}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	})
	f.waitForHeldMessage("lock", "no eligible candidate: pod a-0 is not Ready (ContainersNotReady)")

	f.setReady(p, true)
	if err := k8s.Delete(bg(), p); err != nil {
		t.Fatalf("delete pod: %v", err)
	}
	// The pod may be granted in the moment it was Ready; then the term ends through
	// Releasing (lock delay 2 s) and the message names the terminating pod.
	f.waitForHeldMessage("lock", "no eligible candidate: pod a-0 is terminating")
}

// waitForHeldMessage waits for Held=False NoHolder with exactly msg, through the live client.
func (f *fixture) waitForHeldMessage(name, msg string) {
	f.t.Helper()
	f.waitFor(name, 20*time.Second, "Held=False NoHolder: "+msg, func(l *lockv1.DistributedLock) bool {
		c := meta.FindStatusCondition(l.Status.Conditions, lockv1.ConditionHeld)
		return l.Status.Phase == lockv1.PhasePending && c != nil && c.Status == metav1.ConditionFalse &&
			c.Reason == lockv1.ReasonNoHolder && c.Message == msg
	})
}
