package main

import (
	"crypto/rand"
	"encoding/hex"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The pod statuses the stand-in kubelet writes, one pure function per state, each as a real
// kubelet 1.37.2 was recorded writing it (../shared/reference/real-node/evidence/*.txt,
// summarised in NOTES.md, "What a real kubelet and PodGC write"):
//
//   - running: phase Running, every container running, Ready and ContainersReady from the
//     readiness probe (watch-e2e-web.txt rv 292..294);
//   - graceful deletion: the API server sets deletionTimestamp; while the containers stop
//     the status still shows them running, only readiness may turn False (rv 305); then ONE
//     update shows every container terminated AND phase Succeeded (all exit 0) or Failed
//     (watch-e2e-fail.txt rv 340: exit 1, reason Error); then the kubelet's final delete
//     with grace 0 (rv 342) and DELETED. terminalStatus is that one update;
//   - a crash under restartPolicy Always: the container terminated (exit 137, reason Error,
//     Ready False) under its old containerID while the phase stays Running
//     (kubelet_pods.go: "the container will be restarted soon"), then running again under the
//     same UID with a new containerID, restartCount+1 and lastState terminated with the old
//     containerID (recorded on the real node with containerd 1.6.20 by TestRestartEvidence,
//     test/e2e/restart_*_test.go, into bin/e2e/restart-evidence.txt; the run of 2026-12-02
//     16:22 UTC, pod one-sigkill, host SIGKILL: rv 356 running bf86e8f16c07, rv 411
//     terminated(exit=137,reason=Error) bf86e8f16c07 restarts 0 ready false, rv 416 running
//     3cdd1e5da22e restarts 1 last=bf86e8f16c07:exit=137,Error; docs/e2e.md, "Restarts on the
//     real node"). A native sidecar's restart takes the same form in initContainerStatuses
//     (the same recording, pod sidecar-sigkill, shows the statuses of a pod with one; NOTES.md);
//   - containerIDs: "containerd://" and 64 hex digits (the recording's IDs in full), one per
//     container incarnation (a new one at each restart), in the status and in each terminated
//     state (kubelet_pods.go convertToAPIContainerStatuses: State.Terminated.ContainerID);
//   - a native sidecar (an init container with restartPolicy Always) reports in
//     initContainerStatuses and is stopped after the main containers on deletion (NOTES.md;
//     no recording): mainStoppedStatus is the state between the two;
//   - PodGC, for a pod whose Node object was deleted: phase Failed with condition
//     DisruptionTarget (reason DeletionByPodGC), container statuses untouched (still
//     running), then a force delete (pkg/controller/podgc; NOTES.md).
const (
	workerContainer = "worker" // the container the chaosworker process plays
	appContainer    = "app"    // a sidecar pod's main container: no process behind it
	image           = "chaosworker:dev"
)

// podShape is how a run's pods are built.
type podShape struct {
	// sidecar: the worker is a native sidecar (init container, restartPolicy Always) next to
	// a main container app.
	sidecar bool
	// policy is the pod's restartPolicy.
	policy corev1.RestartPolicy
}

// restarts reports whether the kubelet restarts the worker's container when it exits: a
// native sidecar always is, a regular container under restartPolicy Always.
func (s podShape) restarts() bool { return s.sidecar || s.policy == corev1.RestartPolicyAlways }

func (s podShape) spec(node string) corev1.PodSpec {
	spec := corev1.PodSpec{NodeName: node, RestartPolicy: s.policy, TerminationGracePeriodSeconds: ptr.To(int64(30))}
	if s.sidecar {
		spec.InitContainers = []corev1.Container{{Name: workerContainer, Image: image, RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}}
		spec.Containers = []corev1.Container{{Name: appContainer, Image: image}}
		return spec
	}
	spec.Containers = []corev1.Container{{Name: workerContainer, Image: image}}
	return spec
}

// workerState is what the kubelet knows of the worker's container.
type workerState struct {
	ready    bool
	restarts int32
	started  metav1.Time
	last     *corev1.ContainerStateTerminated // the previous run, after a restart
	id       string                           // the worker container's containerID (this incarnation)
	app      string                           // a sidecar pod's main container's containerID
	ip       string                           // the pod's IP
}

// newContainerID draws the containerID of a new container incarnation, in containerd's
// form: "containerd://" and 64 hex digits.
func newContainerID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return "containerd://" + hex.EncodeToString(b)
}

func conditions(ready bool, now metav1.Time, started bool) []corev1.PodCondition {
	st := func(b bool) corev1.ConditionStatus {
		if b {
			return corev1.ConditionTrue
		}
		return corev1.ConditionFalse
	}
	return []corev1.PodCondition{
		{Type: corev1.PodReadyToStartContainers, Status: st(started), LastTransitionTime: now},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodReady, Status: st(ready), LastTransitionTime: now},
		{Type: corev1.ContainersReady, Status: st(ready), LastTransitionTime: now},
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
	}
}

