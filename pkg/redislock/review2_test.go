package redislock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwarden/lockwarden/internal/redistest"
	"github.com/lockwarden/lockwarden/pkg/redislock"
)

// Review 2, finding 1. A TryAcquire whose request is delayed in the network
// (not lost) times out (ReadTimeout 1 s): ambiguous, so dropOrphan deletes by
// nonce on a fresh connection. That delete is answered ("0: not ours") before
// the delayed acquire reaches Redis. It used to be the end of the matter: the
// acquire then landed and granted a key nobody held, blocking the lock for a
// TTL. Required: the drop sets the nonce's tombstone, and the delayed
// request, once delivered, grants nothing (no key, the token not drawn).
func TestReview2TryAcquireDelayedRequestAfterDropGrantsNothing(t *testing.T) {
	e := newEnv(t, redistest.Config{})
	p, viaProxy := e.proxied()
	ca := e.locks(viaProxy, redislock.Config{TTL: 10 * time.Second})
	cb := e.locks(e.rdb, redislock.Config{TTL: 10 * time.Second})
	warmUp(t, ca)

	p.DelayTx(2500*time.Millisecond, 0) // this request arrives 2.5 s late
	res := make(chan error, 1)
	go func() {
		_, err := ca.TryAcquire(ctx(t), "k", "a")
		res <- err
	}()
	time.Sleep(200 * time.Millisecond)
	p.Heal() // later traffic (the drop, on a new connection) is not delayed
	err := <-res
	if err == nil {
		t.Fatal("TryAcquire with its request delayed past ReadTimeout = nil, want an error")
	}
	t.Logf("TryAcquire returned %v; key right after: %q", err, e.get(lockKey("k")))
	time.Sleep(2500 * time.Millisecond) // the delayed request lands
	eventually(t, 5*time.Second, "the delayed request delivered", func() bool { return p.Pending() == 0 })
	if n, _ := e.rdb.Get(ctx(t), tokenKey).Int64(); n != 0 {
		t.Errorf("token counter after the delayed request landed = %d, want 0 (refused before INCR by the tombstone)", n)
	}
	if v := e.get(lockKey("k")); v != "" {
		pttl, _ := e.rdb.PTTL(ctx(t), lockKey("k")).Result()
		_, berr := cb.TryAcquire(ctx(t), "k", "b")
		t.Errorf("after TryAcquire failed, its delayed request granted an orphan: key %q, PTTL %v, "+
			"B's TryAcquire = %v; want no key held (the drop's answer was taken as definite)", v, pttl, berr)
	}
}

// Review 2, finding 2. An Acquire waiter whose request is delayed gives up
// (ctx ends); leave removes it from the queue. The delayed request then
// lands while the lock is held; it used to re-enqueue the waiter ID with a
// fresh liveness key, a ghost at the head of the queue that took the wake
// and kept the free lock from everyone for a TTL. Required: leave sets the
// nonce's tombstone in the same script as it dequeues, and the delayed
// request queues nothing, so C gets the lock as soon as B releases it.
func TestReview2AcquireDelayedRequestAfterLeaveQueuesNothing(t *testing.T) {
	e := newEnv(t, redistest.Config{})
	p, viaProxy := e.proxied()
	ca := e.locks(viaProxy, redislock.Config{TTL: 10 * time.Second})
	cb := e.locks(e.rdb, redislock.Config{TTL: 10 * time.Second})
	cc := e.locks(e.rdb, redislock.Config{TTL: 10 * time.Second})
	warmUp(t, ca) // subscribes A's wake channel before the delay
	b := tryAcquire(t, cb, "k", "b")

	p.DelayTx(2500*time.Millisecond, 0)
	actx, cancel := context.WithTimeout(ctx(t), 600*time.Millisecond)
	defer cancel()
	res := make(chan error, 1)
	go func() {
		_, err := ca.Acquire(actx, "k", "a")
		res <- err
	}()
	time.Sleep(200 * time.Millisecond)
	p.Heal()
	err := <-res
	if err == nil {
		t.Fatal("Acquire = nil, want its ctx's error")
	}
	q, _ := e.rdb.LRange(ctx(t), "lockwarden:{k}:queue", 0, -1).Result()
	t.Logf("Acquire returned %v; queue right after leave: %v", err, q)
	time.Sleep(3 * time.Second) // the delayed request lands
	if err := b.Release(ctx(t)); err != nil {
		t.Fatalf("B Release = %v", err)
	}
	q, _ = e.rdb.LRange(ctx(t), "lockwarden:{k}:queue", 0, -1).Result()
	if _, err := cc.TryAcquire(ctx(t), "k", "c"); err != nil {
		t.Errorf("free lock after A's Acquire gave up: C TryAcquire = %v, queue %v; "+
			"want granted (A's delayed request re-enqueued a waiter that left)", err, q)
	}
}

