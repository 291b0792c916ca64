package controllers

// Tests from the adversarial review of "a restart never keeps a token" (0ad4f85): each is
// one pod shape or status sequence a real kubelet 1.37.2 / containerd writes, or one
// interaction, where a rule of DESIGN.md's term table does not hold. They fail on 0ad4f85;
// the control rows (marked) pass and show what must keep working after a fix.

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// capsApp gives the one regular container the capabilities add.
func capsApp(add ...corev1.Capability) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: add}}
	}
}

// TestReviewRestartProofCapabilities: restartProof reads capability names as the API stores
// them, but the runtime does not. containerd's CRI (WithCapabilities, in internal/cri/opts) grants "CAP_"+strings.ToUpper(c) for every added c and compares "ALL"
// case-insensitively (util.InStringSlice, strings.EqualFold); CRI-O does the same. The API
// server does not validate the names. So "sys_admin" and "all" are CAP_SYS_ADMIN in the
// container, and its process can setns out of the PID namespace whose death restartProof
// takes as proof. CAP_SYS_MODULE loads kernel code that starts processes outside any
// container namespace (call_usermodehelper). A Windows HostProcess container runs in the
// host's process space: there is no private PID namespace at all.
func TestReviewRestartProofCapabilities(t *testing.T) {
	hostProcess := func(p *corev1.Pod) {
		p.Spec.OS = &corev1.PodOS{Name: corev1.Windows}
		p.Spec.HostNetwork = true
		p.Spec.SecurityContext = &corev1.PodSecurityContext{WindowsOptions: &corev1.WindowsSecurityContextOptions{HostProcess: new(true)}}
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"control: SYS_ADMIN", testPod("p", capsApp("SYS_ADMIN")), false},
		{"control: NET_BIND_SERVICE", testPod("p", capsApp("NET_BIND_SERVICE")), true},
		{"sys_admin in lower case (containerd upper-cases it: CAP_SYS_ADMIN)", testPod("p", capsApp("sys_admin")), false},
		{"Sys_Admin", testPod("p", capsApp("Sys_Admin")), false},
		{"all in lower case (containerd: every capability)", testPod("p", capsApp("all")), false},
		{"SYS_MODULE (kernel code, processes outside the namespace)", testPod("p", capsApp("SYS_MODULE")), false},
		{"Windows HostProcess (the host's process space)", testPod("p", hostProcess), false},
	} {
		if got := restartProof(tc.pod); got != tc.want {
			t.Errorf("%s: restartProof = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// lastEnded gives the running container app the previous termination the kubelet reports in
// lastState: exit code, reason and containerID as convertToAPIContainerStatuses writes them.
func lastEnded(code int32, reason, id string) podOpt {
	return func(p *corev1.Pod) {
		cs := &p.Status.ContainerStatuses[0]
		cs.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: code, Reason: reason, ContainerID: id, FinishedAt: metav1.Now(),
		}}
	}
}

// TestReviewRestartProofUnseenExit: the proof is that the runtime reaped the old container's
// init, which in a private PID namespace happens only after every process in it is gone. But
// a new containerID with restartCount+1 is also what the kubelet writes when nobody saw the
// old container end:
//
//   - kubelet_pods.go convertToAPIContainerStatuses: a container the runtime reports in state
//     UNKNOWN, or no longer lists at all, while its last status said running, is written
//     terminated with reason ContainerStatusUnknown, exit 137, no containerID ("The container
//     could not be located ..."), restartCount+1; kuberuntime_manager.go then starts a new
//     one ("we don't know whether it is actually running or not"), and with
//     RestartAllContainersOnContainerExits (beta, on by default since 1.36) that termination
//     is carried into the new container's lastState;
//   - containerd's CRI recovery (restart.go, loadContainer) writes exit 255, reason "Unknown"
//     for a container whose task is gone while it was running (the dead shim of NOTES.md: the shim
//     died, the container's processes were reparented and may still run).
//
// In neither case was the old init reaped. lastState names the exit the kubelet saw, with the
// containerID that exited: a proof should require that lastState.terminated is the recorded
// container's (containerID equal to the grant's mark) and is not one of these unseen exits.
func TestReviewRestartProofUnseenExit(t *testing.T) {
	type want struct {
		verb   action
		reason string
		next   string
	}
	fast := want{verb: actEnd, reason: lockv1.ReasonHolderRestarted, next: "a-0"}
	slow := want{verb: actRelease, reason: lockv1.ReasonHolderRestarted}
	for _, tc := range []struct {
		row   string
		scene *scene
		want  want
	}{
		{"control: lastState is the recorded container's exit (137, Error): the fast path",
			newScene().restarted(lastEnded(137, "Error", "containerd://app-0")), fast},
		{"control: lastState OOMKilled of the recorded container: the fast path",
			newScene().restarted(lastEnded(137, "OOMKilled", "containerd://app-0")), fast},
		{"kubelet could not locate the container (ContainerStatusUnknown, no containerID): no proof",
			newScene().restarted(lastEnded(137, "ContainerStatusUnknown", "")), slow},
		{"containerd's unknown exit of the recorded container (255, Unknown: task gone, a dead shim): no proof",
			newScene().restarted(lastEnded(255, "Unknown", "containerd://app-0")), slow},
		{"no lastState: nobody reported the recorded container's end: no proof",
			newScene().holder(containers(restartedAs("app", "containerd://app-1", 1))), slow},
		{"crash's Releasing, then ContainerStatusUnknown: no proof, no new term at once",
			newScene().releasing(time.Second).restarted(lastEnded(137, "ContainerStatusUnknown", "")), want{verb: actWait}},
	} {
		t.Run(tc.row, func(t *testing.T) {
			d := decide(&tc.scene.in)
			next := ""
			if d.next != nil {
				next = d.next.Name
			}
			if d.verb != tc.want.verb || (tc.want.reason != "" && d.reason != tc.want.reason) || next != tc.want.next {
				t.Errorf("decide = {verb %d reason %q next %q}, want {verb %d reason %q next %q}", d.verb, d.reason, next, tc.want.verb, tc.want.reason, tc.want.next)
			}
		})
	}
}

// TestReviewUnmarkedRecordRestartKeepsToken: a term granted by the previous controller
// version has no Containers in its record; so has a term whose record an old-version replica
// rewrote during a rolling upgrade (its record struct drops the field on decode, and
// startReleasing/keep re-encode it without). Leader-election terms live for days, so such
// terms are the common case long after the upgrade. The crash's Releasing, then the restarted
// container eligible for max(L/3, 2 s): decide returns to Held with the same token, exactly
// the defect of issue 20 item 3 ("No path gives the pod back a token it was Releasing from").
func TestReviewUnmarkedRecordRestartKeepsToken(t *testing.T) {
	s := newScene().releasing(time.Second).restarted(lastEnded(137, "Error", "containerd://app-0")).do(func(in *input) {
		in.g.rec.Containers = nil
		in.clocks.eligibleAgain, in.clocks.mayReturn = time.Minute, true
	})
	if d := decide(&s.in); d.verb == actKeep {
		t.Errorf("record without containers, restarted (restartCount 1, lastState terminated): decide = actKeep (back to Held, token %d); want no return to Held", tok)
	}
}

// TestReviewFastPathGrantLostLosesTheLock: the fast path from the crash's Releasing is two
// etcd writes (delete the key, grant). When the grant fails after the delete (etcd timeout,
// failover between the two), the turn returns its error before the status write: status
// still says Releasing (a-0, token tok), the key is gone, and with it the containers the
// grant recorded. This review first asked for a new term for a-0 at once (DESIGN.md's
// key-vanished row). Review 20c showed why that cannot stand: without the record a turn cannot
// tell this proven restart from an unproven one (TestDecide "Releasing, key vanished, the
// holder restarted in its life, eligible"), and regranting after an unproven restart skips
// the lock delay. So the restarted pod now waits the delay like any restart that cannot be
// judged: a liveness cost of this double fault, never another pod before the delay.
func TestReviewFastPathGrantLostLosesTheLock(t *testing.T) {
	wait := time.Duration(lockDly) * time.Second
	s := newScene().releasing(time.Second).restarted().noKey().do(func(in *input) {
		in.clocks.eligibleAgain, in.clocks.mayReturn = time.Minute, true
	})
	if d := decide(&s.in); d.verb != actWait || d.next != nil || d.requeue != wait-time.Second {
		t.Errorf("status Releasing (crash), key deleted by the fast path, grant lost, a-0 restarted and eligible, 1 s of the delay: decide = {verb %d reason %q next %v requeue %v}, want a wait of the rest of the delay", d.verb, d.reason, d.next != nil, d.requeue)
	}
}

// TestReviewAdoptAfterFastPathNamesTheRestart: the fast path's grant committed but its
// status write was lost (or its reply was): the next turn adopts the unpublished grant of the
// same pod. adopt closes the old term as KeyVanished (publishGrant's fallback): the history
// no longer says the term ended because the holder restarted, and no HolderRestarted Event
// or transition metric is ever emitted (they were queued for the lost write).
func TestReviewAdoptAfterFastPathNamesTheRestart(t *testing.T) {
	s := newScene().restarted()
	s.in.g = grant{holderUID: "uid-a-0", token: tok + 5, rec: record{Name: "a-0", Phase: lockv1.PhaseHeld, Strategy: lockv1.StrategyOldestReady, LeaseSeconds: 10,
		Containers: []containerMark{{Name: "app", ID: "containerd://app-1", Restarts: 1}},
		// the fast path's grant records the term it ends (the fix: adopt reads it)
		Ends: &endedTerm{Token: tok, Reason: lockv1.ReasonHolderRestarted}}}
	tn, _ := reviewTurn(s)
	tn.st = *tn.lock.Status.DeepCopy()
	if d := decide(&tn.in); d.verb != actAdopt {
		t.Fatalf("decide = %d, want actAdopt", d.verb)
	}
	tn.adopt()
	if len(tn.st.History) < 2 || tn.st.History[1].Token != tok {
		t.Fatalf("history after adopt = %+v, want the new term, then token %d", tn.st.History, tok)
	}
	if got := tn.st.History[1].Reason; got != lockv1.ReasonHolderRestarted {
		t.Errorf("term %d after the adopted fast-path grant ended %q, want %q", tok, got, lockv1.ReasonHolderRestarted)
	}
}
