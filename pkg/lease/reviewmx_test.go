package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockwarden/lockwarden/pkg/lease"
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
	freeAfterLanding(t, e, ws, "mx", "w's lease after its Lock's Release and its delayed join landed")
}

// The same with the lean first try (the session's last Acquire of the key
// found it free): the first grab is delayed, the retry takes the lock; the
// delayed grab lands after the Lock's Release and creates the lock key for
// nobody.
func TestReviewMxSucceededAcquireDelayedLeanGrabLandsAfterRelease(t *testing.T) {
	e := newEnv(t)
	d := &delayer{}
	ws := e.session(e.engine(e.srv.Client(t, grpc.WithChainUnaryInterceptor(d.unary))), 4*time.Second)
	a := acquireHoldingLeanGrab(t, ws, d, "w")
	if d.count() != 1 {
		t.Fatalf("held transactions = %d, want the first grab's 1 (the premise)", d.count())
	}
	if err := a.l.Release(ctx(t)); err != nil {
		t.Fatalf("Release(w) = %v", err)
	}
	d.release() // the held grab lands now: the lock is free and nobody queues
	freeAfterLanding(t, e, ws, "mx", "w's lease after its Lock's Release and its delayed first grab landed")
}

// acquireHoldingLeanGrab takes and releases "mx" once on ws, so that its next
// Acquire of the key tries the lean grab first, then arms d on the lock keys
// and runs that Acquire for holder with its first grab held back (holdFirst);
// it returns the Acquire's result, which must be the lock (the premise).
func acquireHoldingLeanGrab(t *testing.T, ws *lease.Session, d *delayer, holder string) acquired {
	t.Helper()
	first, err := ws.Acquire(ctx(t), "mx", "w")
	if err != nil {
		t.Fatalf("Acquire(w) = %v", err)
	}
	if err := first.Release(ctx(t)); err != nil {
		t.Fatalf("Release(w) = %v", err)
	}
	d.arm(prefix(t) + "/locks/")
	wc := acquireAsync(t, ws, "mx", holder)
	eventually(t, 5*time.Second, func() error {
		if d.count() == 0 {
			return errors.New("the first grab is not held yet")
		}
		return nil
	})
	holdFirst(d)
	a := await(t, wc, 5*time.Second, holder)
	if a.err != nil {
		t.Fatalf("%s: Acquire = %v, want the lock (the premise)", holder, a.err)
	}
	return a
}

// cleanupDeleteDropper fails, before sending, every Txn of its client that
// only deletes path (the session's clean-up delete of a leftover), while
// armed: a transient failure of that one request. A Txn that also puts
// something (a regrant, which deletes the entry it turns into a lock key)
// passes.
type cleanupDeleteDropper struct {
	mu    sync.Mutex
	path  string
	armed bool
}

func (d *cleanupDeleteDropper) arm(path string) {
	d.mu.Lock()
	d.path, d.armed = path, true
	d.mu.Unlock()
}
func (d *cleanupDeleteDropper) disarm() { d.mu.Lock(); d.armed = false; d.mu.Unlock() }

func (d *cleanupDeleteDropper) unary(c context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if r, ok := req.(*pb.TxnRequest); ok {
		d.mu.Lock()
		drop := d.armed && deletes(r, d.path)
		for _, op := range r.Success {
			if op.GetRequestPut() != nil {
				drop = false
			}
		}
		d.mu.Unlock()
		if drop {
			return status.Error(codes.Unavailable, "review: clean-up delete dropped")
		}
	}
	return invoker(c, method, req, reply, cc, opts...)
}

// An outrun waiter (rolling upgrade, regrant.go) takes the lock by regrant, a
// write that puts the lock key: unlike join, enqueue and grab it does not
// compare the call's tombstone. Here the regrant is delayed in the network,
// the call gives up, and its clean-up's delete of the entry fails once (the
// lock key's read, after the tombstone, finds nothing: settled). The regrant
// lands while the entry still exists: it creates the lock key on the live
// session's lease, which no Lock tracks and the clean-up no longer looks at,
// and deletes the entry: the lock is held for nobody until the session ends.
func TestReviewMxDelayedRegrantAfterCleanupHoldsLock(t *testing.T) {
	const ttl = 6 * time.Second
	e := newEnv(t)
	eng := e.engine(e.cli)
	first, err := e.session(eng, ttl).TryAcquire(ctx(t), "k", "first")
	if err != nil {
		t.Fatalf("TryAcquire = %v, want nil", err)
	}
	old := queueOld(t, e, ttl)
	d, drop := &delayer{}, &cleanupDeleteDropper{}
	ws := e.session(e.engine(e.srv.Client(t, grpc.WithChainUnaryInterceptor(d.unary, drop.unary))), ttl)
	entry := fmt.Sprintf("%s/queue/k/%016x", prefix(t), int64(ws.ID()))
	wctx, cancel := context.WithCancel(ctx(t))
	defer cancel()
	res := make(chan error, 1)
	go func() {
		l, err := ws.Acquire(wctx, "k", "gave-up")
		if err == nil {
			err = errors.New("got the lock")
			_ = l.Release(context.Background())
		}
		res <- err
	}()
	waiters(t, eng, "k", 2) // the old replica's entry, then ws's

	if err := first.Release(ctx(t)); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	old.grab(eng)
	time.Sleep(200 * time.Millisecond) // ws reads the lock key (outrun) and waits on it
	d.arm(eng.Path("k"))               // the regrant puts the lock key: held back
	drop.arm(entry)
	old.release(eng)
	eventually(t, ttl, func() error {
		if d.count() == 0 {
			return errors.New("ws sent no regrant after the old replica's release (the premise)")
		}
		return nil
	})
	cancel()
	select {
	case err := <-res:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("ws: Acquire = %v, want context.Canceled (the premise)", err)
		}
	case <-time.After(ttl):
		t.Fatal("ws: Acquire still running after its cancel")
	}
	if got, err := e.cli.Get(ctx(t), entry); err != nil || len(got.Kvs) != 1 {
		t.Fatalf("ws's entry after the call = %v (err %v), want still there: its clean-up delete was dropped (the premise)", got, err)
	}
	d.release() // the held regrant lands now
	drop.disarm()
	time.Sleep(ttl / 2) // the clean-up retries every TTL/20
	if ks, _ := withoutTombstones(t, leaseKeys(t, e.cli, ws.ID())); len(ks) != 0 {
		t.Errorf("keys on the lease of the Acquire that gave up, after its delayed regrant landed: %q, want none", ks)
	}
	if _, err := e.session(eng, ttl).TryAcquire(ctx(t), "k", "next"); err != nil {
		t.Errorf("TryAcquire with no live holder or waiter = %v, want the lock", err)
	}
}

