package leadership_test

import (
	"context"
	"testing"
	"time"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// TestReviewLinClusterReleaseInFlightLandsOnGlobalTerm (review rev-lin of 7da0f8c): pod-a
// releases Cluster token 200 while its OnStoppedLeading still runs, so the release waits on
// the callback runner. Meanwhile the lock is deleted and created again as a Global lock whose
// grant to pod-a is shared-etcd token 200 (the same number, another lineage). The release of
// the Cluster term must not end up on the Global object: its annotation pod-a-uid/200 names
// the Global term 200 Held by pod-a, which this process never released (and, per lineage, may
// lead), and the controller ends such a term at once (HolderReleased) and grants the next.
func TestReviewLinClusterReleaseInFlightLandsOnGlobalTerm(t *testing.T) {
	key := createLock(t, namespace(t), "leader", 6)
	h := harnessFor(t, key)
	rounds := &roundReads{path: h.reads.path}
	h.rec.stopGate = make(chan struct{})
	setStatus(t, h.key, held("pod-a", globalMe, globalToken, 6))
	el := h.run(t, globalConfig(h, rounds))
	eventually(t, 10*time.Second, func() bool { return el.Token() == globalToken }, func() string { return "not leading the Cluster lock's token 200" })
	clusterUID := func() string {
		l := &lockv1.DistributedLock{}
		if err := k8s.Get(t.Context(), key, l); err != nil {
			return ""
		}
		return string(l.UID)
	}()
	relErr := make(chan error, 1)
	go func() { relErr <- el.Release(context.Background()) }()
	eventually(t, 5*time.Second, func() bool {
		for _, ev := range h.rec.snapshot() {
			if ev.kind == "stop" {
				return true
			}
		}
		return false
	}, func() string { return "OnStoppedLeading of the Cluster term not called; callbacks " + h.rec.String() })
	recreateGlobal(t, h, rounds)
	ledGlobal := false
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) && !ledGlobal {
		ledGlobal = el.Valid() && el.Token() == globalToken
		time.Sleep(20 * time.Millisecond)
	}
	close(h.rec.stopGate)
	select {
	case err := <-relErr:
		t.Logf("Release returned %v", err)
	case <-time.After(10 * time.Second):
		t.Fatalf("Release did not return")
	}
	cur := &lockv1.DistributedLock{}
	if err := k8s.Get(t.Context(), key, cur); err != nil {
		t.Fatalf("get lock: %v", err)
	}
	a := cur.Annotations[lockv1.AnnotationHolderRelease]
	landed := a == lockv1.HolderReleaseValue(globalMe, globalToken)
	if landed {
		t.Errorf("the release of Cluster term %d (object %s) landed on the Global lock (object %s, scope %s): annotation %q names the Global term %d Held by pod-a, a term of another lineage this process never released; callbacks %s",
			globalToken, clusterUID, cur.UID, cur.Spec.Scope, a, cur.Status.FencingToken, h.rec.String())
	}
	if landed && ledGlobal {
		t.Errorf("pod-a led the Global term %d (Valid, Token %d) while its own release naming that term was queued, then sent: the controller ends the term at once on it (HolderReleased) and grants the next, before this process's OnStartedLeading of the term even ran",
			globalToken, globalToken)
	}
}
