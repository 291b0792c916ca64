package redislock_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwarden/lockwarden/internal/redistest"
	"github.com/lockwarden/lockwarden/pkg/redislock"
)

// Review 4 (issue 24, the handoff in the release script), finding 1
// (liveness). Close makes its blocked Acquire calls return ErrClosed, but
// does not wait for them to leave the queue: their leave runs on the
// caller's goroutine, after its current request returns, and Close counts
// only its own goroutines. A program that shuts down (Close, then the redis
// client's Close, then exit) while a worker is blocked in Acquire can leave
// that waiter queued with a live liveness key. Since issue 24 the next
// release grants the lock to that waiter in its own script (a token drawn,
// the key set for the waiter's TTL), and everyone behind it waits a TTL.
//
// Here the waiter's refresh is in flight when Close is called: its
// requests are delayed by 300 ms on the way to Redis, and a wake-up makes
// it look again just before (its own RenewInterval timer does the same,
// every TTL/3). Close returns at once; the program then closes its redis
// client, so the leave that would have run after the refresh never
// reaches Redis.
func TestReview4CloseReturnsBeforeItsWaiterLeft(t *testing.T) {
	e := newEnv(t, redistest.Config{})
	cfg := redislock.Config{TTL: 4 * time.Second}
	holders := e.locks(e.rdb, cfg)
	others := e.locks(e.rdb, cfg)
	wp, wrdb := e.proxied()
	cw := e.locks(wrdb, cfg)
	warmUp(t, cw) // subscribed, scripts loaded

	h := tryAcquire(t, holders, "k", "holder")
	gone := make(chan error, 1)
	go func() {
		_, err := cw.Acquire(context.Background(), "k", "closer")
		gone <- err
	}()
	eventually(t, 2*time.Second, "closer queued", func() bool { return e.rdb.LLen(ctx(t), queueKey).Val() == 1 })
	id := e.rdb.LIndex(ctx(t), queueKey, 0).Val()
	clientID, _, _ := strings.Cut(id, "/")
	got := e.queue(others, "next", 2)

	wp.DelayTx(300*time.Millisecond, 0)
	if err := e.rdb.Publish(ctx(t), "lockwarden:wake:"+clientID, id).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the closer's refresh is on its way

	cctx, cancel := context.WithTimeout(ctx(t), 5*time.Second)
	defer cancel()
	start := time.Now()
	cerr := cw.Close(cctx)
	took := time.Since(start)
	_ = wrdb.Close() // the program's shutdown: its redis client, then exit
	queued := e.rdb.LRange(ctx(t), queueKey, 0, -1).Val()
	t.Logf("Close = %v after %v; queue right after: %v", cerr, took, queued)
	if slices.Contains(queued, id) {
		t.Errorf("Close returned (%v, after %v) while its waiter %s was still queued (queue %v): "+
			"want Close to return only once its blocked Acquire calls have left", cerr, took, id, queued)
	}

	releaseToNext(t, e, h, got, cfg.TTL, "a closed client's waiter")
	if err := <-gone; err == nil {
		t.Error("the closed client's Acquire = nil, want ErrClosed")
	}
}

