package controllers

import (
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// A restart never keeps a token. The kubelet restarts a crashed container under the same pod
// UID (restartPolicy Always or OnFailure): the pod stays Running, the container comes back
// with another containerID and restartCount+1 (NOTES.md, "Crash with restartPolicy Always").
// The new process may read Held and lead the old token before this controller notices; a
// write the dead process sent before it died may still arrive after the new one's. So the
// grant records the containers it was granted under (containerMarks), and a restart of any
// of them (another containerID, or a higher restartCount) ends the term:
//
//   - with proof that the old process is gone (restartProof and exitSeen), the same pod gets a new term,
//     with a new token, at once: only the same pod, whose new process may already lead the
//     old token, and whose old process is gone;
//   - without it, Releasing and the full lock delay, then a new term; never back to Held.
//
// Another pod gets the lock only after Releasing and the full delay either way: the restarted
// process may have read Held, and only the lock delay bounds how long it leads by it.

// Readiness right after a restart says nothing yet: the kubelet's first probe of the new
// container runs when the container starts, usually before the process listens, and the next
// one a period later (prober_manager.go, UpdatePodStatus's manual trigger); and the new
// process may have refused the old token (another writer raised it: Elector.Abandon), which
// fails its readiness until it sees a new one. So two states of a Running, not deleting
// holder are not ended for NotReady (restartExcuses):
//
//   - its container restarted with proof, the new container running: the fast path gives it
//     the new token it needs, without waiting for Ready;
//   - the term that fast path granted, for the term's lease after this replica saw the grant
//     acknowledged (clocks.restartGrant), its container still the one granted and running:
//     time for the new process to read its term and pass a probe. A holder that cannot see
//     its lock cannot lead it either (its own validity); the excuse only delays, by at most
//     the lease, ending the term of a pod that never becomes Ready.

// containerMark is one container of the holder pod as the grant saw it.
type containerMark struct {
	// Name is the container's name (regular or native sidecar).
	Name string `json:"name"`
	// ID is its containerID ("containerd://..."), "" when the kubelet reported none.
	ID string `json:"id,omitempty"`
	// Restarts is its restartCount.
	Restarts int32 `json:"restarts"`
}

// containerMarks records the pod's regular and native sidecar containers as their statuses
// show them now, for the grant record.
func containerMarks(p *corev1.Pod) []containerMark {
	var out []containerMark
	for _, list := range [][]corev1.ContainerStatus{p.Status.ContainerStatuses, sidecarStatuses(p)} {
		for i := range list {
			cs := &list[i]
			out = append(out, containerMark{Name: cs.Name, ID: cs.ContainerID, Restarts: cs.RestartCount})
		}
	}
	return out
}

// restartedSince reports whether a container the grant recorded has restarted since: its
// status shows a higher restartCount or another containerID. A grant recorded without marks
// (by a controller before this rule) shows no restart.
func restartedSince(p *corev1.Pod, marks []containerMark) bool {
	for _, m := range marks {
		cs := statusOf(p, m.Name)
		switch {
		case cs == nil:
		case cs.RestartCount > m.Restarts:
			return true
		case m.ID != "" && cs.ContainerID != "" && cs.ContainerID != m.ID:
			return true
		}
	}
	return false
}

// mayHaveRestarted reports whether the holder's container may have restarted since the
// grant of the published term. The holder's own release then does not end the term at once,
// with or without proof of the restart: the release names the pod and the token, never the
// process that sent it. It may be the dead process's, sent on its clean stop and delayed (a
// proxy, a slow admission) past the restart, while the new process read Held without it and
// leads the token; proof says the old process is gone, not that the new one stopped (review
// 20c, TestReview20cReleaseAfterProvenRestart). The restart rule decides instead: the fast
// path for the same pod, or Releasing and the full lock delay.
//
// The grant's record of this term (its containerMarks) says whether a container restarted.
// Without one (the key vanished, a later grant replaced it, or a controller before the
// restart rule wrote it), any restart in the pod's life counts: a restartCount above 0 or a
// previous termination (review 20c). A holder pod the API server could not be asked about,
// or one that is gone, may have restarted too: a gone pod's end is judged by its deletion
// (a kubelet's terminal update remembered from the pod's events ends the term at once; a
// force deletion, which may leave the processes running, waits out the lock delay as
// HolderGone), never by its release (review 20d).
func mayHaveRestarted(in *input) bool {
	p, g := in.holder.pod, in.g
	switch {
	case p == nil:
		return true
	case g.present() && g.token == in.status.FencingToken && len(g.rec.Containers) > 0:
		return restartedSince(p, g.rec.Containers)
	}
	return everRestarted(p)
}

// everRestarted reports whether any regular or native sidecar container of p has restarted
// in the pod's life: a restartCount above 0 or a previous termination.
func everRestarted(p *corev1.Pod) bool {
	for _, list := range [][]corev1.ContainerStatus{p.Status.ContainerStatuses, sidecarStatuses(p)} {
		for i := range list {
			if list[i].RestartCount > 0 || list[i].LastTerminationState.Terminated != nil {
				return true
			}
		}
	}
	return false
}

// restartProof reports whether a restart of this pod's container proves that the process
// that held the term is gone, as far as the pod's shape goes: exactly one regular container,
// so the term's process lived in it; no native sidecar and no ephemeral container still
// running, which could hold the term or share its processes; its own PID namespace (no
// shareProcessNamespace, no hostPID, a Linux pod: a Windows HostProcess container runs in the
// host's process space), so the kernel killed every process in it before the runtime
// reported the exit; no privileged container and no capability beyond the runtime's default
// set and a few harmless ones (allowedCapabilities), none of which lets a process leave the
// namespace. exitSeen adds what the kubelet must have reported. A runtime that reports an exit
// it did not reap defeats the proof (docs/e2e.md); the writer ID at the fence still tells the
// two processes apart.
func restartProof(p *corev1.Pod) bool {
	spec := &p.Spec
	switch {
	case len(spec.Containers) != 1:
		return false
	case spec.HostPID:
		return false
	case spec.ShareProcessNamespace != nil && *spec.ShareProcessNamespace:
		return false
	case spec.OS != nil && spec.OS.Name != corev1.Linux:
		return false
	case spec.SecurityContext != nil && spec.SecurityContext.WindowsOptions != nil:
		return false
	}
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		if isSidecar(c) || privileged(c.SecurityContext) {
			return false
		}
	}
	for i := range spec.Containers {
		if privileged(spec.Containers[i].SecurityContext) {
			return false
		}
	}
	for i := range spec.EphemeralContainers {
		c := &spec.EphemeralContainers[i]
		if privileged(c.SecurityContext) {
			return false
		}
		if cs := ephemeralStatus(p, c.Name); cs == nil || cs.State.Terminated == nil {
			return false // running, or not reported yet
		}
	}
	return true
}

