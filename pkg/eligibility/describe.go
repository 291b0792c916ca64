package eligibility

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// The words Explain uses for a pod that is not eligible. They describe what notEligible
// already decided; nothing here decides.

// describeNotRunning explains a pod whose phase is not Running.
func describeNotRunning(p *corev1.Pod) (Ineligibility, string, string) {
	switch p.Status.Phase {
	case corev1.PodPending:
		return describePending(p)
	case corev1.PodSucceeded:
		return PodFinished, "has Succeeded", shorten(p.Status.Message, 200)
	case corev1.PodFailed:
		if p.Status.Reason != "" {
			return PodFinished, fmt.Sprintf("has Failed (%s)", p.Status.Reason), shorten(p.Status.Message, 200)
		}
		return PodFinished, "has Failed", shorten(p.Status.Message, 200)
	case "":
		return PodNotRunning, "has no phase yet", ""
	}
	return PodNotRunning, fmt.Sprintf("has phase %s", p.Status.Phase), shorten(p.Status.Message, 200)
}

// describePending explains a Pending pod: not scheduled, initializing, or its containers
// not started yet.
func describePending(p *corev1.Pod) (Ineligibility, string, string) {
	sched := podCondition(p, corev1.PodScheduled)
	switch {
	case sched != nil && sched.Status != corev1.ConditionTrue && sched.Reason != "":
		return PodNotScheduled, fmt.Sprintf("is Pending (%s)", sched.Reason), shorten(sched.Message, 300)
	case sched != nil && sched.Status != corev1.ConditionTrue, sched == nil && p.Spec.NodeName == "":
		return PodNotScheduled, "is Pending (not scheduled)", ""
	}
	for _, s := range p.Status.InitContainerStatuses {
		if t := s.State.Terminated; t != nil && t.ExitCode == 0 {
			continue
		}
		if w := s.State.Waiting; w != nil && w.Reason != "" && w.Reason != "PodInitializing" {
			return PodPending, fmt.Sprintf("is Pending (init container %s: %s)", s.Name, w.Reason), shorten(w.Message, 300)
		}
		if s.State.Running != nil && !s.Ready {
			return PodPending, fmt.Sprintf("is Pending (init container %s running)", s.Name), ""
		}
	}
	for _, s := range p.Status.ContainerStatuses {
		if w := s.State.Waiting; w != nil && w.Reason != "" {
			return PodPending, fmt.Sprintf("is Pending (%s)", w.Reason), containerDetail(s.Name, w.Message)
		}
	}
	return PodPending, "is Pending", ""
}

// describeNotReady explains a Running pod whose Ready condition is not True.
func describeNotReady(p *corev1.Pod) (Ineligibility, string, string) {
	for _, s := range p.Status.ContainerStatuses {
		if restarting(s) {
			return PodRestarting, fmt.Sprintf("is not Ready (container %s is restarting)", s.Name), restartDetail(s)
		}
	}
	ready := podCondition(p, corev1.PodReady)
	switch {
	case ready == nil:
		return PodNotReady, "is not Ready (no Ready condition yet)", ""
	case ready.Reason != "":
		return PodNotReady, fmt.Sprintf("is not Ready (%s)", ready.Reason), shorten(ready.Message, 300)
	}
	return PodNotReady, fmt.Sprintf("is not Ready (Ready=%s)", ready.Status), shorten(ready.Message, 300)
}

// restarting: the container exited while its pod is Running (a crash the kubelet restarts,
// NOTES.md), or waits in a restart back-off.
func restarting(s corev1.ContainerStatus) bool {
	if s.State.Terminated != nil {
		return true
	}
	w := s.State.Waiting
	return w != nil && (w.Reason == "CrashLoopBackOff" || s.RestartCount > 0)
}

func restartDetail(s corev1.ContainerStatus) string {
	last := s.State.Terminated
	if last == nil {
		last = s.LastTerminationState.Terminated
	}
	d := fmt.Sprintf("restarts: %d", s.RestartCount)
	if w := s.State.Waiting; w != nil && w.Reason != "" {
		d = w.Reason + "; " + d
	}
	if last != nil {
		d += fmt.Sprintf("; last exit code %d", last.ExitCode)
		if last.Reason != "" {
			d += " (" + last.Reason + ")"
		}
	}
	return d
}

func containerDetail(name, msg string) string {
	if msg == "" {
		return ""
	}
	return fmt.Sprintf("container %s: %s", name, shorten(msg, 300))
}

func podCondition(p *corev1.Pod, typ corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == typ {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}
