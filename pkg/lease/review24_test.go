package lease_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockwarden/lockwarden/internal/etcdtest"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// Tests of the adversarial review of issue 24 items 1-2 (queued grants). Each
// reproduces a finding; see the commit message for which fail on main.

// cancellableAcquire starts s.Acquire(key, holder) under its own context and
// returns its outcome channel and the context's cancel.
func cancellableAcquire(t *testing.T, s *lease.Session, key, holder string) (<-chan acquired, context.CancelFunc) {
	c := make(chan acquired, 1)
	actx, cancel := context.WithCancel(ctx(t))
	t.Cleanup(cancel)
	go func() {
		l, err := s.Acquire(actx, key, holder)
		c <- acquired{l, err}
	}()
	return c, cancel
}

// Review of issue 24, liveness: a waiter's validity starts at w.seen, the send
// time of its newest linearizable read that showed it waiting. That read is
// refreshed only by a look after a quiet TTL/3 or by waitGone's re-read, and
// the re-read is skipped whenever the watch starts at or below the revision
// read (a serializable lookAt's revision counts). So when the waiters ahead
// leave one by one, each within TTL/3 of the last, with nothing else written
// in between, every wake-up is a lookAt that still shows someone ahead, and
// w.seen stays at the join. When the lock finally comes, its validity
// (w.seen + TTL - margin) has already passed: register refuses it with
// ErrExpired, the Acquire fails, and its entry (the grant) is deleted, though
// the waiter's session was healthy throughout and the lock was free for it.
func TestReviewChainedDeparturesKeepGrantFresh(t *testing.T) {
	const ttl = 6 * time.Second // margin 1.5 s: validity TTL - margin = 4.5 s; waits of TTL/3 = 2 s
	const step = 1500 * time.Millisecond
	e := newEnv(t)
	eng := e.engine(e.cli)
	h, err := e.session(eng, ttl).TryAcquire(ctx(t), "k", "holder")
	if err != nil {
		t.Fatalf("TryAcquire = %v, want nil", err)
	}
	const ahead = 3
	cancels := make([]context.CancelFunc, ahead)
	outs := make([]<-chan acquired, ahead)
	for i := range ahead {
		outs[i], cancels[i] = cancellableAcquire(t, e.session(eng, ttl), "k", fmt.Sprintf("ahead%d", i))
		waiters(t, eng, "k", int64(i+1))
	}
	ws := e.session(eng, ttl)
	wc := acquireAsync(t, ws, "k", "w")
	waiters(t, eng, "k", ahead+1)
	joined := time.Now()

	// The waiters ahead give up, the newest first (each departure wakes w,
	// whose read at the event's revision shows the next one still ahead),
	// then the holder releases: 4 steps of 1.5 s, each well within TTL/3.
	for i := ahead - 1; i >= 0; i-- {
		time.Sleep(step)
		cancels[i]()
		if a := await(t, outs[i], ttl, fmt.Sprintf("ahead%d", i)); a.err == nil {
			t.Fatalf("ahead%d: Acquire = nil after its cancel, want an error", i)
		}
	}
	time.Sleep(step)
	if err := h.Release(ctx(t)); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	a := await(t, wc, ttl, "w")
	if a.err != nil {
		t.Fatalf("w: Acquire = %v %v after it joined, want the lock (its session lived, the lock was free for it)",
			a.err, time.Since(joined).Round(time.Millisecond))
	}
	if !a.l.Valid() {
		t.Fatalf("w's lock Valid() = false right after Acquire (err %v)", a.l.Err())
	}
	if err := a.l.Release(ctx(t)); err != nil {
		t.Fatalf("Release(w) = %v, want nil", err)
	}
}

// deleteDropper fails, before sending, every Txn of its client that deletes
// one etcd key while armed: as if each such request's answer were lost.
type deleteDropper struct {
	mu    sync.Mutex
	path  string
	armed bool
}

func (d *deleteDropper) arm(path string) { d.mu.Lock(); d.path, d.armed = path, true; d.mu.Unlock() }
func (d *deleteDropper) disarm()         { d.mu.Lock(); d.armed = false; d.mu.Unlock() }

func (d *deleteDropper) dialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithChainUnaryInterceptor(
		func(c context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if r, ok := req.(*pb.TxnRequest); ok {
				d.mu.Lock()
				drop := d.armed && deletes(r, d.path)
				d.mu.Unlock()
				if drop {
					return status.Error(codes.Unavailable, "review: delete dropped")
				}
			}
			return invoker(c, method, req, reply, cc, opts...)
		})}
}

