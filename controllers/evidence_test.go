package controllers_test

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// The pod states in these tests are the ones a real kubelet 1.37.2 and PodGC were recorded
// writing (../shared/reference/real-node/evidence/, NOTES.md "What a real kubelet and PodGC
// write"): states in which the holder's process may still run, or run again, and that are
// therefore no proof that its term ended.

// boundPod creates a pod bound to a node (so that a graceful deletion waits for a kubelet, as
// on a real node), optionally with a native sidecar, and reports it Running and Ready.
func (f *fixture) boundPod(name, app string, sidecar bool) *corev1.Pod {
	f.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns, Labels: map[string]string{"app": app}},
		Spec: corev1.PodSpec{
			NodeName:   "node-" + name,
			Containers: []corev1.Container{{Name: "app", Image: "example.invalid/app"}},
		},
	}
	if sidecar {
		always := corev1.ContainerRestartPolicyAlways
		p.Spec.InitContainers = []corev1.Container{{Name: "side", Image: "example.invalid/side", RestartPolicy: &always}}
	}
	if err := k8s.Create(bg(), p); err != nil {
		f.t.Fatalf("create pod %s: %v", name, err)
	}
	f.updatePodStatus(p, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
		cs := runningStatus("app", 0)
		cs.ContainerID = containerID(p, 0)
		p.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
		if sidecar {
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{runningStatus("side", 0)}
		}
	})
	return p
}

func runningStatus(name string, restarts int32) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, Ready: true, RestartCount: restarts,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}
}

func terminatedStatus(name string, restarts, code int32) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, RestartCount: restarts,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: "Error", FinishedAt: metav1.Now()}}}
}

// crash reports the pod's container crashed and awaiting restart (restartPolicy Always): the
// container terminated, the pod NotReady, the phase still Running (kubelet_pods.go: "the
// container will be restarted soon").
func (f *fixture) crash(p *corev1.Pod, restarts int32) {
	f.t.Helper()
	f.updatePodStatus(p, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.Now()}}
		cs := terminatedStatus("app", restarts, 2)
		cs.ContainerID = containerID(p, restarts)
		cs.State.Terminated.ContainerID = cs.ContainerID
		p.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
	})
}

// restarted reports the container running again under the same pod UID, restartCount+1: a
// new containerID, and the previous container's exit in lastState with its containerID, as
// the kubelet writes it (docs/e2e.md, "Restarts on the real node").
func (f *fixture) restarted(p *corev1.Pod, restarts int32) {
	f.t.Helper()
	f.restartedReady(p, restarts, true)
}

// restartedReady is restarted with the readiness probe's verdict so far: false before the
// first successful probe of the new container.
func (f *fixture) restartedReady(p *corev1.Pod, restarts int32, ready bool) {
	f.t.Helper()
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	f.updatePodStatus(p, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.Now()}}
		cs := runningStatus("app", restarts)
		cs.Ready = ready
		cs.ContainerID = containerID(p, restarts)
		cs.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 2, Reason: "Error", ContainerID: containerID(p, restarts-1), FinishedAt: metav1.Now()}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
	})
}

// neverTo fails if the lock is published to pod within window.
func (f *fixture) neverTo(name, pod string, window time.Duration) {
	f.t.Helper()
	var last *lockv1.DistributedLock
	consistently(f.t, window, func() bool {
		last = f.get(name)
		return last.Status.Holder != pod
	}, func() string { return fmt.Sprintf("lock %s published to %s: %s", name, pod, describe(last)) })
}

