package controllers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// Review of the term logic (issue 10, items 1-5), against the real Reconcile on a real
// kube-apiserver and etcd.

// TestReviewCrashThenDeleteWaitsTheLockDelay: the holder's container crashes (restartPolicy
// Always: terminated, phase Running, as kubelet_pods.go reports a container "restarted
// soon") and the pod is then deleted gracefully before the kubelet reports the restart. The
// object now shows a deletionTimestamp and every container terminated with phase Running:
// the crash state plus an API-server write, not proof that the process stopped for good (the
// kubelet may have restarted it already, its status write lagging; a real graceful deletion
// reports the terminal phase in the same update as the terminated containers, NOTES.md).
// The next holder must wait the lock delay.
func TestReviewCrashThenDeleteWaitsTheLockDelay(t *testing.T) {
	f := newFixture(t)
	a0 := f.boundPod("a-0", "a", false) // bound: a graceful deletion waits for a kubelet
	secondApart()
	f.pod("a-1", "a")
	f.lock("lock", "a", func(s *lockv1.DistributedLockSpec) { s.LockDelaySeconds = ptrTo[int32](600) })
	f.waitFor("lock", 20*time.Second, "held by a-0", heldBy("a-0"))
	f.crash(a0, 0)
	if err := k8s.Delete(bg(), a0); err != nil {
		t.Fatalf("delete pod a-0: %v", err)
	}
	f.neverTo("lock", "a-1", 5*time.Second)
}

// TestReviewPodGCAfterCrashWaitsTheLockDelay: the holder's container crashed (the kubelet's
// last report: terminated, phase Running), then its Node object was deleted and PodGC wrote
// phase Failed with DisruptionTarget/DeletionByPodGC over those stale container states and
// force-deleted the pod. The machine may be partitioned and the container restarted: the
// next holder must wait the lock delay.
func TestReviewPodGCAfterCrashWaitsTheLockDelay(t *testing.T) {
	f := newFixture(t)
	a0 := f.boundPod("a-0", "a", false)
	secondApart()
	f.pod("a-1", "a")
	f.lock("lock", "a", func(s *lockv1.DistributedLockSpec) { s.LockDelaySeconds = ptrTo[int32](600) })
	f.waitFor("lock", 20*time.Second, "held by a-0", heldBy("a-0"))
	f.crash(a0, 0)
	f.updatePodStatus(a0, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodFailed
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget,
			Status: corev1.ConditionTrue, Reason: "DeletionByPodGC", Message: "PodGC: node no longer exists", LastTransitionTime: metav1.Now()})
	})
	if err := k8s.Delete(bg(), a0, client.GracePeriodSeconds(0)); err != nil {
		t.Fatalf("force delete a-0: %v", err)
	}
	f.neverTo("lock", "a-1", 5*time.Second)
}

// TestReviewCandidateChurnIsDebounced: new candidate pods of a held lock cause at most one
// status write per CountDebounce (DESIGN: eligibleCandidates "never causes more than one
// write per 10 s"; principle 4, no writes in steady state). The Valid condition's message
// carries the number of selected pods, so every pod created is a status change that is
// written at once, and the not-yet-due count rides along with it.
func TestReviewCandidateChurnIsDebounced(t *testing.T) {
	f := newFixture(t)
	f.pod("a-0", "a")
	f.lock("lock", "a", nil)
	f.waitFor("lock", 20*time.Second, "held by a-0", heldBy("a-0"))
	time.Sleep(time.Second) // let the grant's writes settle
	const n = 4
	writes := f.writesWhileCreating(1, n, describe)
	if len(writes) > 1 {
		t.Errorf("%d status writes of a held lock while %d candidate pods were created within %v, want at most 1 (CountDebounce %v):\n%s",
			len(writes), n, n*300*time.Millisecond+2*time.Second, 10*time.Second, joinLines(writes))
	}
}

// writesWhileCreating creates the candidate pods a-<from> to a-<from+n-1> (app=a), 300 ms
// apart, and returns the lock status writes (watch Modified events, each described by desc)
// seen from just before the first until 2 s after the last.
func (f *fixture) writesWhileCreating(from, n int, desc func(*lockv1.DistributedLock) string) []string {
	f.t.Helper()
	ctx, cancel := context.WithCancel(bg())
	defer cancel()
	w, err := k8s.Watch(ctx, &lockv1.DistributedLockList{}, client.InNamespace(f.ns))
	if err != nil {
		f.t.Fatalf("watch locks: %v", err)
	}
	defer w.Stop()
	for i := from; i < from+n; i++ {
		f.pod(fmt.Sprintf("a-%d", i), "a")
		time.Sleep(300 * time.Millisecond)
	}
	var writes []string
	deadline := time.After(2 * time.Second)
	for {
		select {
		case ev := <-w.ResultChan():
			if l, ok := ev.Object.(*lockv1.DistributedLock); ok && ev.Type == watch.Modified {
				writes = append(writes, fmt.Sprintf("rv %s: eligibleCandidates=%d %s", l.ResourceVersion, l.Status.EligibleCandidates, desc(l)))
			}
		case <-deadline:
			return writes
		}
	}
}

func joinLines(s []string) string {
	out := ""
	for _, l := range s {
		out += "  " + l + "\n"
	}
	return out
}
