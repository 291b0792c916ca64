package podsim

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// conditions are the pod conditions a kubelet 1.37 writes, in its order (evidence/*.txt):
// PodReadyToStartContainers (false once the sandbox is gone), Initialized, Ready,
// ContainersReady, PodScheduled.
func conditions(ready, sandbox bool, now metav1.Time) []corev1.PodCondition {
	return []corev1.PodCondition{
		{Type: corev1.PodReadyToStartContainers, Status: status(sandbox), LastTransitionTime: now},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodReady, Status: status(ready), LastTransitionTime: now},
		{Type: corev1.ContainersReady, Status: status(ready), LastTransitionTime: now},
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
	}
}

func status(b bool) corev1.ConditionStatus {
	if b {
		return corev1.ConditionTrue
	}
	return corev1.ConditionFalse
}

// setCondition sets one condition's status, moving its transition time only on a change.
func setCondition(p *corev1.Pod, t corev1.PodConditionType, s corev1.ConditionStatus) {
	for i := range p.Status.Conditions {
		c := &p.Status.Conditions[i]
		if c.Type == t {
			if c.Status != s {
				c.Status, c.LastTransitionTime = s, metav1.Now()
			}
			return
		}
	}
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: t, Status: s, LastTransitionTime: metav1.Now()})
}

func running(name, image string, ready bool, restarts int32, now metav1.Time) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, Image: image, Ready: ready, Started: ptrBool(true), RestartCount: restarts,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}
}

// terminated is a container's terminated state as the kubelet reports it: reason Completed
// for exit code 0, Error otherwise (watch-e2e-fail.txt: exit=1,reason=Error).
func terminated(code int32, now metav1.Time) *corev1.ContainerStateTerminated {
	reason := "Completed"
	if code != 0 {
		reason = "Error"
	}
	return &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, FinishedAt: now}
}

// terminalPhase is the phase of a pod whose containers all stopped: Succeeded when they
// exited 0, Failed otherwise.
func terminalPhase(code int32) corev1.PodPhase {
	if code == 0 {
		return corev1.PodSucceeded
	}
	return corev1.PodFailed
}

func ptrBool(b bool) *bool { return &b }
