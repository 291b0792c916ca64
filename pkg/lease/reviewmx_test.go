package lease_test

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
)

// Adversarial review of d3184fb (the call tombstone in a blocking Acquire).

// holdFirst stops d from holding further requests, keeping (and still
// delaying) the ones it holds: the first try is stuck in the network, the
// retries go through.
func holdFirst(d *delayer) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.put = ""
}

// A blocking Acquire whose join is delayed in the network queues by its
// enqueue and gets the lock from its entry: it succeeds, so its clean-up
// (which puts the call's tombstone) never runs. The join lands after the
// Lock's Release, finds the lock free and nobody queued, and creates the
// lock key on the session's lease: held by nobody (no Lock tracks it, no
// clean-up knows it) until the session ends. (The semaphore buries its
// tombstone when a call succeeds after a lost answer; semaphore.go.)
func TestReviewMxSucceededAcquireDelayedJoinLandsAfterRelease(t *testing.T) {
	e := newEnv(t)
	eng := e.engine(e.cli)
	d := &delayer{}
	ws := e.session(e.engine(e.srv.Client(t, grpc.WithChainUnaryInterceptor(d.unary))), 4*time.Second)
	h, err := e.session(eng, 10*time.Second).Acquire(ctx(t), "mx", "h")
	if err != nil {
		t.Fatalf("Acquire(h) = %v", err)
	}
	d.arm(prefix(t) + "/locks/") // join's Then puts the lock key: held back; the enqueue's put passes
	wc := acquireAsync(t, ws, "mx", "w")
	waiters(t, eng, "mx", 1) // join timed out (TTL/4), the enqueue queued
	if d.count() != 1 {
		t.Fatalf("held transactions = %d, want the join's 1 (the premise)", d.count())
	}
	if err := h.Release(ctx(t)); err != nil {
		t.Fatalf("Release(h) = %v", err)
	}
	a := await(t, wc, 5*time.Second, "w")
	if a.err != nil {
		t.Fatalf("w: Acquire = %v, want the lock (the premise)", a.err)
	}
	if err := a.l.Release(ctx(t)); err != nil {
		t.Fatalf("Release(w) = %v", err)
	}
	d.release() // the held join lands now: the lock is free and nobody queues
	if ks, _ := withoutTombstones(t, leaseKeys(t, e.cli, ws.ID())); len(ks) != 0 {
		t.Errorf("keys on w's lease after its Lock's Release and its delayed join landed: %q, want none", ks)
	}
	if _, err := e.session(eng, 10*time.Second).TryAcquire(ctx(t), "mx", "next"); err != nil {
		t.Errorf("TryAcquire with no live holder or waiter = %v, want the lock", err)
	}
}

// The same with the lean first try (the session's last Acquire of the key
// found it free): the first grab is delayed, the retry takes the lock; the
// delayed grab lands after the Lock's Release and creates the lock key for
// nobody.
func TestReviewMxSucceededAcquireDelayedLeanGrabLandsAfterRelease(t *testing.T) {
	e := newEnv(t)
	eng := e.engine(e.cli)
	d := &delayer{}
	ws := e.session(e.engine(e.srv.Client(t, grpc.WithChainUnaryInterceptor(d.unary))), 4*time.Second)
	first, err := ws.Acquire(ctx(t), "mx", "w")
	if err != nil {
		t.Fatalf("Acquire(w) = %v", err)
	}
	if err := first.Release(ctx(t)); err != nil {
		t.Fatalf("Release(w) = %v", err)
	}
	d.arm(prefix(t) + "/locks/")
	wc := acquireAsync(t, ws, "mx", "w")
	eventually(t, 5*time.Second, func() error {
		if d.count() == 0 {
			return errors.New("the first grab is not held yet")
		}
		return nil
	})
	holdFirst(d)
	a := await(t, wc, 5*time.Second, "w")
	if a.err != nil {
		t.Fatalf("w: Acquire = %v, want the lock (the premise)", a.err)
	}
	if d.count() != 1 {
		t.Fatalf("held transactions = %d, want the first grab's 1 (the premise)", d.count())
	}
	if err := a.l.Release(ctx(t)); err != nil {
		t.Fatalf("Release(w) = %v", err)
	}
	d.release() // the held grab lands now: the lock is free and nobody queues
	if ks, _ := withoutTombstones(t, leaseKeys(t, e.cli, ws.ID())); len(ks) != 0 {
		t.Errorf("keys on w's lease after its Lock's Release and its delayed first grab landed: %q, want none", ks)
	}
	if _, err := e.session(eng, 10*time.Second).TryAcquire(ctx(t), "mx", "next"); err != nil {
		t.Errorf("TryAcquire with no live holder or waiter = %v, want the lock", err)
	}
}
