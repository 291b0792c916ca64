package controllers

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestRestartProof: every pod shape the proof depends on.
func TestRestartProof(t *testing.T) {
	sysAdmin := func() podOpt {
		return func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}}}
		}
	}
	netAdmin := func() podOpt {
		return func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}}}
		}
	}
	initDone := func() podOpt {
		return func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "setup"}}
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{terminated("setup", 0)}
		}
	}
	notShared := func() podOpt { return func(p *corev1.Pod) { p.Spec.ShareProcessNamespace = new(false) } }
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"one regular container", testPod("p"), true},
		{"one container, a finished init container", testPod("p", initDone()), true},
		{"one container, shareProcessNamespace false", testPod("p", notShared()), true},
		{"one container, NET_ADMIN", testPod("p", netAdmin()), true},
		{"one container, an ephemeral container that terminated", testPod("p", debugContainer(terminated("debug", 0))), true},
		{"two regular containers", testPod("p", twoContainers()), false},
		{"a native sidecar", testPod("p", sidecar(running("side"))), false},
		{"a native sidecar that is not running", testPod("p", sidecar(terminated("side", 1))), false},
		{"an ephemeral container running", testPod("p", debugContainer(running("debug"))), false},
		{"an ephemeral container not reported yet", testPod("p", func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug"}}}
		}), false},
		{"shareProcessNamespace", testPod("p", sharedPIDs()), false},
		{"hostPID", testPod("p", hostPID()), false},
		{"privileged", testPod("p", privilegedApp()), false},
		{"CAP_SYS_ADMIN", testPod("p", sysAdmin()), false},
	} {
		if got := restartProof(tc.pod); got != tc.want {
			t.Errorf("%s: restartProof = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestRestartedSince: a restart is another containerID or a higher restartCount of a
// container the grant recorded; the crash awaiting restart (the same container, terminated)
// is not one yet.
func TestRestartedSince(t *testing.T) {
	marks := []containerMark{{Name: "app", ID: "containerd://a", Restarts: 2}}
	for _, tc := range []struct {
		name  string
		pod   *corev1.Pod
		marks []containerMark
		want  bool
	}{
		{"same container running", testPod("p", containers(restartedAs("app", "containerd://a", 2))), marks, false},
		{"same container terminated (crash awaiting restart)", testPod("p", containers(func() corev1.ContainerStatus {
			cs := terminated("app", 137)
			cs.ContainerID, cs.RestartCount = "containerd://a", 2
			return cs
		}())), marks, false},
		{"another containerID", testPod("p", containers(restartedAs("app", "containerd://b", 2))), marks, true},
		{"a higher restartCount", testPod("p", containers(restartedAs("app", "containerd://a", 3))), marks, true},
		{"a higher restartCount, no containerID reported", testPod("p", containers(restartedAs("app", "", 3))), marks, true},
		{"no containerID reported, same count", testPod("p", containers(restartedAs("app", "", 2))), marks, false},
		{"no marks recorded", testPod("p", containers(restartedAs("app", "containerd://b", 3))), nil, false},
		{"a sidecar restarted", testPod("p", sidecar(restartedAs("side", "containerd://s2", 1))),
			[]containerMark{{Name: "app"}, {Name: "side", ID: "containerd://s1"}}, true},
	} {
		if got := restartedSince(tc.pod, tc.marks); got != tc.want {
			t.Errorf("%s: restartedSince = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestContainerMarks: the grant records regular containers and native sidecars, not plain
// init containers.
func TestContainerMarks(t *testing.T) {
	p := testPod("p", containers(restartedAs("app", "containerd://a", 1)), sidecar(restartedAs("side", "containerd://s", 0)), func(p *corev1.Pod) {
		p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: "setup"})
		p.Status.InitContainerStatuses = append(p.Status.InitContainerStatuses, terminated("setup", 0))
	})
	got := containerMarks(p)
	want := []containerMark{{Name: "app", ID: "containerd://a", Restarts: 1}, {Name: "side", ID: "containerd://s"}}
	if len(got) != len(want) {
		t.Fatalf("containerMarks = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("containerMarks[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
}
