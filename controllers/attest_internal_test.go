package controllers

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/lockwarden/lockwarden/internal/podtest"
)

// Pod states for the tests, as a real kubelet 1.37.2 and PodGC write them
// (../shared/reference/real-node/evidence/, NOTES.md).

func running(name string) corev1.ContainerStatus { return podtest.Running(name) }

func terminated(name string, code int32) corev1.ContainerStatus {
	return podtest.Terminated(name, code)
}

func waiting(name string, restarts int32) corev1.ContainerStatus {
	return podtest.Waiting(name, restarts)
}

// restartedAs is container name running again after a crash: containerID id (as the kubelet
// reports it, "" for none), restartCount restarts.
func restartedAs(name, id string, restarts int32) corev1.ContainerStatus {
	cs := running(name)
	cs.ContainerID, cs.RestartCount = id, restarts
	return cs
}

type podOpt = podtest.Opt

func testPod(name string, opts ...podOpt) *corev1.Pod { return podtest.Pod(name, opts...) }

func phase(ph corev1.PodPhase) podOpt                { return podtest.Phase(ph) }
func notReady() podOpt                               { return podtest.NotReady() }
func containers(cs ...corev1.ContainerStatus) podOpt { return podtest.Containers(cs...) }
func sidecar(cs corev1.ContainerStatus) podOpt {
	return func(p *corev1.Pod) {
		always := corev1.ContainerRestartPolicyAlways
		p.Spec.InitContainers = []corev1.Container{{Name: cs.Name, RestartPolicy: &always}}
		p.Status.InitContainerStatuses = []corev1.ContainerStatus{cs}
	}
}
func ephemeral(cs corev1.ContainerStatus) podOpt {
	return func(p *corev1.Pod) { p.Status.EphemeralContainerStatuses = []corev1.ContainerStatus{cs} }
}
func debugContainer(cs corev1.ContainerStatus) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: cs.Name}}}
		p.Status.EphemeralContainerStatuses = []corev1.ContainerStatus{cs}
	}
}
func twoContainers() podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "other"})
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, running("other"))
	}
}
func sharedPIDs() podOpt { return func(p *corev1.Pod) { p.Spec.ShareProcessNamespace = new(true) } }
func hostPID() podOpt    { return func(p *corev1.Pod) { p.Spec.HostPID = true } }
func privilegedApp() podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: new(true)}
	}
}
func deleting() podOpt { return podtest.Deleting() }
func podGCCondition() podOpt {
	return func(p *corev1.Pod) {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "DeletionByPodGC"})
	}
}
func created(sec int64) podOpt    { return podtest.Created(sec) }
func labelled(k, v string) podOpt { return podtest.Labelled(k, v) }

func taintedNode(key string) *corev1.Node {
	return &corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: key, Effect: corev1.TaintEffectNoExecute}}}}
}

// TestAttestedTerminated: only states a kubelet writes after every container stopped for good
// are attestation; the states of a live (or restarting) process are not.
func TestAttestedTerminated(t *testing.T) {
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		node *corev1.Node
		want bool
	}{
		{"running and ready", testPod("p"), nil, false},
		{"graceful delete, containers still running (kubelet stopping them)", testPod("p", deleting(), notReady()), nil, false},
		{"graceful delete, terminal update: Succeeded, all terminated", testPod("p", deleting(), phase(corev1.PodSucceeded), containers(terminated("app", 0))), nil, true},
		{"graceful delete, terminal update: Failed, exit 1", testPod("p", deleting(), phase(corev1.PodFailed), containers(terminated("app", 1))), nil, true},
		{"crash awaiting restart: terminated, phase Running", testPod("p", notReady(), containers(terminated("app", 2))), nil, false},
		{"crash loop back-off: waiting after restarts, phase Running", testPod("p", notReady(), containers(waiting("app", 3))), nil, false},
		{"main exited, native sidecar running, deleting", testPod("p", deleting(), notReady(), containers(terminated("app", 0)), sidecar(running("side"))), nil, false},
		{"main exited, sidecar running, phase Succeeded (impossible but not proof)", testPod("p", phase(corev1.PodSucceeded), containers(terminated("app", 0)), sidecar(running("side"))), nil, false},
		{"everything terminated incl. sidecar, Succeeded", testPod("p", deleting(), phase(corev1.PodSucceeded), containers(terminated("app", 0)), sidecar(terminated("side", 0))), nil, true},
		{"ephemeral container running, pod Failed", testPod("p", phase(corev1.PodFailed), containers(terminated("app", 1)), ephemeral(running("debug"))), nil, false},
		{"PodGC: Failed with containers running", testPod("p", phase(corev1.PodFailed), notReady()), nil, false},
		{"PodGC: Failed over a crash awaiting restart (containers terminated)", testPod("p", phase(corev1.PodFailed), notReady(), containers(terminated("app", 2)), podGCCondition()), nil, false},
		{"crash awaiting restart, then deleted: no terminal phase", testPod("p", deleting(), notReady(), containers(terminated("app", 2))), nil, false},
		{"Failed before any container started (image pull)", testPod("p", phase(corev1.PodFailed), containers(corev1.ContainerStatus{Name: "app", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull"}}})), nil, true},
		{"terminal phase without container statuses", testPod("p", phase(corev1.PodFailed), containers()), nil, false},
		{"deleting, one container never started: not every one terminated", testPod("p", deleting(), containers(corev1.ContainerStatus{Name: "app", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{}}})), nil, false},
		{"node out of service", testPod("p"), taintedNode(OutOfServiceTaint), true},
		{"node with another taint", testPod("p"), taintedNode("node.kubernetes.io/unreachable"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := attestedTerminated(tc.pod, tc.node); got != tc.want {
				t.Errorf("attestedTerminated = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestAttestationMemory: a remembered attestation counts for that holder in that term only,
// is dropped when a container is seen running, expires, and a lock's memory goes with it.
func TestAttestationMemory(t *testing.T) {
	m := newMemory()
	now := metav1.Now().Time
	m.now = func() time.Time { return now }
	const key, lock = "ns/l", types.UID("lock-1")
	pod := types.UID("pod-a")
	m.attest(key, lock, pod, 7)
	for _, tc := range []struct {
		name  string
		pod   types.UID
		token int64
		want  bool
	}{
		{"same pod, same term", pod, 7, true},
		{"same pod, another term", pod, 8, false},
		{"another pod", "pod-b", 7, false},
		{"no holder", "", 7, false},
	} {
		if got := m.wasAttested(key, lock, tc.pod, tc.token); got != tc.want {
			t.Errorf("%s: wasAttested = %v, want %v", tc.name, got, tc.want)
		}
	}
	if m.wasAttested(key, "lock-2", pod, 7) {
		t.Errorf("a new lock object under the same name inherited the attestation")
	}
	m.attest(key, lock, pod, 7)
	m.unattest(key, lock, pod)
	if m.wasAttested(key, lock, pod, 7) {
		t.Errorf("attestation kept after a container was seen running")
	}
	m.attest(key, lock, pod, 7)
	now = now.Add(attestationTTL)
	if m.wasAttested(key, lock, pod, 7) {
		t.Errorf("attestation older than %v still counts", attestationTTL)
	}
	m.forget(key)
	if n := m.size(); n != 0 {
		t.Errorf("memory holds %d locks after forget, want 0", n)
	}
}