// exitSeen reports whether the kubelet reported the end of the recorded container itself: the
// restarted container's previous termination (lastState, as convertToAPIContainerStatuses
// writes it) names the containerID the grant recorded, and is an exit the runtime saw. Not
// seen: no lastState (a second restart since the grant hides the first), another or no
// containerID, the kubelet's ContainerStatusUnknown (the container could no longer be
// located: it may still run) and containerd's Unknown exit 255 (its task was gone, a dead
// shim: the processes may have been reparented and still run).
func exitSeen(p *corev1.Pod, marks []containerMark) bool {
	if len(p.Spec.Containers) != 1 {
		return false
	}
	name := p.Spec.Containers[0].Name
	for _, m := range marks {
		if m.Name != name {
			continue
		}
		cs := statusOf(p, name)
		if cs == nil || m.ID == "" {
			return false
		}
		last := cs.LastTerminationState.Terminated
		switch {
		case last == nil || last.ContainerID != m.ID:
			return false
		case last.Reason == "ContainerStatusUnknown":
			return false
		case last.Reason == "Unknown" && last.ExitCode == 255:
			return false
		}
		return true
	}
	return false
}

// isSidecar reports whether an init container is a native sidecar (restartPolicy Always).
func isSidecar(c *corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

// allowedCapabilities are the capabilities a container may add and keep the proof: the
// runtime's default set (containerd's and CRI-O's) and a few that do not let a process leave
// its PID namespace or run code outside it. Anything else (SYS_ADMIN, SYS_MODULE, SYS_PTRACE,
// ALL, ...) and the proof is refused.
var allowedCapabilities = map[string]bool{
	"AUDIT_WRITE": true, "CHOWN": true, "DAC_OVERRIDE": true, "FOWNER": true, "FSETID": true,
	"KILL": true, "MKNOD": true, "NET_BIND_SERVICE": true, "NET_RAW": true, "SETFCAP": true,
	"SETGID": true, "SETPCAP": true, "SETUID": true, "SYS_CHROOT": true,
	"NET_ADMIN": true, "IPC_LOCK": true, "SYS_NICE": true, "SYS_RESOURCE": true,
}

// privileged reports whether a container may leave its namespaces or act outside them:
// privileged, or adding a capability outside allowedCapabilities. Names are compared as the
// runtime does: case-insensitively, with or without the CAP_ prefix (the API server does not
// validate them; containerd grants "CAP_"+upper(name)).
func privileged(sc *corev1.SecurityContext) bool {
	switch {
	case sc == nil:
		return false
	case sc.Privileged != nil && *sc.Privileged:
		return true
	case sc.WindowsOptions != nil && sc.WindowsOptions.HostProcess != nil && *sc.WindowsOptions.HostProcess:
		return true
	case sc.Capabilities == nil:
		return false
	}
	for _, c := range sc.Capabilities.Add {
		if !allowedCapabilities[strings.TrimPrefix(strings.ToUpper(string(c)), "CAP_")] {
			return true
		}
	}
	return false
}

// sidecarStatuses are the statuses of the pod's native sidecars.
func sidecarStatuses(p *corev1.Pod) []corev1.ContainerStatus {
	var out []corev1.ContainerStatus
	for i := range p.Spec.InitContainers {
		if !isSidecar(&p.Spec.InitContainers[i]) {
			continue
		}
		for _, cs := range p.Status.InitContainerStatuses {
			if cs.Name == p.Spec.InitContainers[i].Name {
				out = append(out, cs)
			}
		}
	}
	return out
}

// statusOf is the status of the regular or init container name, or nil.
func statusOf(p *corev1.Pod, name string) *corev1.ContainerStatus {
	for _, list := range [][]corev1.ContainerStatus{p.Status.ContainerStatuses, p.Status.InitContainerStatuses} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}

func ephemeralStatus(p *corev1.Pod, name string) *corev1.ContainerStatus {
	for i := range p.Status.EphemeralContainerStatuses {
		if p.Status.EphemeralContainerStatuses[i].Name == name {
			return &p.Status.EphemeralContainerStatuses[i]
		}
	}
	return nil
}

// restartExcuses reports whether the holder's NotReady is excused because it just restarted
// (see above), and sets e.recheck to when the excuse of a starting term runs out.
func restartExcuses(in *input, e *ending) bool {
	p, g := in.holder.pod, in.g
	if p == nil || p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil || !g.present() || g.token != in.status.FencingToken {
		return false
	}
	running := func(name string) bool {
		cs := statusOf(p, name)
		return cs != nil && cs.State.Running != nil
	}
	if restartedSince(p, g.rec.Containers) {
		return restartProof(p) && exitSeen(p, g.rec.Containers) && len(p.Spec.Containers) == 1 && running(p.Spec.Containers[0].Name)
	}
	lease := time.Duration(g.rec.LeaseSeconds) * time.Second
	starting := fastPathGrant(g) && len(p.Spec.Containers) == 1 &&
		running(p.Spec.Containers[0].Name) && in.clocks.restartGrant > 0 && in.clocks.restartGrant < lease
	if starting {
		e.recheck = minPositive(e.recheck, lease-in.clocks.restartGrant)
	}
	return starting
}
