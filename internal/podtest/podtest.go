// Package podtest builds pods in the states a real kubelet 1.37.2 and PodGC write
// (../shared/reference/real-node/evidence/, NOTES.md), for the table tests of the eligibility
// rule and of the controller's decisions. It writes nothing anywhere: each builder returns a
// value.
package podtest

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Opt changes a pod built by Pod.
type Opt func(*corev1.Pod)

// Pod is a candidate pod name (UID "uid-<name>", label app=a, one container "app") Running
// and Ready, as changed by opts in order.
func Pod(name string, opts ...Opt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{"app": "a"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}},
		Status: corev1.PodStatus{
			Phase:             corev1.PodRunning,
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{Running("app")},
		},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// Running is container name running and ready.
func Running(name string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
}

// Terminated is container name exited with code.
func Terminated(name string, code int32) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}}
}

// Waiting is container name in CrashLoopBackOff after restarts restarts.
func Waiting(name string, restarts int32) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, RestartCount: restarts, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}
}

// Phase sets the pod's phase.
func Phase(ph corev1.PodPhase) Opt { return func(p *corev1.Pod) { p.Status.Phase = ph } }

// NotReady replaces the pod's conditions with Ready=False.
func NotReady() Opt {
	return func(p *corev1.Pod) {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
	}
}

// Conditions replaces the pod's conditions with cs (none when cs is empty).
func Conditions(cs ...corev1.PodCondition) Opt {
	return func(p *corev1.Pod) { p.Status.Conditions = cs }
}

// Containers replaces the pod's container statuses with cs.
func Containers(cs ...corev1.ContainerStatus) Opt {
	return func(p *corev1.Pod) { p.Status.ContainerStatuses = cs }
}

// Deleting gives the pod a deletion timestamp (now).
func Deleting() Opt {
	return func(p *corev1.Pod) { now := metav1.Now(); p.DeletionTimestamp = &now }
}

// Created sets the pod's creation time to sec seconds after the Unix epoch.
func Created(sec int64) Opt {
	return func(p *corev1.Pod) { p.CreationTimestamp = metav1.Unix(sec, 0) }
}

// Labelled replaces the pod's labels with k=v.
func Labelled(k, v string) Opt { return func(p *corev1.Pod) { p.Labels = map[string]string{k: v} } }

// Unscheduled makes the pod Pending with PodScheduled=False Unschedulable, as the scheduler
// writes it when no node has room.
func Unscheduled() Opt {
	return func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodPending
		p.Status.ContainerStatuses = nil
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: "Unschedulable", Message: "0/1 nodes are available: 1 Insufficient cpu."}}
	}
}