// Review 2, finding 3. Release's first call is stuck (Tx blackholed) and
// its ctx ends: "possibly run". It never reached Redis. The key expires (the
// watchdog stopped at Release) and B takes it. A second Release used to find
// B's key and report success, since the release script answered 0 for "no
// key" and "another grant's key" alike. Required: the script tells them
// apart, and the second Release reports ErrNotHeld; success after a
// possibly-run attempt only when the key is gone.
func TestReview2ReleaseMaybeRanThenNotHeldWhenKeyIsAnothers(t *testing.T) {
	e := newEnv(t, redistest.Config{})
	p, viaProxy := e.proxied()
	cfg := redislock.Config{TTL: time.Second}
	ca := e.locks(viaProxy, cfg)
	cb := e.locks(e.rdb, cfg)
	warmUp(t, ca)
	a := tryAcquire(t, ca, "k", "a")

	p.BlackholeTx(true) // the release never reaches Redis
	rctx, cancel := context.WithTimeout(ctx(t), 300*time.Millisecond)
	err := a.Release(rctx)
	cancel()
	if err == nil {
		t.Fatal("first Release on a blackholed link = nil, want ctx error")
	}
	t.Logf("first Release: %v", err)
	eventually(t, 3*time.Second, "A's key expires", func() bool { return e.get(lockKey("k")) == "" })
	b := tryAcquire(t, cb, "k", "b")
	p.Heal()
	time.Sleep(1200 * time.Millisecond) // the stuck call times out (ReadTimeout 1 s)
	if !b.Valid() {
		t.Fatal("B not valid")
	}
	err = a.Release(ctx(t))
	if err == nil {
		t.Errorf("second Release = nil while the key is B's (token %d) and no release of A ever ran; "+
			"want ErrNotHeld (A's grant expired)", b.Token())
	} else if !errors.Is(err, redislock.ErrNotHeld) {
		t.Errorf("second Release = %v, want ErrNotHeld", err)
	}
	if v := e.get(lockKey("k")); !strings.Contains(v, " b") {
		t.Errorf("B's key after A's Release = %q, want B's", v)
	}
}

// Rule check: dropExpired deletes by the ended grant's nonce only. A's lock
// ends by its deadline (replies delayed); its delete travels late; A then
// takes the same key again on a fresh connection; the late delete of the old
// nonce must not touch the new grant, and the new Lock stays valid.
func TestReview2DropExpiredSparesNewGrantOfSameClient(t *testing.T) {
	e := newEnv(t, redistest.Config{})
	p, viaProxy := e.proxied()
	cfg := redislock.Config{TTL: 2 * time.Second}
	ca := e.locks(viaProxy, cfg)
	warmUp(t, ca)
	a1 := tryAcquire(t, ca, "k", "a")
	p.DelayRx(3*time.Second, 0) // renewals run, their replies come too late
	select {
	case <-a1.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("A1 not lost within 5 s")
	}
	if !errors.Is(a1.Err(), redislock.ErrExpired) {
		t.Fatalf("A1.Err() = %v, want ErrExpired", a1.Err())
	}
	// The expiry delete is out now; let it be answered, then the key is free.
	p.Heal()
	eventually(t, 5*time.Second, "A1's key deleted or expired", func() bool { return e.get(lockKey("k")) == "" })
	time.Sleep(1500 * time.Millisecond) // let delayed replies drain from old connections
	a2 := tryAcquire(t, ca, "k", "a")
	time.Sleep(2 * time.Second) // several renewals of A2
	if v := e.get(lockKey("k")); !a2.Valid() || !strings.Contains(v, " "+strconv.FormatInt(a2.Token(), 10)+" ") {
		t.Errorf("A2 valid %v, key %q: want A2's grant untouched", a2.Valid(), e.get(lockKey("k")))
	}
	if a2.Token() <= a1.Token() {
		t.Errorf("A2 token %d <= A1 token %d", a2.Token(), a1.Token())
	}
}