// Review 4, finding 2 (liveness). The wake subscription's dispatcher (new
// in issue 24, wake.go) pings a silent subscription every 3 s and counts on
// "a write on a broken connection fails, and go-redis then reconnects".
// A connection that is dead without a reset (a half-open TCP connection:
// a peer or middlebox gone, a partition) accepts the write, so nothing
// ever fails: the Pong that never comes is not looked for. Every grant
// message is lost from then on, and every handoff to this client's waiters
// waits for the waiter's own poll (up to RenewInterval, 5 s at the default
// TTL) until the kernel gives up on the connection (tcp_retries2, about
// 15 minutes).
//
// Only the subscription's connection is cut here (a forwarder that
// discards its bytes both ways and keeps it open); the client's command
// connections work. After 3.5 health intervals the subscription should
// have been replaced and a handoff should take milliseconds again.
func TestReview4DeadWakeSubscriptionIsNeverReplaced(t *testing.T) {
	e := newEnv(t, redistest.Config{})
	fwd := startForwarder(t, e.srv.Addr())
	wrdb := redistest.ClientOf(t, fwd.addr())
	cfg := redislock.Config{TTL: 3 * time.Second} // RenewInterval 1 s
	holders := e.locks(e.rdb, cfg)
	cw := e.locks(wrdb, cfg)
	warmUp(t, cw) // subscribed

	handoff := func() time.Duration {
		t.Helper()
		h := tryAcquire(t, holders, "k", "holder")
		got := e.queue(cw, "waiter", 1)
		time.Sleep(100 * time.Millisecond)
		released := time.Now()
		if err := h.Release(ctx(t)); err != nil {
			t.Fatal(err)
		}
		l := <-got
		took := time.Since(released)
		if l == nil {
			t.FailNow()
		}
		_ = l.Release(ctx(t))
		return took
	}
	if d := handoff(); d > 300*time.Millisecond {
		t.Fatalf("handoff with a working subscription took %v, want milliseconds", d)
	}

	sub := subscriberAddrs(t, e)
	if len(sub) != 1 {
		t.Fatalf("subscribed clients %v, want the waiter client's one", sub)
	}
	if !fwd.cut(sub[0]) {
		t.Fatalf("the subscription's connection %s does not go through the forwarder", sub[0])
	}
	time.Sleep(10500 * time.Millisecond) // 3.5 health intervals (3 s)
	d := handoff()
	t.Logf("subscribed clients after 10.5 s: %v (the cut one: %s); handoff took %v", subscriberAddrs(t, e), sub[0], d)
	if d > 300*time.Millisecond {
		t.Errorf("a handoff 10.5 s after the wake subscription's connection went dead took %v (the waiter's own poll): "+
			"the dispatcher's pings went unanswered and the subscription was never replaced; want milliseconds", d)
	}
}

// Review 4, finding 3 (cosmetic: a wrong error). go-redis resends a
// command whose connection broke after the write (io.EOF: its default
// MaxRetries is 3; the package's tests turn resends off). A Release whose
// script ran, handed the lock over and set the 'r' tombstone, and whose
// connection then broke, is resent by go-redis inside the one call
// releaseOnce makes: the resend finds the waiter's key and its own
// tombstone and answers releaseEarlier (2), which Release counts as
// success only after an attempt of its own that may have run
// (releaseMaybeRan). It returns ErrNotHeld, "the grant expired and was
// taken", for a lock it released itself. Before issue 24 the resend found
// the key gone (releaseAbsent, 0): the same wrong answer.
func TestReview4ReleaseResentByGoRedisIsNotHeld(t *testing.T) {
	e := newEnv(t, redistest.Config{})
	p := redistest.StartProxy(t, e.srv.Addr())
	hrdb := redis.NewClient(&redis.Options{Addr: p.Addr()}) // go-redis's defaults: MaxRetries 3
	t.Cleanup(func() { _ = hrdb.Close() })
	cfg := redislock.Config{TTL: 5 * time.Second}
	holders := e.locks(hrdb, cfg)
	waiters := e.locks(e.rdb, cfg)
	warmUp(t, holders) // the release script loaded: one EVALSHA
	h := tryAcquire(t, holders, "k", "holder")
	got := e.queue(waiters, "waiter", 1)

	p.BlackholeRx(true) // the release runs; its reply is lost
	res := make(chan error, 1)
	go func() { res <- h.Release(ctx(t)) }()
	eventually(t, 2*time.Second, "the release handed over", func() bool {
		return strings.HasSuffix(e.get(lockKey("k")), " waiter")
	})
	p.Heal()
	p.DropConnections() // go-redis reads EOF and resends the script
	err := <-res
	t.Logf("Release = %v; lock key %q, tombstones %v", err, e.get(lockKey("k")),
		e.rdb.Keys(ctx(t), "lockwarden:{k}:gone:*").Val())
	if err != nil {
		t.Errorf("Release = %v for a lock its own script released and handed over (go-redis resent the script "+
			"after the connection broke; the resend found its tombstone): want nil", err)
	}
	if l := <-got; l != nil {
		_ = l.Release(ctx(t))
	}
}