func deletes(r *pb.TxnRequest, path string) bool {
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			if d := op.GetRequestDeleteRange(); d != nil && string(d.Key) == path {
				return true
			}
		}
	}
	return false
}

// leftGrant is a lock whose grant is a queue entry that a cancelled Acquire
// of s left, with no Lock for it, and another waiter queued behind it.
type leftGrant struct {
	eng   *lease.Engine
	s     *lease.Session
	drop  *deleteDropper // loses every delete of the entry while armed
	token int64          // the left entry's, the grant's
	next  <-chan acquired
}

// leaveGrantBehind queues s's Acquire of k behind a holder, cancels it while
// drop loses every delete of its entry (so the entry stays, and the
// session's clean-up keeps retrying it), queues another waiter behind it,
// and releases the holder: the left entry is now the lock's grant, on s's
// lease, with no Lock for it.
func leaveGrantBehind(t *testing.T) leftGrant {
	t.Helper()
	const ttl = 2 * time.Second
	e := newEnv(t)
	eng := e.engine(e.cli)
	h, err := e.session(eng, ttl).TryAcquire(ctx(t), "k", "holder")
	if err != nil {
		t.Fatalf("TryAcquire = %v, want nil", err)
	}
	drop := &deleteDropper{}
	s := e.session(e.engine(e.srv.Client(t, drop.dialOptions()...)), ttl)
	wc, cancel := cancellableAcquire(t, s, "k", "w")
	waiters(t, eng, "k", 1)
	drop.arm(fmt.Sprintf("%s/queue/k/%016x", prefix(t), int64(s.ID())))
	t.Cleanup(drop.disarm)
	cancel()
	if a := await(t, wc, ttl, "cancelled w"); a.err == nil {
		t.Fatal("cancelled Acquire = nil, want an error")
	}
	waiters(t, eng, "k", 1) // its entry stays: the deletes are lost
	nc := acquireAsync(t, e.session(eng, ttl), "k", "next")
	waiters(t, eng, "k", 2)
	if err := h.Release(ctx(t)); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	got := holding(t, eng, "k")
	if got.Lease != s.ID() || got.Holder != "w" {
		t.Fatalf("Inspect = %+v, want the left entry of lease %x as the grant (the test's premise)", got, s.ID())
	}
	return leftGrant{eng: eng, s: s, drop: drop, token: got.Token, next: nc}
}

// Review of issue 24, safety: the session's clean-up deletes a queue entry
// that a Lock of the session tracks. A cancelled Acquire's entry could not be
// deleted (the delete's answers are lost), so the session's clean-up keeps
// retrying it; meanwhile the release ahead makes it the lock's grant. The
// session lists it (Keys: "the grants held on the session's lease ... Adopt
// gives a *Lock for one") and the caller Adopts it. The clean-up then deletes
// the adopted grant (cleanOne checks s.tracks, and takes the key's busy mark,
// for lock keys only), handing the lock to the next waiter while the adopted
// Lock is still Valid until its watch or check notices: two valid holders,
// caused by the engine itself. doc.go: the session deletes "never a key a
// Lock of the session tracks".
func TestReviewCleanupSparesAdoptedEntryGrant(t *testing.T) {
	const ttl = 2 * time.Second
	lg := leaveGrantBehind(t)
	eng, s, drop, token, nc := lg.eng, lg.s, lg.drop, lg.token, lg.next

	keys, err := s.Keys(ctx(t))
	if err != nil || keys["k"] != token {
		t.Fatalf("Keys = %v (err %v), want k with token %d", keys, err, token)
	}
	l, err := s.Adopt(ctx(t), "k", token)
	if err != nil {
		t.Fatalf("Adopt(k, %d) = %v, want nil", token, err)
	}
	drop.disarm() // the clean-up's next retry gets through

	time.Sleep(ttl / 2) // ten clean-up retry periods (TTL/20)
	select {
	case <-l.Done():
		t.Fatalf("adopted Lock lost (%v): the session's clean-up deleted a grant its own Lock tracks", l.Err())
	default:
	}
	if got := holding(t, eng, "k"); got.Token != l.Token() {
		t.Fatalf("Inspect = holder %q token %d, want the adopted grant %d", got.Holder, got.Token, l.Token())
	}
	select {
	case n := <-nc:
		t.Fatalf("next waiter's Acquire returned (%v) while the adopted Lock holds", n.err)
	default:
	}
	if err := l.Release(ctx(t)); err != nil {
		t.Fatalf("Release(adopted) = %v, want nil", err)
	}
	if n := await(t, nc, ttl, "next"); n.err != nil {
		t.Fatalf("next: Acquire = %v, want nil", n.err)
	}
}