// Review 2, finding 4a. WaitTimeout (1.5 s) above the redis client's
// ReadTimeout (1 s) and no replica: the WAIT used to go in a pipeline read
// with ReadTimeout, so the acquire failed with the client's i/o timeout
// after 1 s. On a *redis.Client the WAIT is now a command of its own on the
// script's connection, read with WaitTimeout + 10 s: TryAcquire reports how
// many replicas confirmed within WaitTimeout, and the grant is deleted.
func TestReview2WaitTimeoutAboveReadTimeoutReportsReplicaCount(t *testing.T) {
	e := newEnv(t, redistest.Config{})
	c := e.locks(e.rdb, redislock.Config{TTL: 10 * time.Second, WaitReplicas: 1, WaitTimeout: 1500 * time.Millisecond})
	start := time.Now()
	_, err := c.TryAcquire(ctx(t), "k", "a")
	took := time.Since(start)
	if err == nil {
		t.Fatal("TryAcquire with no replica = nil, want ErrNotReplicated")
	}
	t.Logf("TryAcquire after %v: %v", took, err)
	if v := e.get(lockKey("k")); v != "" {
		t.Errorf("key after the failed WAIT = %q, want none", v)
	}
	if strings.Contains(err.Error(), "timeout") && !strings.Contains(err.Error(), "replicas confirmed") {
		t.Errorf("error = %v after %v: the WAIT (timeout %v) was cut by the client's ReadTimeout (1 s); "+
			"want \"0 of 1 replicas confirmed within 1.5s\"", err, took, 1500*time.Millisecond)
	}
}

// Review 2, finding 4b. When the WAIT's read timed out, go-redis set that
// error on every command of the pipeline, the script's too (setCmdsErr), so
// the acquire was taken as ambiguous: Acquire retried with the same nonce
// ("granted earlier"), WAITed again, until its ctx ended, keeping a grant
// nobody held. Required: one WAIT, then ErrNotReplicated with the grant
// deleted, so that B is not blocked by a key nobody holds.
func TestReview2AcquireWaitTimeoutFailsOnceWithoutHoldingGrant(t *testing.T) {
	e := newEnv(t, redistest.Config{})
	c := e.locks(e.rdb, redislock.Config{TTL: 10 * time.Second, WaitReplicas: 1, WaitTimeout: 1500 * time.Millisecond})
	cb := e.locks(e.rdb, redislock.Config{TTL: 10 * time.Second})
	actx, cancel := context.WithTimeout(ctx(t), 6*time.Second)
	defer cancel()
	type result struct {
		err  error
		took time.Duration
	}
	res := make(chan result, 1)
	start := time.Now()
	go func() {
		_, err := c.Acquire(actx, "k", "a")
		res <- result{err, time.Since(start)}
	}()
	time.Sleep(3500 * time.Millisecond)
	v := e.get(lockKey("k"))
	_, berr := cb.TryAcquire(ctx(t), "k", "b")
	r := <-res
	t.Logf("Acquire after %v: %v; at 3.5 s the key was %q and B's TryAcquire = %v", r.took, r.err, v, berr)
	if r.took > 3*time.Second {
		t.Errorf("Acquire with no replica returned after %v (its ctx's end), want ErrNotReplicated after one WAIT (~1.5 s)", r.took)
	}
	if !errors.Is(r.err, redislock.ErrNotReplicated) {
		t.Errorf("Acquire error = %v, want ErrNotReplicated", r.err)
	}
	if berr == nil {
		t.Log("B got the lock while A was retrying")
	} else if v != "" {
		t.Errorf("while A's Acquire retried, the key %q (nobody's Lock) blocked B: %v", v, berr)
	}
}

// Review 2, finding 4c. The documented defaults with a client that sets
// ContextTimeoutEnabled: CallTimeout and WaitTimeout are both TTL/4, and the
// step deadline used to be CallTimeout alone, so it always cut the WAIT's
// reply and Acquire looped holding the grant. The step deadline is now
// CallTimeout + WaitTimeout: one WAIT, then ErrNotReplicated.
func TestReview2AcquireWaitDefaultsWithContextTimeoutIsNotReplicated(t *testing.T) {
	e := newEnv(t, redistest.Config{})
	rdb := redis.NewClient(&redis.Options{Addr: e.srv.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	c := e.locks(rdb, redislock.Config{TTL: 4 * time.Second, WaitReplicas: 1}) // CallTimeout = WaitTimeout = 1 s
	actx, cancel := context.WithTimeout(ctx(t), 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err := c.Acquire(actx, "k", "a")
	took := time.Since(start)
	t.Logf("Acquire after %v: %v", took, err)
	if !errors.Is(err, redislock.ErrNotReplicated) || took > 3*time.Second {
		t.Errorf("Acquire with no replica (defaults, ContextTimeoutEnabled) = %v after %v; want ErrNotReplicated after one WAIT", err, took)
	}
}
