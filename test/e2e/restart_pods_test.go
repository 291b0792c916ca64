//go:build e2e

package e2e

import (
	"syscall"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The pods of the restart evidence: one per case (a fresh pod restarts at once, with no
// crash back-off), the shapes restartProof (controllers/restart.go) accepts and refuses.

const (
	evidenceNS    = "restart-evidence"
	crasheeImage  = "localhost/crashee:dev"
	mainContainer = "main"
)

// podShape is a pod layout around the container that restarts.
type podShape string

const (
	shapeDefault  podShape = "one container"         // what restartProof accepts
	shapeSharePID podShape = "shareProcessNamespace" // the pod's containers share one PID namespace
	shapeHostPID  podShape = "hostPID"               // the host's PID namespace
	shapeSidecar  podShape = "native sidecar"        // an init container with restartPolicy Always beside it
	shapeTwo      podShape = "two containers"        // a second regular container beside it
)

// killKind is how the main process dies.
type killKind string

const (
	killCrash    killKind = "in-container crash" // SIGUSR1: crashee panics
	killSIGKILL  killKind = "host SIGKILL"       // kill -9 from the host
	killOOM      killKind = "OOM kill"           // SIGUSR2: crashee allocates past its limit
	killLiveness killKind = "liveness kill"      // SIGHUP: its probe fails, the kubelet kills it
)

// trigger is what the test sends the main process from the host.
func (k killKind) trigger() syscall.Signal {
	switch k {
	case killCrash:
		return syscall.SIGUSR1
	case killOOM:
		return syscall.SIGUSR2
	case killLiveness:
		return syscall.SIGHUP
	}
	return syscall.SIGKILL
}

// signalName is the trigger's name, for the recording.
func (k killKind) signalName() string {
	return map[syscall.Signal]string{syscall.SIGUSR1: "SIGUSR1", syscall.SIGUSR2: "SIGUSR2", syscall.SIGHUP: "SIGHUP", syscall.SIGKILL: "SIGKILL"}[k.trigger()]
}

// evidenceCases are the recordings: every kill kind on the proof's shape, the host SIGKILL on
// each shape the proof refuses.
func evidenceCases() []*evCase {
	return []*evCase{
		{pod: "one-crash", shape: shapeDefault, kind: killCrash},
		{pod: "one-sigkill", shape: shapeDefault, kind: killSIGKILL},
		{pod: "one-oom", shape: shapeDefault, kind: killOOM},
		{pod: "one-liveness", shape: shapeDefault, kind: killLiveness},
		{pod: "sharepid-sigkill", shape: shapeSharePID, kind: killSIGKILL},
		{pod: "hostpid-sigkill", shape: shapeHostPID, kind: killSIGKILL},
		{pod: "sidecar-sigkill", shape: shapeSidecar, kind: killSIGKILL},
		{pod: "two-sigkill", shape: shapeTwo, kind: killSIGKILL},
	}
}

// otherContainer is the name of the shape's container beside main, or "".
func (s podShape) otherContainer() string {
	switch s {
	case shapeSidecar:
		return "sidecar"
	case shapeTwo:
		return "other"
	}
	return ""
}

// evidencePod is the case's pod: crashee's main process in container main (96 MiB memory
// limit; for the liveness kill an HTTP liveness probe every second, one failure kills), in
// the case's shape.
func evidencePod(c *evCase) *corev1.Pod {
	grace := int64(2)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: c.pod, Namespace: evidenceNS, Labels: map[string]string{"app": "crashee"}},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyAlways,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: mainContainer, Image: crasheeImage, ImagePullPolicy: corev1.PullNever, Args: []string{"main"},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("96Mi")}},
			}},
		},
	}
	if c.kind == killLiveness {
		// only here: a probe of the other pods would fail against their dead process too,
		// and its Killing event would cloud what ended them
		p.Spec.Containers[0].LivenessProbe = &corev1.Probe{
			ProbeHandler:        corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}},
			InitialDelaySeconds: 3, PeriodSeconds: 1, TimeoutSeconds: 1, FailureThreshold: 1,
		}
	}
	sleeper := corev1.Container{Name: c.shape.otherContainer(), Image: crasheeImage, ImagePullPolicy: corev1.PullNever, Args: []string{"sleep"}}
	switch c.shape {
	case shapeSharePID:
		share := true
		p.Spec.ShareProcessNamespace = &share
	case shapeHostPID:
		p.Spec.HostPID = true
	case shapeSidecar:
		always := corev1.ContainerRestartPolicyAlways
		sleeper.RestartPolicy = &always
		p.Spec.InitContainers = []corev1.Container{sleeper}
	case shapeTwo:
		p.Spec.Containers = append(p.Spec.Containers, sleeper)
	}
	return p
}

// containerStatus is the status of the regular or init container name, or nil.
func containerStatus(p *corev1.Pod, name string) *corev1.ContainerStatus {
	for _, list := range [][]corev1.ContainerStatus{p.Status.ContainerStatuses, p.Status.InitContainerStatuses} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}

// terminatedAs is the terminated state the pod shows for the container id (current or last), or nil.
func terminatedAs(cs *corev1.ContainerStatus, id string) *corev1.ContainerStateTerminated {
	switch {
	case cs == nil:
		return nil
	case cs.State.Terminated != nil && cs.State.Terminated.ContainerID == id:
		return cs.State.Terminated
	case cs.LastTerminationState.Terminated != nil && cs.LastTerminationState.Terminated.ContainerID == id:
		return cs.LastTerminationState.Terminated
	}
	return nil
}