// A join whose answer is lost after it took the lock key, then an enqueue
// delayed in the network and a retried enqueue that queues: the call finds
// its own lock key, deletes its entry and claims the key (claimOrphan). It
// succeeds, so nothing puts its tombstone; the delayed enqueue lands after
// the Lock's Release and queues an entry of the call that becomes the grant
// for nobody.
func TestReviewMxClaimedOrphanDelayedEnqueueLandsAfterRelease(t *testing.T) {
	e := newEnv(t)
	q, d := &lossy{}, &delayer{}
	ws := e.session(e.engine(e.srv.Client(t, grpc.WithChainUnaryInterceptor(q.unary, d.unary))), 4*time.Second)
	q.arm(prefix(t)+"/locks/", 1, nil) // the join takes the free lock; its answer is lost
	d.arm(prefix(t) + "/queue/")       // the first enqueue is held back
	wc := acquireAsync(t, ws, "mx", "w")
	eventually(t, 5*time.Second, func() error {
		if d.count() == 0 {
			return errors.New("no enqueue held yet")
		}
		return nil
	})
	holdFirst(d)
	a := await(t, wc, 5*time.Second, "w")
	if a.err != nil {
		t.Fatalf("w: Acquire = %v, want the lock (the premise)", a.err)
	}
	if q.losses() != 1 || d.count() != 1 {
		t.Fatalf("answers lost = %d, enqueues held = %d, want 1 and 1 (the premise)", q.losses(), d.count())
	}
	if err := a.l.Release(ctx(t)); err != nil {
		t.Fatalf("Release(w) = %v", err)
	}
	d.release() // the held enqueue lands now
	freeAfterLanding(t, e, ws, "mx", "w's lease after its Lock's Release and its delayed enqueue landed")
}

// The cost of the call tombstone (question 4 of the review): a long-lived
// session keeps one small key per call that lost an answer, not one per
// retry or per clean-up round, and none once the session ends. Here n
// Acquires each have their join held back in the network and give up; their
// joins all land afterwards and create nothing.
func TestReviewMxTombstoneOnePerFailedCall(t *testing.T) {
	const n = 5
	e := newEnv(t)
	eng := e.engine(e.cli)
	d := &delayer{}
	ws := e.session(e.engine(e.srv.Client(t, grpc.WithChainUnaryInterceptor(d.unary))), 4*time.Second)
	h, err := e.session(eng, 10*time.Second).Acquire(ctx(t), "mx", "h")
	if err != nil {
		t.Fatalf("Acquire(h) = %v", err)
	}
	d.arm(prefix(t) + "/locks/")
	for i := range n {
		wctx, cancel := context.WithTimeout(ctx(t), 1500*time.Millisecond) // past the join's TTL/4
		_, err := ws.Acquire(wctx, "mx", fmt.Sprintf("gave-up-%d", i))
		cancel()
		if err == nil {
			t.Fatalf("call %d: Acquire = nil while h holds the lock, want the ctx's error (the premise)", i)
		}
	}
	if d.count() != n {
		t.Fatalf("held joins = %d, want %d (the premise)", d.count(), n)
	}
	time.Sleep(time.Second) // clean-up rounds, had any leftover been handed over
	rest, gone := withoutTombstones(t, leaseKeys(t, e.cli, ws.ID()))
	if len(rest) != 0 || gone != n {
		t.Errorf("keys on the lease after %d failed calls = %q and %d call tombstones, want none and %d", n, rest, gone, n)
	}
	d.release()
	if rest, gone := withoutTombstones(t, leaseKeys(t, e.cli, ws.ID())); len(rest) != 0 || gone != n {
		t.Errorf("keys on the lease after the %d held joins landed = %q and %d call tombstones, want none and %d", n, rest, gone, n)
	}
	if err := h.Release(ctx(t)); err != nil {
		t.Fatalf("Release(h) = %v", err)
	}
	if err := ws.Close(ctx(t)); err != nil {
		t.Fatalf("Close = %v", err)
	}
	resp, err := e.cli.Get(ctx(t), prefix(t)+"/gone/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Errorf("call tombstones after the session's Close = %v (err %v), want 0", resp, err)
	}
}
