package controllers_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/controllers"
)

// countingReader counts the uncached GETs of DistributedLocks.
type countingReader struct {
	client.Reader
	locks atomic.Int64
}

func (c *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*lockv1.DistributedLock); ok {
		c.locks.Add(1)
	}
	return c.Reader.Get(ctx, key, obj, opts...)
}

// TestReview22eForeignWriteUncachedEveryReconcile: review 22e of 43e3767, cost.
// reconcileSlots reads a slot lock uncached whenever the cache's resourceVersion is not this
// replica's last write (memory.behindOwnWrite). After anyone else's write of the lock (a
// label or annotation by kubectl or a GitOps tool: no status change, so no write of this
// replica follows), that stays true for good: every reconcile of the lock (each candidate
// pod's event, every requeue) pays an uncached GET, although the first one already showed
// that the cache's copy is the lock as the API server has it. Here a 2-slot lock, both
// slots Held, is labelled once, and 5 reconciles follow on a cache that shows the label
// (this harness's cache reads the API server, so it is never behind): want at most one
// uncached GET of the lock.
func TestReview22eForeignWriteUncachedEveryReconcile(t *testing.T) {
	f := reviewFixture(t)
	for i := range 2 {
		f.pod(fmt.Sprintf("a-%d", i), "a")
		secondApart()
	}
	reader := &countingReader{Reader: k8s}
	rp := newReplica(t, f, "review-22e", func(r *controllers.Reconciler) { r.APIReader = reader })
	f.lock("l", "a", func(s *lockv1.DistributedLockSpec) { s.Slots = 2 })
	deadline := time.Now().Add(20 * time.Second)
	for !slotsHeld(2)(f.get("l")) {
		if time.Now().After(deadline) {
			t.Fatalf("2 slots never held: %s", describeSlots(f.get("l")))
		}
		if _, err := rp.turn(f.ns, "l"); err != nil {
			t.Logf("turn: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	rp.mustTurn(t, f.ns, "l") // settled: nothing to write
	f.editLock("l", func(l *lockv1.DistributedLock) {
		if l.Labels == nil {
			l.Labels = map[string]string{}
		}
		l.Labels["team"] = "ingest" // a foreign write: no status change follows
	})
	before := f.get("l").ResourceVersion
	reader.locks.Store(0)
	for range 5 {
		rp.mustTurn(t, f.ns, "l")
	}
	after := f.get("l")
	if after.ResourceVersion != before {
		t.Fatalf("the reconciles wrote the lock (resourceVersion %s -> %s): %s", before, after.ResourceVersion, describeSlots(after))
	}
	if n := reader.locks.Load(); n > 1 {
		t.Errorf("5 reconciles of a settled 2-slot lock after one foreign write (a label) did %d uncached GETs of the lock, want at most 1: "+
			"behindOwnWrite stays true until this replica writes the lock again, so every reconcile (each pod event) reads it uncached", n)
	}
}