// Review of issue 24, liveness: Acquire's doc says "An entry an earlier call
// of this session left is deleted and the call queues at the back", and a
// lock key an earlier call left is handled so (leftoverAt, cleanNow, try
// again). But when the left entry has become the grant, enqueue returns a
// HeldError naming this very session at once, although the entry is one the
// session's clean-up is deleting (no Lock, no Adopt): the blocking Acquire
// fails instead of queuing. Here the first deletes are lost; once they get
// through, the Acquire must queue behind the waiter that came after the left
// entry and take the lock after it.
func TestReviewReacquireAfterLeftEntryBecameGrant(t *testing.T) {
	const ttl = 2 * time.Second
	lg := leaveGrantBehind(t)
	s, drop, nc := lg.s, lg.drop, lg.next

	ac := acquireAsync(t, s, "k", "w again")
	time.Sleep(300 * time.Millisecond)
	drop.disarm()
	n := await(t, nc, ttl, "next")
	if n.err != nil {
		t.Fatalf("next: Acquire = %v, want nil once the left entry is deleted", n.err)
	}
	select {
	case a := <-ac:
		t.Fatalf("Acquire again = %v (lock %v) while next holds, want it queued behind next", a.err, a.l)
	case <-time.After(200 * time.Millisecond):
	}
	if err := n.l.Release(ctx(t)); err != nil {
		t.Fatalf("Release(next) = %v, want nil", err)
	}
	if a := await(t, ac, ttl, "w again"); a.err != nil {
		t.Fatalf("Acquire again = %v, want the lock after next", a.err)
	}
}

// Review of issue 24, safety probe (passes): a ForceRelease that applies
// between the release that made w's entry the grant and w's read of that
// revision. w learns the grant from history (lookAt, serializable, at the
// release's revision) after its entry was already deleted by the
// ForceRelease; its Lock, if it gets one, must end before the next waiter
// can start: the next waiter waits out the lock-delay, counted from after the
// ForceRelease's delete, and w's validity counts from a send time before it.
func TestReviewForceReleaseBeforeWaiterReadsHistory(t *testing.T) {
	const ttl = 2 * time.Second
	e := newEnv(t)
	eng := e.engine(e.cli)
	h, err := e.session(eng, ttl).TryAcquire(ctx(t), "k", "holder")
	if err != nil {
		t.Fatalf("TryAcquire = %v, want nil", err)
	}
	gate := etcdtest.NewGate()
	ws := e.session(e.engine(e.srv.Client(t, gate.DialOptions()...)), ttl)
	wc := acquireAsync(t, ws, "k", "w")
	waiters(t, eng, "k", 1)
	nc := acquireAsync(t, e.session(eng, ttl), "k", "next")
	waiters(t, eng, "k", 2)
	time.Sleep(100 * time.Millisecond) // both sit in their watches

	gate.Stall("Txn") // w's read of the release's revision waits here
	t.Cleanup(func() { gate.Unstall("Txn") })
	if err := h.Release(ctx(t)); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	time.Sleep(100 * time.Millisecond)
	g := holding(t, eng, "k")
	if g.Holder != "w" {
		t.Fatalf("Inspect after the release = %+v, want w's entry as the grant", g)
	}
	if err := eng.ForceRelease(ctx(t), "k", g.Token); err != nil {
		t.Fatalf("ForceRelease(w's entry, %d) = %v, want nil", g.Token, err)
	}
	forced := time.Now()
	gate.Unstall("Txn")

	a := await(t, wc, 2*ttl, "w")
	var wUntil time.Time
	if a.err == nil {
		wUntil = a.l.ValidUntil() // before the loss is noticed, this is the most it claims
		waitClosed(t, a.l.Done(), ttl, "w's Lock Done (its entry was force-released)")
	}
	n := await(t, nc, 4*ttl, "next")
	if n.err != nil {
		t.Fatalf("next: Acquire = %v, want nil", n.err)
	}
	got := time.Now()
	if d := got.Sub(forced); d < ttl {
		t.Fatalf("next acquired %v after the ForceRelease, want at least the TTL %v", d, ttl)
	}
	if a.err == nil && !wUntil.Before(got) {
		t.Fatalf("w's Lock valid until %v, after next acquired at %v", wUntil, got)
	}
	t.Logf("w: lock %v err %v, valid until %v; next acquired %v after the ForceRelease",
		a.l != nil, a.err, wUntil.Sub(forced), got.Sub(forced))
}

// Review of issue 24, safety (tokens): a rolling upgrade. In HA mode the
// chart runs two or more replicas with a RollingUpdate, so replicas of the
// version before issue 24 (bf385f7) and of this one queue for the election
// key at once. The old version's waiter, once it is the oldest, takes the
// lock with its own write: If(lock key absent, tombstone absent, own entry,
// every entry's CreateRevision >= its own) Then(Put(lock key), Delete(own
// entry)). That creates a lock key while newer entries queue, which this
// version's rule assumes never happens ("a lock key is created only while
// nobody queues"): the new waiter behind it later gets its entry's
// CreateRevision as token, which is BELOW the old holder's. For the election
// that is an epoch regression: status.controllerEpoch may not decrease, and
// the controller reports TokenRegression and grants nothing.
//
// The old replica is replayed here by its exact transactions (enqueue, then
// bf385f7's grabTxn for a queued waiter, then its guarded release).
func TestReviewRollingUpgradeTokensGrow(t *testing.T) {
	const ttl = 2 * time.Second
	e := newEnv(t)
	eng := e.engine(e.cli)
	first, err := e.session(eng, ttl).TryAcquire(ctx(t), "k", "first")
	if err != nil {
		t.Fatalf("TryAcquire = %v, want nil", err)
	}

	// The old replica queues (its enqueue: one entry on its own lease).
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
	lockPath, tomb, qdir := eng.Path("k"), prefix(t)+"/tombstones/k", prefix(t)+"/queue/k/"
	entry := fmt.Sprintf("%s%016x", qdir, int64(lg.ID))
	q, err := e.cli.Txn(ctx(t)).
		If(clientv3.Compare(clientv3.CreateRevision(entry), "=", 0)).
		Then(clientv3.OpPut(entry, `{"holder":"old"}`, clientv3.WithLease(lg.ID))).Commit()
	if err != nil || !q.Succeeded {
		t.Fatalf("old replica's enqueue = %v (err %v), want applied", q, err)
	}
	oldRev := q.Header.Revision

	// A replica of this version queues behind it.
	nc := acquireAsync(t, e.session(eng, ttl), "k", "new")
	waiters(t, eng, "k", 2)

	// The holder releases; the old replica, now the oldest, takes the lock
	// as its version does.
	if err := first.Release(ctx(t)); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	g, err := e.cli.Txn(ctx(t)).If(
		clientv3.Compare(clientv3.CreateRevision(lockPath), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(tomb), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(entry), "=", oldRev),
		clientv3.Compare(clientv3.CreateRevision(qdir), ">", oldRev-1).WithPrefix(),
	).Then(
		clientv3.OpPut(lockPath, `{"holder":"old"}`, clientv3.WithLease(lg.ID)),
		clientv3.OpDelete(entry),
	).Commit()
	if err != nil || !g.Succeeded {
		t.Fatalf("old replica's grab = %v (err %v), want applied (it is the oldest waiter)", g, err)
	}
	oldToken := g.Header.Revision
	if h := holding(t, eng, "k"); h.Token != oldToken || h.Holder != "old" {
		t.Fatalf("Inspect = %+v, want the old replica's lock key with token %d", h, oldToken)
	}
	time.Sleep(200 * time.Millisecond)

	// The old replica steps down (its rolling restart): its guarded delete.
	if r, err := e.cli.Txn(ctx(t)).If(clientv3.Compare(clientv3.CreateRevision(lockPath), "=", oldToken)).
		Then(clientv3.OpDelete(lockPath)).Commit(); err != nil || !r.Succeeded {
		t.Fatalf("old replica's release = %v (err %v), want applied", r, err)
	}
	n := await(t, nc, 2*ttl, "new")
	if n.err != nil {
		t.Fatalf("new replica's Acquire = %v, want nil", n.err)
	}
	if n.l.Token() <= oldToken {
		t.Fatalf("new replica's token = %d after the old replica's %d: tokens of one key went down (an epoch regression for the election)",
			n.l.Token(), oldToken)
	}
}
