package controllers_test

// The crash window of the cache-based first grant (firstGrant, apply.go): the grant is in
// etcd and its status write did not land, and the turn's own discard of it did not happen
// either (the replica crashed, or etcd did not answer the discard). Here the discard fails
// (failingRelease) and the turns after it, on a working Reconciler, must settle the grant:
// adopt it only if the lock is still the copy it was decided on (cachedGrantStands), delete
// it otherwise, and delete a deleted lock's key (dropOrphan).

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	ctrl "sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/controllers"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// failingRelease is the engine with its deletes failing while armed: etcd not answering the
// discard of a grant.
type failingRelease struct {
	controllers.Inspector
	armed atomic.Bool
}

func (e *failingRelease) Release(ctx context.Context, key string, token int64, opts ...lease.LockOption) error {
	if e.armed.Load() {
		return errors.New("test: etcd did not answer the delete")
	}
	return e.Inspector.Release(ctx, key, token, opts...)
}

// armedStatus is the cached client whose status updates go through update while armed: a
// replica whose status write never leaves it (failBefore), or lands and then reports an error
// (failAfter, an ambiguous outcome).
type armedStatus struct {
	ctrl.Client
	armed  *atomic.Bool
	update func(next func() error) error
}

func (c armedStatus) Status() ctrl.SubResourceWriter {
	return armedStatusWriter{c.Client.Status(), c}
}

type armedStatusWriter struct {
	ctrl.SubResourceWriter
	c armedStatus
}

func (w armedStatusWriter) Update(ctx context.Context, obj ctrl.Object, opts ...ctrl.SubResourceUpdateOption) error {
	next := func() error { return w.SubResourceWriter.Update(ctx, obj, opts...) }
	if !w.c.armed.Load() {
		return next()
	}
	return w.c.update(next)
}

// failBefore fails a status write before it reaches the API server: a replica that crashed
// between the etcd grant and the status write.
func failBefore(func() error) error {
	return errors.New("test: the status write never left the replica")
}

// failAfter lets a status write land, then reports an error: a timeout after the write
// committed.
func failAfter(next func() error) error {
	if err := next(); err != nil {
		return err
	}
	return errors.New("test: context deadline exceeded (the write landed)")
}

// crashWindowReplica is a replica whose discards fail while its engine is armed, and whose
// status writes fail while statusDown is set.
func crashWindowReplica(t *testing.T, f *fixture, identity string) (*replica, *failingRelease, *atomic.Bool) {
	t.Helper()
	engine := &failingRelease{Inspector: f.engine}
	statusDown := &atomic.Bool{}
	rp := newReplica(t, f, identity, func(r *controllers.Reconciler) {
		r.Engine = engine
		r.Client = armedStatus{Client: r.Client, armed: statusDown, update: failBefore}
	})
	return rp, engine, statusDown
}

// staleTurnLeavesGrant runs one turn of rp on the cached copy snapshot with its discard
// failing, and checks that it left a grant in etcd.
func staleTurnLeavesGrant(t *testing.T, f *fixture, rp *replica, engine *failingRelease, snapshot *lockv1.DistributedLock) {
	t.Helper()
	rp.cache.freeze(snapshot)
	engine.armed.Store(true)
	_, err := rp.turn(f.ns, "l")
	engine.armed.Store(false)
	rp.cache.thaw()
	if h := f.holding("l"); h.Token == 0 {
		t.Fatalf("the turn on the cached copy left no grant (err %v): the scenario needs one", err)
	}
}

// TestCachedGrantLeftBySuspendedLockIsDiscarded: created, then suspended; the turn on the
// create event's cached copy grants p, its status write fails and so does its discard. The
// next turn reads the lock uncached, sees it suspended and another resourceVersion, and
// deletes the grant: Suspended, no holder, no key.
func TestCachedGrantLeftBySuspendedLockIsDiscarded(t *testing.T) {
	f := reviewFixture(t)
	rp, engine, _ := crashWindowReplica(t, f, "review-a")
	f.pod("p", "app")
	snapshot := f.get(f.lock("l", "app", nil).Name)
	mustHaveFinalizer(t, snapshot)
	f.editLock("l", func(l *lockv1.DistributedLock) { l.Spec.Suspend = true })

	staleTurnLeavesGrant(t, f, rp, engine, snapshot)

	rp.mustTurn(t, f.ns, "l")
	rp.mustTurn(t, f.ns, "l")
	if l := f.get("l"); l.Status.HolderUID != "" || l.Status.Phase != lockv1.PhaseSuspended {
		t.Fatalf("lock suspended before the manager saw it: %s, want Suspended with no holder: the grant decided on the "+
			"cached copy from before the suspend was adopted", describe(l))
	}
	if h := f.holding("l"); h.Token != 0 {
		t.Fatalf("etcd still holds the cache-decided grant (holder %s, token %d) of a suspended lock", h.Holder, h.Token)
	}
}

// TestCachedGrantOfDeletedLockKeyIsDeleted: the lock is deleted (its finalizer dropped); a
// turn on a cached copy from before grants a pod, its status write finds no lock and its
// discard fails. The turns that find the lock NotFound delete the key.
func TestCachedGrantOfDeletedLockKeyIsDeleted(t *testing.T) {
	f := reviewFixture(t)
	f.pod("a-0", "a")
	snapshot := deletedLock(t, f, "a")
	x, engine, _ := crashWindowReplica(t, f, "review-x")
	staleTurnLeavesGrant(t, f, x, engine, snapshot)
	x.mustTurn(t, f.ns, "l") // the lock is NotFound
	if h := f.holding("l"); h.Token != 0 {
		t.Fatalf("etcd key of the deleted lock l: holder %s token %d, want none: a grant with no lock, kept alive by the grant lease", h.Holder, h.Token)
	}
}

// TestCachedGrantOfUnchangedLockIsAdopted (a control: it passes without the fix too, and
// fails if the uncached read never matches the copy): the crash window on a lock nobody touched: the
// grant decided on the cache is in etcd, its status write never left the replica and the
// discard failed. The next turn reads the lock uncached, finds the very copy the grant was
// decided on, and publishes that grant (the same token): no second grant.
func TestCachedGrantOfUnchangedLockIsAdopted(t *testing.T) {
	f := reviewFixture(t)
	rp, engine, statusDown := crashWindowReplica(t, f, "review-a")
	f.pod("p", "app")
	mustHaveFinalizer(t, f.get(f.lock("l", "app", nil).Name))

	statusDown.Store(true)
	engine.armed.Store(true)
	_, err := rp.turn(f.ns, "l")
	engine.armed.Store(false)
	statusDown.Store(false)
	h := f.holding("l")
	if h.Token == 0 {
		t.Fatalf("the turn left no grant (err %v): the scenario needs one", err)
	}
	if l := f.get("l"); l.Status.HolderUID != "" {
		t.Fatalf("the failing status write published %s", describe(l))
	}

	rp.mustTurn(t, f.ns, "l")
	if l := f.get("l"); !heldBy("p")(l) || l.Status.FencingToken != h.Token {
		t.Fatalf("after the crash window: %s, want Held by p with the grant's token %d (adopted, not granted again)", describe(l), h.Token)
	}
}
