package leadership_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/pkg/leadership"
)

// TestResourceLockReleaseBoundToObject: ResourceLock.Release checks the lock with a
// consistent read, then patches it. When the lock is deleted and created again in between
// (here as a Global lock whose grant to this pod has the same number, another lineage's term
// that Release never checked), the patch must not land on the new object: it is refused, and
// Release returns ErrNotLeading.
func TestResourceLockReleaseBoundToObject(t *testing.T) {
	h := newHarness(t, 8)
	setStatus(t, h.key, held("pod-a", "uid-a", 5, 8))
	g := gatedTransport{method: http.MethodPatch, armed: &atomic.Bool{}, held: make(chan struct{}), open: make(chan struct{})}
	rc := h.proxy.Config()
	rc.Wrap(func(next http.RoundTripper) http.RoundTripper { g.next = next; return g })
	l, err := leadership.NewResourceLock(leadership.ResourceLockConfig{Config: rc, Namespace: h.key.Namespace, Lock: h.key.Name,
		Identity: "uid-a", Name: "pod-a", LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: time.Second, ExactTimings: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Get(t.Context()); err != nil { // confirms term 5 (ExactTimings)
		t.Fatal(err)
	}
	g.armed.Store(true)
	relErr := make(chan error, 1)
	go func() { relErr <- l.Release(context.Background()) }()
	select {
	case <-g.held:
	case err := <-relErr:
		t.Fatalf("Release = %v before sending a patch; want it to check the lock and patch it", err)
	case <-time.After(10 * time.Second):
		t.Fatalf("Release sent no patch")
	}
	// Between Release's check and its patch: the lock deleted and created again as Global.
	deleteLock(t, h.key)
	createGlobalLock(t, h.key, 8)
	setStatus(t, h.key, func(s *lockv1.DistributedLockStatus) {
		s.Phase, s.Holder, s.GlobalHolderUID, s.GlobalCluster = lockv1.PhaseHeld, "pod-a", "uid-a", "east"
		s.FencingToken, s.TermLeaseSeconds = 5, 8
		s.GlobalRound, s.GlobalToken, s.GlobalLockDelaySeconds = 1, 5, 12
	})
	close(g.open)
	var rerr error
	select {
	case rerr = <-relErr:
	case <-time.After(10 * time.Second):
		t.Fatalf("Release did not return")
	}
	cur := &lockv1.DistributedLock{}
	if err := k8s.Get(t.Context(), h.key, cur); err != nil {
		t.Fatalf("get lock: %v", err)
	}
	if a, ok := cur.Annotations[lockv1.AnnotationHolderRelease]; ok {
		t.Errorf("the release of Cluster term 5 landed on the Global lock (object %s): annotation %q names its term 5 Held by pod-a; Release = %v", cur.UID, a, rerr)
	}
	if !errors.Is(rerr, leadership.ErrNotLeading) {
		t.Errorf("Release = %v, want ErrNotLeading (the term's object is gone)", rerr)
	}
}
