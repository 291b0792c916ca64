package controllers

import (
	corev1 "k8s.io/api/core/v1"
)

// OutOfServiceTaint marks a node whose pods an operator attests are not running.
const OutOfServiceTaint = "node.kubernetes.io/out-of-service"

// Attestation: what proves that a holder's processes have stopped, so that the next holder
// may start at once, without the lock delay. Only states that a kubelet writes after every
// container of the pod has stopped for good count. What kubelet 1.37.2 and PodGC write was
// read in their source and recorded on a real node (../shared/reference/real-node/evidence/,
// NOTES.md "What a real kubelet and PodGC write"):
//
//   - Graceful deletion: the API server sets deletionTimestamp; while the kubelet stops the
//     containers their statuses still say running; then one update shows every container
//     terminated and the phase Succeeded or Failed; then the kubelet's final delete
//     (pkg/kubelet/status/status_manager.go, canBeDeleted, waits for that terminal update).
//     Attested: the terminal update.
//   - A crash with restartPolicy Always: the container is reported terminated while the
//     phase stays Running (pkg/kubelet/kubelet_pods.go, getPhase: "the container will be
//     restarted soon"), then running again with restartCount+1 under the same UID. Not
//     attested: no terminal phase, no deletion.
//   - Native sidecars (init containers with restartPolicy Always) report in
//     initContainerStatuses and are stopped after the main containers on deletion: a pod
//     whose main containers exited but whose sidecar runs is not attested.
//   - PodGC, for pods on a Node object that was deleted (pkg/controller/podgc, condition
//     DisruptionTarget with reason DeletionByPodGC), patches phase Failed and force-deletes
//     while the container statuses still say running: the machine may be partitioned, not
//     dead. Not attested.
//   - Static and mirror pods never get a terminal phase before deletion: the slow path.
//
// So a pod is attested when its phase is terminal and every container status (regular,
// init, ephemeral) is terminated or never started, and PodGC did not write that phase (it
// copies the last container states the kubelet reported, which may be a crash awaiting
// restart: pkg/controller/podgc, markFailedAndDeletePodWithCondition); or when its node
// carries the out-of-service taint (an operator's word). A deletion timestamp with every
// container terminated is not enough: that is also a crash awaiting restart of a pod being
// deleted, whose container the kubelet may have restarted before it reported so (the real
// kubelet's graceful deletion writes the terminal phase with the terminated containers in
// one update, evidence/watch-e2e-fail.txt rv=340). A pod seen only as DELETED without a
// terminal phase, and a mirror pod, take the slow path.

// attestedTerminated reports whether the pod's processes are known to have stopped. node is
// the pod's node, or nil when unknown.
func attestedTerminated(p *corev1.Pod, node *corev1.Node) bool {
	switch {
	case outOfService(node):
		return true
	case p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed:
		return !byPodGC(p) && allStopped(p)
	}
	return false
}

// byPodGC reports whether PodGC marked the pod Failed (condition DisruptionTarget, reason
// DeletionByPodGC): its node is gone from the API, not known to be down.
func byPodGC(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Reason == "DeletionByPodGC" {
			return true
		}
	}
	return false
}

// allStopped reports whether every container status of the pod says terminated or never
// started, and every regular container has a status.
func allStopped(p *corev1.Pod) bool {
	if len(p.Status.ContainerStatuses) < len(p.Spec.Containers) {
		return false
	}
	for _, list := range [][]corev1.ContainerStatus{p.Status.ContainerStatuses, p.Status.InitContainerStatuses, p.Status.EphemeralContainerStatuses} {
		for i := range list {
			cs := &list[i]
			switch {
			case cs.State.Terminated != nil:
			case neverStarted(cs):
			default:
				return false
			}
		}
	}
	return true
}

// neverStarted reports whether a container status shows a container that has not run at all:
// waiting, never restarted, no earlier termination.
func neverStarted(cs *corev1.ContainerStatus) bool {
	return cs.State.Running == nil && cs.State.Terminated == nil && cs.RestartCount == 0 && cs.LastTerminationState.Terminated == nil &&
		cs.LastTerminationState.Running == nil
}

// anyRunning reports whether some container of the pod is reported running: evidence that
// its processes run (again), which cancels a remembered attestation.
func anyRunning(p *corev1.Pod) bool {
	for _, list := range [][]corev1.ContainerStatus{p.Status.ContainerStatuses, p.Status.InitContainerStatuses, p.Status.EphemeralContainerStatuses} {
		for i := range list {
			if list[i].State.Running != nil {
				return true
			}
		}
	}
	return false
}

// outOfService reports whether the node carries the out-of-service taint.
func outOfService(node *corev1.Node) bool {
	if node == nil {
		return false
	}
	for _, t := range node.Spec.Taints {
		if t.Key == OutOfServiceTaint && (t.Effect == corev1.TaintEffectNoExecute || t.Effect == corev1.TaintEffectNoSchedule) {
			return true
		}
	}
	return false
}