// keepTransitions keeps a condition's lastTransitionTime when its status did not change, as
// the kubelet does (readySince orders FirstReady candidates by it).
func keepTransitions(old, cur []corev1.PodCondition) []corev1.PodCondition {
	for i := range cur {
		for _, o := range old {
			if o.Type == cur[i].Type && o.Status == cur[i].Status {
				cur[i].LastTransitionTime = o.LastTransitionTime
			}
		}
	}
	return cur
}

// terminated is the terminated state of the container incarnation id.
func terminated(code int32, now metav1.Time, id string) *corev1.ContainerStateTerminated {
	reason := "Completed"
	if code != 0 {
		reason = "Error"
	}
	return &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, FinishedAt: now, ContainerID: id}
}

// setWorker puts the worker's status where the shape reports it, and the app's (if any).
func setWorker(st *corev1.PodStatus, shape podShape, worker corev1.ContainerStatus, app corev1.ContainerState, appReady bool, w workerState) {
	if shape.sidecar {
		st.InitContainerStatuses = []corev1.ContainerStatus{worker}
		st.ContainerStatuses = []corev1.ContainerStatus{{Name: appContainer, Image: image, ContainerID: w.app, Ready: appReady, Started: ptr.To(app.Running != nil), State: app}}
		return
	}
	st.InitContainerStatuses = nil
	st.ContainerStatuses = []corev1.ContainerStatus{worker}
}

// runningStatus: every container running, Ready from the worker's probe.
func runningStatus(old corev1.PodStatus, shape podShape, w workerState, now metav1.Time) corev1.PodStatus {
	st := old
	st.Phase = corev1.PodRunning
	if st.PodIP == "" && w.ip != "" { // the sandbox's IP, from the first running status on
		st.PodIP, st.PodIPs = w.ip, []corev1.PodIP{{IP: w.ip}}
	}
	st.Conditions = keepTransitions(old.Conditions, conditions(w.ready, now, true))
	worker := corev1.ContainerStatus{Name: workerContainer, Image: image, ContainerID: w.id, Ready: w.ready, Started: ptr.To(true), RestartCount: w.restarts,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: w.started}}}
	if w.last != nil {
		worker.LastTerminationState = corev1.ContainerState{Terminated: w.last}
	}
	setWorker(&st, shape, worker, corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: w.started}}, true, w)
	return st
}

// crashedStatus: the worker's container terminated with code, awaiting its restart, under its
// own (old) containerID and restartCount; the phase stays Running.
func crashedStatus(old corev1.PodStatus, shape podShape, w workerState, code int32, now metav1.Time) corev1.PodStatus {
	st := old
	st.Phase = corev1.PodRunning
	st.Conditions = keepTransitions(old.Conditions, conditions(false, now, true))
	worker := corev1.ContainerStatus{Name: workerContainer, Image: image, ContainerID: w.id, Started: ptr.To(false), RestartCount: w.restarts,
		State: corev1.ContainerState{Terminated: terminated(code, now, w.id)}}
	if w.last != nil {
		worker.LastTerminationState = corev1.ContainerState{Terminated: w.last}
	}
	setWorker(&st, shape, worker, corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: w.started}}, true, w)
	return st
}

// mainStoppedStatus: during the deletion of a sidecar pod, the main container terminated
// (exit 0) while the sidecar worker still runs.
func mainStoppedStatus(old corev1.PodStatus, shape podShape, w workerState, now metav1.Time) corev1.PodStatus {
	st := old
	st.Phase = corev1.PodRunning
	st.Conditions = keepTransitions(old.Conditions, conditions(false, now, true))
	worker := corev1.ContainerStatus{Name: workerContainer, Image: image, ContainerID: w.id, Ready: w.ready, Started: ptr.To(true), RestartCount: w.restarts,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: w.started}}}
	setWorker(&st, shape, worker, corev1.ContainerState{Terminated: terminated(0, now, w.app)}, false, w)
	return st
}

// terminalStatus: the ONE update with every container terminated and the terminal phase.
func terminalStatus(old corev1.PodStatus, shape podShape, w workerState, code int32, now metav1.Time) corev1.PodStatus {
	st := old
	st.Phase = corev1.PodSucceeded
	if code != 0 {
		st.Phase = corev1.PodFailed
	}
	st.Conditions = keepTransitions(old.Conditions, conditions(false, now, false))
	worker := corev1.ContainerStatus{Name: workerContainer, Image: image, ContainerID: w.id, Started: ptr.To(false), RestartCount: w.restarts,
		State: corev1.ContainerState{Terminated: terminated(code, now, w.id)}}
	if w.last != nil {
		worker.LastTerminationState = corev1.ContainerState{Terminated: w.last}
	}
	setWorker(&st, shape, worker, corev1.ContainerState{Terminated: terminated(0, now, w.app)}, false, w)
	return st
}

// podGCStatus: PodGC's patch for a pod on a deleted Node; the container statuses stay as
// they were (running).
func podGCStatus(old corev1.PodStatus, now metav1.Time) corev1.PodStatus {
	st := old
	st.Phase = corev1.PodFailed
	st.Conditions = append(append([]corev1.PodCondition(nil), old.Conditions...), corev1.PodCondition{
		Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "DeletionByPodGC",
		Message: "PodGC: node no longer exists", LastTransitionTime: now,
	})
	return st
}
