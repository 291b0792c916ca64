package lease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// Adversarial review of bury (queue.go) and leftover.keep (cleanup.go).

// tombstoneDropper fails, before sending, every Txn that puts a key under
// prefix while armed: the call tombstone's put (and so bury's settle) fails
// as in a network blip, and the leftovers go to the session's clean-up loop.
type tombstoneDropper struct {
	mu      sync.Mutex
	prefix  string
	dropped int
}

func (d *tombstoneDropper) arm(p string) { d.mu.Lock(); d.prefix = p; d.mu.Unlock() }
func (d *tombstoneDropper) disarm()      { d.mu.Lock(); d.prefix = ""; d.mu.Unlock() }
func (d *tombstoneDropper) count() int   { d.mu.Lock(); defer d.mu.Unlock(); return d.dropped }

func (d *tombstoneDropper) unary(c context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if r, ok := req.(*pb.TxnRequest); ok {
		d.mu.Lock()
		drop := false
		for _, op := range r.Success {
			if p := op.GetRequestPut(); d.prefix != "" && p != nil && strings.HasPrefix(string(p.Key), d.prefix) {
				drop = true
			}
		}
		if drop {
			d.dropped++
		}
		d.mu.Unlock()
		if drop {
			return status.Error(codes.Unavailable, "review: tombstone put dropped")
		}
	}
	return invoker(c, method, req, reply, cc, opts...)
}

// Question 1 of review mx2: a blocking Acquire succeeds after a lost answer
// (its join held in the network, its enqueue's entry the grant), and bury
// cannot put the tombstone (every put of it fails), so both of bury's
// leftovers go to the clean-up loop. The Lock is released, and the same
// session takes the key again with a new call, whose lock key sits at the
// path of the first call's lock leftover. When the clean-up loop gets
// through, it must leave the new Lock's key alone (the leftover's value
// carries the first call's ID), and the held join, landing last, must create
// nothing (the tombstone exists by then).
func TestReviewMx2BuryRetryAfterReleaseSparesNewLock(t *testing.T) {
	e := newEnv(t)
	eng := e.engine(e.cli)
	d, drop := &delayer{}, &tombstoneDropper{}
	ws := e.session(e.engine(e.srv.Client(t, grpc.WithChainUnaryInterceptor(drop.unary, d.unary))), 4*time.Second)
	h, err := e.session(eng, 10*time.Second).Acquire(ctx(t), "mx", "h")
	if err != nil {
		t.Fatalf("Acquire(h) = %v", err)
	}
	d.arm(prefix(t) + "/locks/") // the join's Then puts the lock key: held back
	wc := acquireAsync(t, ws, "mx", "w1")
	waiters(t, eng, "mx", 1) // the join timed out, the enqueue queued
	holdFirst(d)             // later puts of the lock key pass
	if d.count() != 1 {
		t.Fatalf("held transactions = %d, want the join's 1 (the premise)", d.count())
	}
	drop.arm(prefix(t) + "/gone/")
	if err := h.Release(ctx(t)); err != nil {
		t.Fatalf("Release(h) = %v", err)
	}
	a := await(t, wc, 5*time.Second, "w1")
	if a.err != nil {
		t.Fatalf("w1: Acquire = %v, want the lock (the premise)", a.err)
	}
	if drop.count() == 0 {
		t.Fatalf("no tombstone put dropped: bury's settle got through (the premise)")
	}
	if err := a.l.Release(ctx(t)); err != nil {
		t.Fatalf("Release(w1) = %v", err)
	}
	l2, err := ws.Acquire(ctx(t), "mx", "w2")
	if err != nil {
		t.Fatalf("Acquire(w2) = %v, want the lock", err)
	}
	if l2.Path() != eng.Path("mx") {
		t.Fatalf("w2's Lock at %s, want the lock key %s (the premise: the first call's lock leftover's path)", l2.Path(), eng.Path("mx"))
	}
	before := drop.count()
	time.Sleep(500 * time.Millisecond) // clean-up rounds still failing
	if drop.count() == before {
		t.Fatalf("the clean-up loop retried no tombstone put (the premise: bury's leftovers handed over)")
	}
	drop.disarm()
	time.Sleep(time.Second) // the clean-up retries every TTL/20 and gets through
	d.release()             // the first call's held join lands now
	got, err := e.cli.Get(ctx(t), eng.Path("mx"))
	if err != nil || len(got.Kvs) != 1 || got.Kvs[0].CreateRevision != l2.Token() {
		t.Fatalf("lock key after the clean-up and the held join = %v (err %v), want w2's with token %d", got, err, l2.Token())
	}
	if !l2.Valid() {
		t.Fatalf("w2's Lock not valid after the clean-up: %v", l2.Err())
	}
	gone, err := e.cli.Get(ctx(t), prefix(t)+"/gone/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || gone.Count != 1 {
		t.Fatalf("call tombstones = %v (err %v), want the first call's 1", gone, err)
	}
	if err := l2.Release(ctx(t)); err != nil {
		t.Fatalf("Release(w2) = %v", err)
	}
	freeAfterLanding(t, e, ws, "mx", "ws's lease after both Releases")
}

// Question 1 of review mx2, the Lock's own key: a blocking Acquire succeeds
// by a retried lean grab after its first grab was held in the network, and
// bury cannot put the tombstone, so its leftover at the Lock's own path (the
// lock key, with the call's value) goes to the clean-up loop. The Lock then
// lapses (ownership checks stall; the session lives), so no live Lock tracks
// the key any more: when the clean-up gets through, only leftover.keep tells
// the Lock's own grant from a key the call's late write created. The key must
// stay for Adopt (doc.go), and the held grab, landing last, creates nothing.
func TestReviewMx2BuryRetryAfterLapseKeepsLapsedLock(t *testing.T) {
	const ttl = 4 * time.Second
	e := newEnv(t)
	eng := e.engine(e.cli)
	d, drop, gate := &delayer{}, &tombstoneDropper{}, etcdtest.NewGate()
	opts := append(gate.DialOptions(), grpc.WithChainUnaryInterceptor(drop.unary, d.unary))
	ws := e.session(e.engine(e.srv.Client(t, opts...)), ttl)
	drop.arm(prefix(t) + "/gone/")
	a := acquireHoldingLeanGrab(t, ws, d, "w1")
	if d.count() != 1 || drop.count() == 0 {
		t.Fatalf("held grabs = %d, dropped tombstone puts = %d, want 1 and some (the premise)", d.count(), drop.count())
	}
	l1 := a.l
	if l1.Path() != eng.Path("mx") {
		t.Fatalf("w1's Lock at %s, want the lock key (the premise)", l1.Path())
	}
	gate.Stall("Txn", "Watch") // ownership checks stall; renewals go on
	t.Cleanup(func() { gate.Unstall("Txn", "Watch") })
	waitClosed(t, l1.Done(), 2*ttl, "w1's Lock Done")
	if !errors.Is(l1.Err(), lease.ErrExpired) || !ws.Valid() {
		t.Fatalf("w1's Lock Err() = %v, session valid %v; want ErrExpired, true (the premise)", l1.Err(), ws.Valid())
	}
	drop.disarm()
	gate.Unstall("Txn", "Watch")
	eventually(t, 2*ttl, func() error {
		gone, err := e.cli.Get(ctx(t), prefix(t)+"/gone/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil || gone.Count != 1 {
			return fmt.Errorf("call tombstones = %v (err %w), want the first call's 1", gone, err)
		}
		return nil
	})
	time.Sleep(500 * time.Millisecond) // the clean-up's read and delete after its tombstone
	got, err := e.cli.Get(ctx(t), eng.Path("mx"))
	if err != nil || len(got.Kvs) != 1 || got.Kvs[0].CreateRevision != l1.Token() {
		t.Fatalf("lock key after the clean-up got through = %v (err %v), want the lapsed Lock's with token %d, kept for Adopt", got, err, l1.Token())
	}
	d.release() // the held first grab lands now: the tombstone refuses it
	adopted, err := ws.Adopt(ctx(t), "mx", l1.Token())
	if err != nil {
		t.Fatalf("Adopt of the lapsed Lock's key = %v, want the lock", err)
	}
	if err := adopted.Release(ctx(t)); err != nil {
		t.Fatalf("Release(adopted) = %v", err)
	}
	if ks, _ := withoutTombstones(t, leaseKeys(t, e.cli, ws.ID())); len(ks) != 0 {
		t.Errorf("keys on ws's lease after the adopted Lock's Release = %q, want none", ks)
	}
}

// manyGuardsOpt returns a WithGuard of n compares that hold.
func manyGuardsOpt(t *testing.T, n int) lease.LockOption {
	cmps := make([]clientv3.Cmp, n)
	for i := range cmps {
		cmps[i] = clientv3.Compare(clientv3.CreateRevision(prefix(t)+"/none"), "=", 0)
	}
	return lease.WithGuard(cmps...)
}

// Questions 3 and 4 of review mx2: an outrun waiter's live regrant (rolling
// upgrade) carries the call's tombstone compare, five engine compares in all;
// with the most guards lockConfig accepts (123 at etcd's default 128) etcd
// applies it, and it takes the lock with a token above the old replica's.
func TestReviewMx2LiveRegrantWithMostGuards(t *testing.T) {
	const ttl = 6 * time.Second
	e := newEnv(t)
	eng := e.engine(e.cli)
	first, err := e.session(eng, ttl).TryAcquire(ctx(t), "k", "first")
	if err != nil {
		t.Fatalf("TryAcquire = %v, want nil", err)
	}
	old := queueOld(t, e, ttl)
	ws := e.session(eng, ttl)
	wc := acquireAsync(t, ws, "k", "w", manyGuardsOpt(t, 123))
	waiters(t, eng, "k", 2) // the old replica's entry, then ws's
	if err := first.Release(ctx(t)); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	old.grab(eng)
	time.Sleep(200 * time.Millisecond) // ws reads the lock key (outrun) and waits on it
	old.release(eng)
	a := await(t, wc, ttl, "w")
	if a.err != nil {
		t.Fatalf("w: Acquire with 123 guards, outrun = %v, want the lock by regrant", a.err)
	}
	if a.l.Path() != eng.Path("k") || a.l.Token() <= old.token {
		t.Fatalf("w's Lock at %s with token %d, want the lock key %s (regrant) with a token above the old replica's %d", a.l.Path(), a.l.Token(), eng.Path("k"), old.token)
	}
	if err := a.l.Release(ctx(t)); err != nil {
		t.Fatalf("Release(w) = %v", err)
	}
}

// Question 4 of review mx2: one guard above the limit (124 with the engine's
// 5 compares) is refused as ErrInvalid by every call that takes guards,
// before anything is sent; the limit itself is accepted and etcd applies it.
// A slot's grant carries the guards twice (its compares, and the Else
// branch's nested transaction that tells a guard's failure apart), and etcd
// (v3rpc checkTxnRequest) checks the nested transaction against what the
// outer one's 8+g compares left: 2g+8 <= 128, so 60 guards at most. More,
// up to the 118 acquireSlot accepted, reached etcd and were refused there
// (ErrTooManyOps, not ErrInvalid), after AcquireSlot had queued.
func TestReviewMx2GuardLimitRefusedUpFront(t *testing.T) {
	const ttl = 4 * time.Second
	e := newEnv(t)
	gate := etcdtest.NewGate()
	eng := e.engine(e.srv.Client(t, gate.DialOptions()...))
	s := e.session(eng, ttl)
	over, semOver := manyGuardsOpt(t, 124), manyGuardsOpt(t, 61)
	for _, tc := range []struct {
		name string
		call func(context.Context) error
	}{
		{"TryAcquire", func(c context.Context) error { _, err := s.TryAcquire(c, "a", "h", over); return err }},
		{"Acquire", func(c context.Context) error { _, err := s.Acquire(c, "b", "h", over); return err }},
		{"Grant", func(c context.Context) error { _, err := s.Grant(c, "c", "h", over); return err }},
		{"GrantBatch", func(c context.Context) error {
			_, err := s.GrantBatch(c, []lease.GrantRequest{{Key: "d", Holder: "h"}}, over)
			return err
		}},
		{"AcquireSlot", func(c context.Context) error { _, err := s.AcquireSlot(c, "e", "h", 2, semOver); return err }},
		{"TryAcquireSlot", func(c context.Context) error { _, err := s.TryAcquireSlot(c, "f", "h", 2, semOver); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sent := gate.Count("Txn")
			if err := tc.call(ctx(t)); !errors.Is(err, lease.ErrInvalid) {
				t.Fatalf("%s with one guard too many = %v, want ErrInvalid", tc.name, err)
			}
			if got := gate.Count("Txn") - sent; got != 0 {
				t.Fatalf("transactions sent for a refused guard count = %d, want 0", got)
			}
		})
	}
	most, semMost := manyGuardsOpt(t, 123), manyGuardsOpt(t, 60)
	if l, err := s.TryAcquire(ctx(t), "a", "h", most); err != nil {
		t.Errorf("TryAcquire with 123 guards = %v, want the lock", err)
	} else if err := l.Release(ctx(t)); err != nil {
		t.Errorf("Release = %v", err)
	}
	if l, err := s.Acquire(ctx(t), "b", "h", most); err != nil {
		t.Errorf("Acquire with 123 guards = %v, want the lock", err)
	} else if err := l.Release(ctx(t)); err != nil {
		t.Errorf("Release = %v", err)
	}
	if _, err := s.Grant(ctx(t), "c", "h", most); err != nil {
		t.Errorf("Grant with 123 guards = %v, want a token", err)
	}
	if l, err := s.AcquireSlot(ctx(t), "e", "h", 2, semMost); err != nil {
		t.Errorf("AcquireSlot with 60 guards = %v, want a slot", err)
	} else if err := l.Release(ctx(t)); err != nil {
		t.Errorf("Release(slot) = %v", err)
	}
	if l, err := s.TryAcquireSlot(ctx(t), "f", "h", 2, semMost); err != nil {
		t.Errorf("TryAcquireSlot with 60 guards = %v, want a slot", err)
	} else if err := l.Release(ctx(t)); err != nil {
		t.Errorf("Release(slot) = %v", err)
	}
}