// TestCrashRestartIsANewTerm: the holder's container crashes and the kubelet restarts it.
// The crash is no attestation (Releasing, nobody else granted), and a restart never keeps a
// token: once the restarted container is Ready, the pod (one container, its own PID
// namespace: proof that the old process is gone) gets a new term, with a new token, at once,
// not after the lock delay. Before restart.go it got the old token back.
func TestCrashRestartIsANewTerm(t *testing.T) {
	f := newFixture(t)
	a0 := f.pod("a-0", "a")
	secondApart()
	f.pod("a-1", "a")
	f.lock("lock", "a", func(s *lockv1.DistributedLockSpec) { s.LockDelaySeconds = ptrTo[int32](600) })
	held := f.waitFor("lock", 20*time.Second, "held by a-0", heldBy("a-0"))
	f.crash(a0, 0)
	f.waitFor("lock", 20*time.Second, "Releasing a-0's term", func(l *lockv1.DistributedLock) bool {
		return l.Status.Phase == lockv1.PhaseReleasing && l.Status.Holder == "a-0"
	})
	f.neverTo("lock", "a-1", 3*time.Second)
	f.restarted(a0, 1)
	back := f.waitFor("lock", 20*time.Second, "Held by a-0 with a new token", func(l *lockv1.DistributedLock) bool {
		return heldBy("a-0")(l) && l.Status.FencingToken > held.Status.FencingToken
	})
	ended := back.Status.History[1]
	if ended.Token != held.Status.FencingToken || ended.Reason != lockv1.ReasonHolderRestarted {
		t.Errorf("the crashed term ended as %+v, want token %d ended %s", ended, held.Status.FencingToken, lockv1.ReasonHolderRestarted)
	}
}

// TestCrashRestartNotReadyYet: the kubelet reports the restarted container running before
// its first successful readiness probe (which runs at the start, usually before the process
// listens, then a period later). The fast path does not wait for Ready: the same pod gets its
// new term at once, and the term is not ended for NotReady while it becomes Ready within the
// term's lease. Before restartExcuses the term went Releasing and then to a-1 after the delay
// whenever the restarted process had refused the old token (its readiness failing until it
// saw a new one).
func TestCrashRestartNotReadyYet(t *testing.T) {
	f := newFixture(t)
	a0 := f.pod("a-0", "a")
	secondApart()
	f.pod("a-1", "a")
	f.lock("lock", "a", func(s *lockv1.DistributedLockSpec) {
		s.LeaseDurationSeconds, s.LockDelaySeconds = 6, ptrTo[int32](600)
	})
	held := f.waitFor("lock", 20*time.Second, "held by a-0", heldBy("a-0"))
	f.crash(a0, 0)
	f.restartedReady(a0, 1, false)
	next := f.waitFor("lock", 20*time.Second, "Held by a-0 with a new token while it is not Ready yet", func(l *lockv1.DistributedLock) bool {
		return heldBy("a-0")(l) && l.Status.FencingToken > held.Status.FencingToken
	})
	var last *lockv1.DistributedLock
	consistently(t, 3*time.Second, func() bool {
		last = f.get("lock")
		return heldBy("a-0")(last) && last.Status.FencingToken == next.Status.FencingToken
	}, func() string {
		return "the new term of the restarted pod did not hold while it was not Ready yet: " + describe(last)
	})
	f.setReadyKeepContainers(a0, true)
	consistently(t, 7*time.Second, func() bool {
		last = f.get("lock")
		return heldBy("a-0")(last) && last.Status.FencingToken == next.Status.FencingToken
	}, func() string { return "the new term ended after the pod became Ready: " + describe(last) })
}

// TestCrashRestartWithSidecarWaitsTheDelay: the same crash in a pod with a native sidecar is
// no proof that the term's process is gone (it may have run in the sidecar): the term stays
// Releasing for the whole lock delay, never back to Held with the old token, and then the
// next pod is granted.
func TestCrashRestartWithSidecarWaitsTheDelay(t *testing.T) {
	const delay = 8
	f := newFixture(t)
	a0 := f.boundPod("a-0", "a", true)
	secondApart()
	f.pod("a-1", "a")
	f.lock("lock", "a", func(s *lockv1.DistributedLockSpec) { s.LockDelaySeconds = ptrTo[int32](delay) })
	held := f.waitFor("lock", 20*time.Second, "held by a-0", heldBy("a-0"))
	f.crash(a0, 0)
	releasing := f.waitFor("lock", 20*time.Second, "Releasing a-0's term", func(l *lockv1.DistributedLock) bool {
		return l.Status.Phase == lockv1.PhaseReleasing && l.Status.Holder == "a-0"
	})
	seen := time.Now()
	f.restarted(a0, 1)
	var last *lockv1.DistributedLock
	consistently(t, delay*time.Second-time.Since(seen)-time.Second, func() bool {
		last = f.get("lock")
		return last.Status.Phase == lockv1.PhaseReleasing && last.Status.FencingToken == held.Status.FencingToken
	}, func() string {
		return fmt.Sprintf("the crashed term (token %d, Releasing at rv %s) did not stay Releasing for the delay: %s", held.Status.FencingToken, releasing.ResourceVersion, describe(last))
	})
	f.waitFor("lock", 20*time.Second, "held by a-1 after the delay", heldBy("a-1"))
}

