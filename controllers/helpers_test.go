package controllers_test

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/internal/testenv/controllertest"
)

func cacheFor(ns string) cache.Options {
	return cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}}
}

func bg() context.Context { return context.Background() }

// pod creates a pod with label app=<app> and sets it Running and Ready, as a kubelet would.
func (f *fixture) pod(name, app string) *corev1.Pod {
	f.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns, Labels: map[string]string{"app": app}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.invalid/app"}}},
	}
	if err := k8s.Create(bg(), p); err != nil {
		f.t.Fatalf("create pod %s: %v", name, err)
	}
	f.setReady(p, true)
	return p
}

// setReady sets the pod Running with Ready true or false.
func (f *fixture) setReady(p *corev1.Pod, ready bool) {
	f.t.Helper()
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	f.updatePodStatus(p, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.Now()}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", Ready: ready, ContainerID: containerID(p, 0), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	})
}

// setReadyKeepContainers sets the pod's Ready condition (and its containers' ready flags)
// and leaves the container states as they are: a readiness probe's verdict.
func (f *fixture) setReadyKeepContainers(p *corev1.Pod, ready bool) {
	f.t.Helper()
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	f.updatePodStatus(p, func(p *corev1.Pod) {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.Now()}}
		for i := range p.Status.ContainerStatuses {
			p.Status.ContainerStatuses[i].Ready = ready
		}
	})
}

// containerID is the containerID the kubelet would report for the pod's container app after
// restarts restarts: one per container incarnation (containerd://<id>).
func containerID(p *corev1.Pod, restarts int32) string {
	return fmt.Sprintf("containerd://%s-%d", p.UID, restarts)
}

// terminate writes the kubelet's terminal update: every container terminated and the phase
// Succeeded, in one update, as recorded on a real node for a graceful deletion
// (../shared/reference/real-node/evidence/watch-e2e-web.txt, rv=306). Containers terminated
// with the phase still Running would be a crash awaiting restart, not a stopped pod.
func (f *fixture) terminate(p *corev1.Pod) {
	f.t.Helper()
	f.updatePodStatus(p, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodSucceeded
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.Now()}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}}}
	})
}

func (f *fixture) updatePodStatus(p *corev1.Pod, mutate func(*corev1.Pod)) {
	f.t.Helper()
	for range 10 {
		var cur corev1.Pod
		if err := k8s.Get(bg(), client.ObjectKeyFromObject(p), &cur); err != nil {
			f.t.Fatalf("get pod %s: %v", p.Name, err)
		}
		mutate(&cur)
		err := k8s.Status().Update(bg(), &cur)
		if err == nil {
			*p = cur
			return
		}
		if !apierrors.IsConflict(err) {
			f.t.Fatalf("update pod %s status: %v", p.Name, err)
		}
	}
	f.t.Fatalf("update pod %s status: conflicts", p.Name)
}

// deletePod deletes the pod object at once (no kubelet runs here to finish a graceful one).
func (f *fixture) deletePod(p *corev1.Pod) {
	f.t.Helper()
	if err := k8s.Delete(bg(), p, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
		f.t.Fatalf("delete pod %s: %v", p.Name, err)
	}
}

// lock creates a lock selecting app=<app>.
func (f *fixture) lock(name, app string, mutate func(*lockv1.DistributedLockSpec)) *lockv1.DistributedLock {
	f.t.Helper()
	return controllertest.CreateLock(f.t, k8s, f.ns, name, app, mutate)
}

// get reads the lock through the live client.
func (f *fixture) get(name string) *lockv1.DistributedLock {
	f.t.Helper()
	var l lockv1.DistributedLock
	if err := k8s.Get(bg(), client.ObjectKey{Namespace: f.ns, Name: name}, &l); err != nil {
		f.t.Fatalf("get lock %s: %v", name, err)
	}
	return &l
}

// editLock applies mutate to the lock's spec (retrying conflicts).
func (f *fixture) editLock(name string, mutate func(*lockv1.DistributedLock)) {
	f.t.Helper()
	for range 10 {
		l := f.get(name)
		mutate(l)
		err := k8s.Update(bg(), l)
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) {
			f.t.Fatalf("update lock %s: %v", name, err)
		}
	}
	f.t.Fatalf("update lock %s: conflicts", name)
}

// waitFor polls the lock until cond holds, failing with the last status after timeout.
func (f *fixture) waitFor(name string, timeout time.Duration, what string, cond func(*lockv1.DistributedLock) bool) *lockv1.DistributedLock {
	f.t.Helper()
	var last *lockv1.DistributedLock
	eventually(f.t, timeout, func() bool {
		last = f.get(name)
		return cond(last)
	}, func() string { return fmt.Sprintf("lock %s: %s; status: %s", name, what, describe(last)) })
	return last
}

func describe(l *lockv1.DistributedLock) string {
	if l == nil {
		return "<none>"
	}
	s := l.Status
	conds := ""
	for _, c := range s.Conditions {
		conds += fmt.Sprintf(" %s=%s(%s: %s)", c.Type, c.Status, c.Reason, c.Message)
	}
	return fmt.Sprintf("phase=%s holder=%s uid=%s token=%d max=%d epoch=%d%s", s.Phase, s.Holder, s.HolderUID, s.FencingToken, s.MaxFencingToken, s.ControllerEpoch, conds)
}

func heldBy(pod string) func(*lockv1.DistributedLock) bool {
	return func(l *lockv1.DistributedLock) bool {
		return l.Status.Phase == lockv1.PhaseHeld && l.Status.Holder == pod
	}
}

func inPhase(p lockv1.Phase) func(*lockv1.DistributedLock) bool {
	return func(l *lockv1.DistributedLock) bool { return l.Status.Phase == p }
}

// keyToken is the etcd key's CreateRevision for the lock (0 when absent).
func (f *fixture) keyToken(name string) int64 {
	f.t.Helper()
	h, err := f.engine.Inspect(bg(), f.ns+"/"+name)
	if err != nil {
		f.t.Fatalf("inspect %s: %v", name, err)
	}
	return h.Token
}

func objectKey(ns, name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }
