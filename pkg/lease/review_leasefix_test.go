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

	"github.com/lockwarden/lockwarden/pkg/lease"
)

// Tests of the adversarial review of branch issue24-leasefix (regrant.go and
// the clean-up / claim changes). Each reproduces a finding and fails on that
// branch. The review's first finding (an outrun waiter that leaves before its
// regrant passes a lower token down the queue, in a rolling upgrade) is a
// documented limitation (docs/operations.md), not tested here.

// oldReplica is a waiter of the version before issue 24, replayed by its
// exact transactions (as TestReviewRollingUpgradeTokensGrow does): its
// enqueue, its grab once it is the oldest, its guarded release.
type oldReplica struct {
	t     *testing.T
	e     *env
	lease clientv3.LeaseID
	entry string
	rev   int64 // the entry's CreateRevision
	token int64 // the lock key's, once grabbed
}

// queueOld queues an old replica's waiter for key k on its own kept-alive lease.
func queueOld(t *testing.T, e *env, ttl time.Duration) *oldReplica {
	t.Helper()
	lg, err := e.cli.Grant(ctx(t), int64(ttl/time.Second))
	if err != nil {
		t.Fatalf("Grant = %v, want nil", err)
	}
	ka, err := e.cli.KeepAlive(ctx(t), lg.ID)
	if err != nil {
		t.Fatalf("KeepAlive = %v, want nil", err)
	}
	go func() {
		for range ka {
		}
	}()
	o := &oldReplica{t: t, e: e, lease: lg.ID, entry: fmt.Sprintf("%s/queue/k/%016x", prefix(t), int64(lg.ID))}
	q, err := e.cli.Txn(ctx(t)).
		If(clientv3.Compare(clientv3.CreateRevision(o.entry), "=", 0)).
		Then(clientv3.OpPut(o.entry, `{"holder":"old"}`, clientv3.WithLease(lg.ID))).Commit()
	if err != nil || !q.Succeeded {
		t.Fatalf("old replica's enqueue = %v (err %v), want applied", q, err)
	}
	o.rev = q.Header.Revision
	return o
}

// grab is the old version's take of the lock by a queued waiter that is the oldest.
func (o *oldReplica) grab(eng *lease.Engine) {
	t := o.t
	t.Helper()
	lockPath, tomb, qdir := eng.Path("k"), prefix(t)+"/tombstones/k", prefix(t)+"/queue/k/"
	g, err := o.e.cli.Txn(ctx(t)).If(
		clientv3.Compare(clientv3.CreateRevision(lockPath), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(tomb), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(o.entry), "=", o.rev),
		clientv3.Compare(clientv3.CreateRevision(qdir), ">", o.rev-1).WithPrefix(),
	).Then(
		clientv3.OpPut(lockPath, `{"holder":"old"}`, clientv3.WithLease(o.lease)),
		clientv3.OpDelete(o.entry),
	).Commit()
	if err != nil || !g.Succeeded {
		t.Fatalf("old replica's grab = %v (err %v), want applied (it is the oldest waiter)", g, err)
	}
	o.token = g.Header.Revision
}

// release is the old version's guarded delete of its lock key.
func (o *oldReplica) release(eng *lease.Engine) {
	t := o.t
	t.Helper()
	lockPath := eng.Path("k")
	if r, err := o.e.cli.Txn(ctx(t)).If(clientv3.Compare(clientv3.CreateRevision(lockPath), "=", o.token)).
		Then(clientv3.OpDelete(lockPath)).Commit(); err != nil || !r.Succeeded {
		t.Fatalf("old replica's release = %v (err %v), want applied", r, err)
	}
}

// txnHold holds, before sending, the first Txn of its client that match
// selects while armed, until let is called: as if that one request were slow
// on the wire.
type txnHold struct {
	mu     sync.Mutex
	match  func(*pb.TxnRequest) bool
	caught chan struct{} // closed when a matching Txn is held
	open   chan struct{} // closed by let
}

func newTxnHold() *txnHold { return &txnHold{caught: make(chan struct{}), open: make(chan struct{})} }

func (h *txnHold) arm(match func(*pb.TxnRequest) bool) {
	h.mu.Lock()
	h.match = match
	h.mu.Unlock()
}

func (h *txnHold) let() {
	select {
	case <-h.open:
	default:
		close(h.open)
	}
}

func (h *txnHold) dialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithChainUnaryInterceptor(
		func(c context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if r, ok := req.(*pb.TxnRequest); ok {
				h.mu.Lock()
				hold := h.match != nil && h.match(r)
				if hold {
					h.match = nil
					close(h.caught)
				}
				h.mu.Unlock()
				if hold {
					select {
					case <-h.open:
					case <-c.Done():
						return c.Err()
					}
				}
			}
			return invoker(c, method, req, reply, cc, opts...)
		})}
}

// puts reports whether r's Success branch puts path.
func puts(r *pb.TxnRequest, path string) bool {
	for _, op := range r.Success {
		if p := op.GetRequestPut(); p != nil && string(p.Key) == path {
			return true
		}
	}
	return false
}

// Review of issue24-leasefix, SAFETY (WithGuard, rolling upgrade): WithGuard
// says its compares "must hold, in the same transaction, for the operation to
// write anything" (the controller passes its election's IsOwner, so that a
// deposed replica cannot grant). An outrun waiter's take (regrant) is a write
// (Put of the lock key) whose transaction carries none of the caller's
// guards: they were checked only by the read before it. Here the guard fails
// between that read and the regrant (the replica is deposed), and the regrant
// still creates the lock key: the Acquire returns a Lock whose grant was
// written after its guard stopped holding.
func TestReviewLeasefixRegrantIgnoresGuards(t *testing.T) {
	const ttl = 6 * time.Second
	e := newEnv(t)
	eng := e.engine(e.cli)
	guardKey := prefix(t) + "/guard"
	if _, err := e.cli.Put(ctx(t), guardKey, "leader"); err != nil {
		t.Fatalf("Put(guard) = %v, want nil", err)
	}
	guard := lease.WithGuard(clientv3.Compare(clientv3.Value(guardKey), "=", "leader"))
	first, err := e.session(eng, ttl).TryAcquire(ctx(t), "k", "first")
	if err != nil {
		t.Fatalf("TryAcquire = %v, want nil", err)
	}
	old := queueOld(t, e, ttl)

	hold := newTxnHold()
	ns := e.session(e.engine(e.srv.Client(t, hold.dialOptions()...)), ttl)
	t.Cleanup(hold.let)
	entry := fmt.Sprintf("%s/queue/k/%016x", prefix(t), int64(ns.ID()))
	nc := acquireAsync(t, ns, "k", "n", guard)
	waiters(t, eng, "k", 2)

	if err := first.Release(ctx(t)); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	old.grab(eng)
	time.Sleep(200 * time.Millisecond) // N reads the lock key (outrun) and waits on it
	hold.arm(func(r *pb.TxnRequest) bool { return puts(r, eng.Path("k")) && deletes(r, entry) })
	old.release(eng)
	select {
	case <-hold.caught: // N's regrant, sent after a read in which the guard held
	case <-time.After(ttl):
		t.Fatal("N sent no regrant after the old replica's release (the test's premise)")
	}
	dep, err := e.cli.Put(ctx(t), guardKey, "deposed")
	if err != nil {
		t.Fatalf("Put(guard deposed) = %v, want nil", err)
	}
	hold.let()

	a := await(t, nc, 2*ttl, "n")
	if a.err == nil && a.l.Token() > dep.Header.Revision {
		t.Fatalf("Acquire(WithGuard) = lock with token %d, written after its guard failed at revision %d: the regrant carries no guard",
			a.l.Token(), dep.Header.Revision)
	}
	if a.err != nil && !errors.Is(a.err, lease.ErrGuardFailed) {
		t.Fatalf("Acquire(WithGuard) after the guard failed = %v, want ErrGuardFailed", a.err)
	}
	t.Logf("Acquire(WithGuard) after the guard failed: %v", a.err)
}

// Review of issue24-leasefix, SAFETY (clean-up vs a live Lock; on main too):
// cleanOne takes the key's busy mark only for leftovers with token 0, on the
// ground that for a released Lock's key "only an Adopt of the very grant this
// session just released could track it, and the delete would then end that
// Lock as a lost key, nothing worse". doc.go promises the clean-up deletes
// "never a key a Lock of the session tracks". A Release whose answer is lost
// leaves its key to the clean-up; the session still lists it as held (Keys),
// and the caller Adopts it between the clean-up's read (tracks: no) and its
// delete. The delete then removes the grant the adopted Lock tracks, and the
// lock passes to the next waiter while the adopted Lock is still Valid: two
// valid holders until the adopted Lock's watch notices, caused by the engine.
func TestReviewLeasefixCleanupDeletesAdoptedReleasedKey(t *testing.T) {
	const ttl = 2 * time.Second
	e := newEnv(t)
	eng := e.engine(e.cli)
	drop, hold := &deleteDropper{}, newTxnHold()
	s := e.session(e.engine(e.srv.Client(t, append(drop.dialOptions(), hold.dialOptions()...)...)), ttl)
	t.Cleanup(hold.let)
	t.Cleanup(drop.disarm)
	path := eng.Path("k")
	l, err := s.TryAcquire(ctx(t), "k", "w")
	if err != nil {
		t.Fatalf("TryAcquire = %v, want nil", err)
	}
	nc := acquireAsync(t, e.session(eng, ttl), "k", "next")
	waiters(t, eng, "k", 1)

	drop.arm(path) // Release's delete is lost
	hold.arm(func(r *pb.TxnRequest) bool { return deletes(r, path) })
	if err := l.Release(ctx(t)); err == nil {
		t.Fatal("Release = nil with its delete dropped, want an error (the test's premise)")
	}
	drop.disarm()
	select {
	case <-hold.caught: // the clean-up read the key (no Lock tracks it) and sends its delete
	case <-time.After(ttl):
		t.Fatal("the session's clean-up sent no delete of the released key (the test's premise)")
	}
	keys, err := s.Keys(ctx(t))
	if err != nil || keys["k"] != l.Token() {
		t.Fatalf("Keys = %v (err %v), want k with token %d", keys, err, l.Token())
	}
	adopted, err := s.Adopt(ctx(t), "k", l.Token())
	if err != nil {
		t.Fatalf("Adopt(k, %d) = %v, want nil (the grant is on the session's lease)", l.Token(), err)
	}
	hold.let()

	select {
	case n := <-nc:
		valid := adopted.Valid()
		t.Fatalf("next: Acquire = %v (token %d) while the adopted Lock (token %d) was Valid()=%v at that moment: the clean-up deleted a grant a live Lock of its session tracks",
			n.err, tokenOf(n.l), adopted.Token(), valid)
	case <-adopted.Done():
		t.Fatalf("adopted Lock lost (%v): the session's clean-up deleted a grant a live Lock of its session tracks", adopted.Err())
	case <-time.After(ttl / 2):
	}
	if err := adopted.Release(ctx(t)); err != nil {
		t.Fatalf("Release(adopted) = %v, want nil", err)
	}
	if n := await(t, nc, ttl, "next"); n.err != nil {
		t.Fatalf("next: Acquire = %v, want nil", n.err)
	}
}

func tokenOf(l *lease.Lock) int64 {
	if l == nil {
		return 0
	}
	return l.Token()
}