// TestCrashOnceIsNotRememberedAsAttestation: a pod whose container crashed and restarted
// before it held the lock keeps its term: a crash seen once is not a standing proof that the
// pod stopped (the old memory ended such a term at every grant, a new token each turn).
func TestCrashOnceIsNotRememberedAsAttestation(t *testing.T) {
	f := newFixture(t)
	// The controller's pod watch must see the crash: wait until it runs.
	f.pod("b-0", "b")
	f.lock("warm", "b", nil)
	f.waitFor("warm", 20*time.Second, "held by b-0", heldBy("b-0"))
	a0 := f.pod("a-0", "a")
	f.crash(a0, 0)
	f.restarted(a0, 1)
	f.lock("lock", "a", nil)
	held := f.waitFor("lock", 20*time.Second, "held by a-0", heldBy("a-0"))
	var last *lockv1.DistributedLock
	consistently(t, 4*time.Second, func() bool {
		last = f.get("lock")
		return last.Status.Phase == lockv1.PhaseHeld && last.Status.FencingToken == held.Status.FencingToken
	}, func() string {
		return fmt.Sprintf("term of a-0 (token %d) did not hold: %s", held.Status.FencingToken, describe(last))
	})
	if last.Status.Transitions != 1 {
		t.Errorf("transitions = %d, want 1", last.Status.Transitions)
	}
}

// TestRunningSidecarIsNotAttestation: during a graceful deletion the kubelet stops native
// sidecars after the main containers: main container terminated, sidecar running is no
// proof. The term ends through Releasing and the lock delay.
func TestRunningSidecarIsNotAttestation(t *testing.T) {
	f := newFixture(t)
	a0 := f.boundPod("a-0", "a", true)
	secondApart()
	f.pod("a-1", "a")
	f.lock("lock", "a", func(s *lockv1.DistributedLockSpec) { s.LockDelaySeconds = ptrTo[int32](600) })
	f.waitFor("lock", 20*time.Second, "held by a-0", heldBy("a-0"))
	if err := k8s.Delete(bg(), a0); err != nil { // graceful: the pod is bound, so it stays until a kubelet finishes
		t.Fatalf("delete pod a-0: %v", err)
	}
	f.updatePodStatus(a0, func(p *corev1.Pod) {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.Now()}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{terminatedStatus("app", 0, 0)}
		p.Status.InitContainerStatuses = []corev1.ContainerStatus{runningStatus("side", 0)}
	})
	f.waitFor("lock", 20*time.Second, "Releasing a-0's term", func(l *lockv1.DistributedLock) bool {
		return l.Status.Phase == lockv1.PhaseReleasing && l.Status.Holder == "a-0"
	})
	f.neverTo("lock", "a-1", 3*time.Second)
	// The kubelet's last update: the sidecar stopped too, phase Succeeded. Now it is proof.
	f.updatePodStatus(a0, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodSucceeded
		p.Status.InitContainerStatuses = []corev1.ContainerStatus{terminatedStatus("side", 0, 0)}
	})
	f.waitFor("lock", 20*time.Second, "held by a-1 without the lock delay", heldBy("a-1"))
}

