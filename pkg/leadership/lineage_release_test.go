package leadership_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// createGlobalLock creates a Global lock at key with no status.
func createGlobalLock(t *testing.T, key client.ObjectKey, leaseSeconds int32) {
	t.Helper()
	lock := &lockv1.DistributedLock{
		ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace},
		Spec: lockv1.DistributedLockSpec{
			Candidates:           lockv1.Candidates{Selector: lockv1.MatchLabels(map[string]string{"app": "worker"})},
			LeaseDurationSeconds: leaseSeconds,
			Scope:                lockv1.ScopeGlobal,
			GlobalName:           "global-leader",
		},
	}
	if err := k8s.Create(t.Context(), lock); err != nil {
		t.Fatalf("create the Global lock: %v", err)
	}
}

// recreateGlobal deletes h's lock (a Cluster lock) and creates it again under its name as a
// Global lock (spec.scope is immutable: the only way to change it), then plays its controller:
// round 1 with no holder, round 2 granting pod-a shared-etcd token globalToken, round 3.
func recreateGlobal(t *testing.T, h *harness, rounds *roundReads) {
	t.Helper()
	deleteLock(t, h.key)
	createGlobalLock(t, h.key, 6)
	created := time.Now()
	setStatus(t, h.key, pending)
	rounds.waitRound(t, 1, created, 10*time.Second)
	w2 := time.Now()
	setStatus(t, h.key, globalHeld(globalToken, globalToken, 12, 6))
	rounds.waitRound(t, 2, w2, 5*time.Second)
	setStatus(t, h.key, round(globalToken, 12))
}

// TestReleasedTokenOfOtherLineageNotReleasedAgain: pod-a releases Cluster token 5000; the lock
// is deleted and created again as a Global lock whose grant to pod-a is shared-etcd token
// 200. The released token is of the other lineage: pod-a leads 200 and sends no release for
// it (compared by number, 200 <= 5000 judged it released and sent a release for a grant the
// pod never led).
func TestReleasedTokenOfOtherLineageNotReleasedAgain(t *testing.T) {
	key := createLock(t, namespace(t), "leader", 6)
	h := harnessFor(t, key)
	rounds := &roundReads{path: h.reads.path}
	setStatus(t, h.key, held("pod-a", globalMe, 5000, 6))
	el := h.run(t, globalConfig(h, rounds))
	eventually(t, 10*time.Second, func() bool { return el.Token() == 5000 }, func() string { return "not leading the Cluster lock" })
	if err := el.Release(t.Context()); err != nil {
		t.Fatalf("Release: %v", err)
	}
	eventually(t, 5*time.Second, func() bool {
		l := &lockv1.DistributedLock{}
		return k8s.Get(t.Context(), key, l) == nil && l.Annotations[lockv1.AnnotationHolderRelease] != ""
	}, func() string { return "the release of 5000 is not on the lock" })
	recreateGlobal(t, h, rounds)
	eventually(t, 5*time.Second, func() bool { return el.Token() == globalToken }, func() string {
		return "pod-a never leads the new Global lock's grant 200 after releasing Cluster token 5000; callbacks " + h.rec.String()
	})
	cur := &lockv1.DistributedLock{}
	if err := k8s.Get(t.Context(), key, cur); err != nil {
		t.Fatalf("get lock: %v", err)
	}
	if a := cur.Annotations[lockv1.AnnotationHolderRelease]; a != "" {
		t.Errorf("the Global lock carries a release %q: pod-a released a grant it leads", a)
	}
}