// Review 4, finding 4 (liveness). A waiter that gives up leaves in the drop
// script; dropOrphan retries it only when the outcome is ambiguous, and an
// error reply counts as definite. An error reply means the script did not
// run, though: a primary that answers READONLY for a moment (a failover
// flapping, a demoted node promoted again), LOADING, BUSY, OOM or
// MASTERDOWN leaves the waiter queued with a live liveness key, and since
// issue 24 the next release grants the lock to it in its own script, so
// everyone behind waits a TTL. Here the server is made a replica of an
// address nobody answers (it keeps its data and refuses writes) while the
// waiter leaves, and a primary again right after.
func TestReview4LeaveRefusedByErrorReplyIsNotRetried(t *testing.T) {
	e := newEnv(t, redistest.Config{})
	cfg := redislock.Config{TTL: 4 * time.Second}
	holders := e.locks(e.rdb, cfg)
	others := e.locks(e.rdb, cfg)
	cw := e.locks(e.srv.Client(t), cfg)
	warmUp(t, cw)
	h := tryAcquire(t, holders, "k", "holder")
	wctx, cancel := context.WithCancel(ctx(t))
	defer cancel()
	gone := make(chan error, 1)
	go func() {
		_, err := cw.Acquire(wctx, "k", "quitter")
		gone <- err
	}()
	eventually(t, 2*time.Second, "quitter queued", func() bool { return e.rdb.LLen(ctx(t), queueKey).Val() == 1 })
	id := e.rdb.LIndex(ctx(t), queueKey, 0).Val()
	got := e.queue(others, "next", 2)

	if err := e.rdb.Do(ctx(t), "REPLICAOF", "127.0.0.1", "1").Err(); err != nil {
		t.Fatal(err)
	}
	cancel()
	err := <-gone
	if err := e.rdb.Do(ctx(t), "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * cw.Config().TTL / 20) // a retry of the leave would have run by now
	queued := e.rdb.LRange(ctx(t), queueKey, 0, -1).Val()
	t.Logf("quitter's Acquire = %v; queue once the server is a primary again: %v", err, queued)
	if slices.Contains(queued, id) {
		t.Errorf("the waiter that gave up (%s) is still queued (%v): its leave met READONLY and was not retried", id, queued)
	}
	releaseToNext(t, e, h, got, cfg.TTL, "a waiter that gave up")
}

// releaseToNext releases h and fails the test unless the live waiter
// queued behind a departed one (who) gets the lock (on got) within a
// second, not after the TTL of a grant made to the departed waiter.
func releaseToNext(t *testing.T, e *env, h *redislock.Lock, got <-chan *redislock.Lock, ttl time.Duration, who string) {
	t.Helper()
	released := time.Now()
	if err := h.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	t.Logf("lock key right after the release: %q", e.get(lockKey("k")))
	select {
	case l := <-got:
		wait := time.Since(released)
		if l == nil {
			t.FailNow()
		}
		t.Logf("the live waiter behind %s got the lock %v after the release (token %d)", who, wait, l.Token())
		if wait > time.Second {
			t.Errorf("the live waiter behind %s got the lock %v after the release (TTL %v): "+
				"the release granted the lock to the departed waiter; want at once", who, wait, ttl)
		}
		_ = l.Release(ctx(t))
	case <-time.After(3 * ttl):
		t.Fatal("the live waiter never got the lock")
	}
}