// TestPodGCFailedIsNotAttestation: PodGC, for a pod on a deleted Node, writes phase Failed
// with the DisruptionTarget condition while the container statuses still say running (the
// machine may be partitioned, not dead): not proof; Releasing and the lock delay.
func TestPodGCFailedIsNotAttestation(t *testing.T) {
	f := newFixture(t)
	a0 := f.boundPod("a-0", "a", false)
	secondApart()
	f.pod("a-1", "a")
	f.lock("lock", "a", func(s *lockv1.DistributedLockSpec) { s.LockDelaySeconds = ptrTo[int32](600) })
	f.waitFor("lock", 20*time.Second, "held by a-0", heldBy("a-0"))
	f.updatePodStatus(a0, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodFailed
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget,
			Status: corev1.ConditionTrue, Reason: "DeletionByPodGC", Message: "PodGC: node no longer exists", LastTransitionTime: metav1.Now()})
	})
	f.waitFor("lock", 20*time.Second, "Releasing a-0's term", func(l *lockv1.DistributedLock) bool {
		return l.Status.Phase == lockv1.PhaseReleasing && l.Status.Holder == "a-0"
	})
	// PodGC's force delete follows; the object is gone, and still nothing attested.
	if err := k8s.Delete(bg(), a0, client.GracePeriodSeconds(0)); err != nil {
		t.Fatalf("force delete a-0: %v", err)
	}
	f.neverTo("lock", "a-1", 3*time.Second)
}

// TestSkipCleanupWithRegressedEpoch: etcd was replaced for good (status.controllerEpoch is
// above any epoch the new etcd gives): the skip-etcd-cleanup annotation still lets a deleted
// lock go, which is the case the annotation exists for.
func TestSkipCleanupWithRegressedEpoch(t *testing.T) {
	f := newFixture(t)
	f.stop()
	f.lock("lock", "a", nil)
	l := f.get("lock")
	l.Status = lockv1.DistributedLockStatus{Phase: lockv1.PhasePending, MaxFencingToken: 1_000_000_000_000, ControllerEpoch: 1_000_000_000_000}
	if err := k8s.Status().Update(bg(), l); err != nil {
		t.Fatalf("seed status: %v", err)
	}
	f.editLock("lock", func(l *lockv1.DistributedLock) {
		l.Finalizers = append(l.Finalizers, "lockwarden.io/release")
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		l.Annotations["lockwarden.io/skip-etcd-cleanup"] = "true"
	})
	f.stop = f.startController("replica-b", 3*time.Second)
	if err := k8s.Delete(bg(), f.get("lock")); err != nil {
		t.Fatalf("delete lock: %v", err)
	}
	eventually(t, 20*time.Second, func() bool {
		var l lockv1.DistributedLock
		return k8s.Get(bg(), objectKey(f.ns, "lock"), &l) != nil
	}, func() string { return "lock with skip-etcd-cleanup still present: " + describe(f.get("lock")) })
}

// TestDeposedReplicasLateStatusWriteIsRefused: replica E1 returned a Releasing term to Held
// in etcd and sent the status write that publishes it; the write is still in flight when E1
// is deposed. The new epoch E2 finds status Releasing and etcd Held: it records its epoch in
// status and Releasing in etcd again before any other etcd write, and counts the delay anew,
// so that E1's write, landing late, fails its precondition instead of publishing a Held term
// that E2 is about to end (issue 10, item 3: the new holder was published 4 ms after such a
// write showed the old one Held).
func TestDeposedReplicasLateStatusWriteIsRefused(t *testing.T) {
	f := newFixture(t)
	a0 := f.pod("a-0", "a")
	secondApart()
	f.pod("a-1", "a")
	const delay = 4
	f.lock("lock", "a", func(s *lockv1.DistributedLockSpec) { s.LockDelaySeconds = ptrTo[int32](delay) })
	f.waitFor("lock", 20*time.Second, "held by a-0", heldBy("a-0"))
	f.setReady(a0, false)
	releasing := f.waitFor("lock", 20*time.Second, "Releasing", inPhase(lockv1.PhaseReleasing))
	f.stop() // E1 is gone

	// What E1 did just before: etcd back to Held, and a status write publishing it, in flight.
	key := f.engine.Path(f.ns + "/lock")
	token := releasing.Status.FencingToken
	rec := fmt.Sprintf(`{"holder":%q,"record":{"name":"a-0","phase":"Held","strategy":"OldestReady","leaseSeconds":2,"epoch":%d}}`,
		releasing.Status.HolderUID, releasing.Status.ControllerEpoch)
	resp, err := f.cli.Txn(bg()).If(clientv3.Compare(clientv3.CreateRevision(key), "=", token)).
		Then(clientv3.OpPut(key, rec, clientv3.WithIgnoreLease())).Commit()
	if err != nil || !resp.Succeeded {
		t.Fatalf("return the term to Held in etcd: %v (applied %v)", err, resp != nil && resp.Succeeded)
	}
	late := releasing.DeepCopy()
	late.Status.Phase = lockv1.PhaseHeld
	late.Status.History[0].Reason = lockv1.ReasonGranted

	f.stop = f.startController("replica-b", 3*time.Second)
	epoch := f.waitElected("replica-b", 20*time.Second)
	eventually(t, 20*time.Second, func() bool {
		h, err := f.engine.Inspect(bg(), f.ns+"/lock")
		return err == nil && h.Token == token && strings.Contains(string(h.Record), `"phase":"Releasing"`) &&
			strings.Contains(string(h.Record), fmt.Sprintf(`"epoch":%d`, epoch))
	}, func() string {
		h, _ := f.engine.Inspect(bg(), f.ns+"/lock")
		return fmt.Sprintf("epoch %d did not record Releasing again for token %d; etcd: token %d record %s; status: %s",
			epoch, token, h.Token, h.Record, describe(f.get("lock")))
	})
	restarted := time.Now()
	if err := k8s.Status().Update(bg(), late); !apierrors.IsConflict(err) && !apierrors.IsInvalid(err) {
		t.Fatalf("E1's late status write = %v, want a conflict (or the epoch rule refusing it); status now: %s", err, describe(f.get("lock")))
	}
	next := f.waitFor("lock", 30*time.Second, "held by a-1", heldBy("a-1"))
	if waited := time.Since(restarted); waited < delay*time.Second-500*time.Millisecond {
		t.Errorf("a-1 granted %v after the wait restarted, want at least the %d s lock delay", waited, delay)
	}
	if next.Status.FencingToken <= token {
		t.Errorf("token = %d, want above %d", next.Status.FencingToken, token)
	}
}

// TestWatchesDoNotGrowWithHeldLocks: a held lock costs no etcd watch of its own; the
// controller watches the lock prefix once (issue 10, item 5: each held lock kept a
// *lease.Lock with a goroutine and a watch).
func TestWatchesDoNotGrowWithHeldLocks(t *testing.T) {
	f := newFixture(t)
	f.pod("a-0", "a")
	f.lock("lock-0", "a", nil)
	f.waitFor("lock-0", 20*time.Second, "held", heldBy("a-0"))
	before := f.etcdWatchers()
	const n = 20
	for i := 1; i <= n; i++ {
		f.lock(fmt.Sprintf("lock-%d", i), "a", nil)
	}
	for i := 1; i <= n; i++ {
		f.waitFor(fmt.Sprintf("lock-%d", i), 20*time.Second, "held", heldBy("a-0"))
	}
	var after int
	// Watches that would be started per lock start within a second of the grant.
	consistently(t, 2*time.Second, func() bool {
		after = f.etcdWatchers()
		return after-before < n/2
	}, func() string {
		return fmt.Sprintf("etcd watchers %d with 1 held lock, %d with %d: a watch per lock", before, after, n+1)
	})
}

// etcdWatchers reads etcd's count of watchers from its /metrics.
func (f *fixture) etcdWatchers() int {
	f.t.Helper()
	resp, err := http.Get(etcd.Endpoint + "/metrics")
	if err != nil {
		f.t.Fatalf("etcd metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatalf("etcd metrics: %v", err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "etcd_debugging_mvcc_watcher_total "); ok {
			n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				f.t.Fatalf("etcd metrics: %q: %v", line, err)
			}
			return int(n)
		}
	}
	f.t.Fatalf("etcd metrics: no etcd_debugging_mvcc_watcher_total")
	return 0
}
