package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockwarden/lockwarden/internal/redistest"
	"github.com/lockwarden/lockwarden/pkg/redislock"
)

// queue starts c.Acquire of "k" for holder and returns once the queue holds
// n waiters; the Lock arrives on the channel (nil after an error, which
// fails the test).
func (e *env) queue(c *redislock.Client, holder string, n int64) <-chan *redislock.Lock {
	e.t.Helper()
	got := make(chan *redislock.Lock, 1)
	go func() {
		l, err := c.Acquire(ctx(e.t), "k", holder)
		if err != nil {
			e.t.Errorf("%s Acquire = %v", holder, err)
		}
		got <- l
	}()
	eventually(e.t, 2*time.Second, holder+" queued", func() bool { return e.rdb.LLen(ctx(e.t), queueKey).Val() == n })
	return got
}

// The release hands over in its own script: when Release returns, the key
// already holds the waiter's grant with the next token and the queue is
// empty, and the waiter holds the lock without another request of its own
// (before, the release deleted the key and the woken waiter acquired it
// with a second request).
func TestHandoffGrantsInRelease(t *testing.T) {
	e := newEnv(t, redistest.Config{})
	c := e.locks(e.rdb, redislock.Config{TTL: 6 * time.Second})
	wrdb, reqs := e.counted()
	cw := e.locks(wrdb, redislock.Config{TTL: 6 * time.Second})
	h := tryAcquire(t, c, "k", "holder")
	got := e.queue(cw, "waiter", 1)
	before := reqs.snapshot()
	if err := h.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	v := e.get(lockKey("k"))
	if f := strings.Fields(v); len(f) != 3 || f[1] != fmt.Sprint(h.Token()+1) || f[2] != "waiter" {
		t.Errorf("lock key right after Release = %q, want the waiter's grant with token %d", v, h.Token()+1)
	}
	if n := e.rdb.LLen(ctx(t), queueKey).Val(); n != 0 {
		t.Errorf("queue length right after Release = %d, want 0 (the waiter granted)", n)
	}
	var l *redislock.Lock
	select {
	case l = <-got:
	case <-time.After(2 * time.Second):
		t.Fatal("the waiter did not get the handed-over lock")
	}
	if l == nil {
		t.FailNow()
	}
	if l.Token() != h.Token()+1 || !l.Valid() {
		t.Errorf("waiter's lock: token %d, valid %v; want %d, valid", l.Token(), l.Valid(), h.Token()+1)
	}
	if after := reqs.snapshot(); sum(after) != sum(before) {
		t.Errorf("the waiter sent requests after the release: %v before, %v after; want none (the grant came with the release)", before, after)
	}
	if err := l.Release(ctx(t)); err != nil {
		t.Errorf("Release of the handed-over lock = %v", err)
	}
	if v := e.get(lockKey("k")); v != "" {
		t.Errorf("lock key after the last Release = %q, want none", v)
	}
}

// A waiter granted by someone else's release counts its validity from the
// send time of its own queue request, which came before the grant, not from
// the arrival of the message: the grant set the key's expiry to TTL from
// when it ran, and the message can arrive any time later.
func TestHandoffValidityCountsFromQueueRequest(t *testing.T) {
	e := newEnv(t, redistest.Config{})
	cfg := redislock.Config{TTL: 6 * time.Second} // margin 1.5 s, renew interval 2 s
	c := e.locks(e.rdb, cfg)
	cw := e.locks(e.rdb, cfg)
	warmUp(t, cw) // subscribed, scripts loaded: the queue request is one round trip
	h := tryAcquire(t, c, "k", "holder")
	asked := time.Now()
	got := e.queue(cw, "waiter", 1)
	queued := time.Now() // the queue request was sent before this
	time.Sleep(1200 * time.Millisecond)
	released := time.Now()
	if err := h.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	const noise = 30 * time.Millisecond // ValidUntil's projection onto the wall clock
	latest := queued.Add(6*time.Second - 1500*time.Millisecond)
	if vu := l.ValidUntil(); vu.After(latest.Add(noise)) || vu.Before(asked.Add(6*time.Second-1500*time.Millisecond-noise)) {
		t.Errorf("handed-over lock valid until %v after the release (TTL - margin %v from the release would be %v); "+
			"want at most %v after it, counted from the queue request sent before %v",
			vu.Sub(released), cfg.TTL-1500*time.Millisecond, 4500*time.Millisecond, latest.Sub(released), queued.Sub(released))
	}
	_ = l.Release(ctx(t))
}

// A dead waiter (its liveness key expired) ahead in the queue is skipped:
// the release hands the lock to the live one behind it.
func TestHandoffSkipsDeadWaiter(t *testing.T) {
	e := newEnv(t, redistest.Config{})
	c := e.locks(e.rdb, redislock.Config{TTL: 5 * time.Second})
	h := tryAcquire(t, c, "k", "holder")
	e.rdb.RPush(ctx(t), queueKey, "gone/1") // no liveness key: its waiter died
	got := e.queue(c, "live", 2)
	if err := h.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-got:
		if l == nil || l.Holder() != "live" || l.Token() != h.Token()+1 {
			t.Fatalf("live waiter got %v", l)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the live waiter behind a dead one was not handed the lock")
	}
	if n := e.rdb.LLen(ctx(t), queueKey).Val(); n != 0 {
		t.Errorf("queue length = %d, want 0 (the dead waiter dropped)", n)
	}
}

// A waiter whose liveness key holds no grant request (a client that only
// asks to be woken, as this package's earlier versions did) is woken by the
// release, and the lock stays free for it to take.
func TestReleaseWakesWaiterThatOnlyAsksToBeWoken(t *testing.T) {
	e := newEnv(t, redistest.Config{})
	c := e.locks(e.rdb, redislock.Config{TTL: 5 * time.Second})
	h := tryAcquire(t, c, "k", "holder")
	sub := e.rdb.Subscribe(ctx(t), "lockwarden:wake:other")
	defer sub.Close()
	if _, err := sub.Receive(ctx(t)); err != nil {
		t.Fatal(err)
	}
	e.rdb.RPush(ctx(t), queueKey, "other/1")
	e.rdb.Set(ctx(t), "lockwarden:{k}:w:other/1", "1", 5*time.Second)
	if err := h.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	m, err := sub.ReceiveMessage(ctx(t))
	if err != nil || m.Payload != "other/1" {
		t.Fatalf("wake message = %v, %v; want other/1", m, err)
	}
	if v := e.get(lockKey("k")); v != "" {
		t.Errorf("lock key after waking a wake-only waiter = %q, want free", v)
	}
	if n := e.rdb.LLen(ctx(t), queueKey).Val(); n != 1 {
		t.Errorf("queue length = %d, want 1 (the woken waiter keeps its place)", n)
	}
}

// With WaitReplicas, a waiter handed the lock by another client's release
// confirms the grant itself (a renewal and a WAIT on its connection): with
// the replica in sync it holds the lock, and the replica has the grant.
// With the replica cut off it fails with ErrNotReplicated, and its grant
// is ended again: the lock is free.
func TestHandoffWaitReplicas(t *testing.T) {
	e := newEnv(t, redistest.Config{})
	link := redistest.StartProxy(t, e.srv.Addr())
	replica := redistest.Start(t, redistest.Config{ReplicaOf: link.Addr()})
	rr := replica.Client(t)
	eventually(t, 10*time.Second, "replica in sync", func() bool {
		info, _ := rr.Info(ctx(t), "replication").Result()
		return strings.Contains(info, "master_link_status:up")
	})
	holders := e.locks(e.rdb, redislock.Config{TTL: 5 * time.Second})
	waiters := e.locks(e.rdb, redislock.Config{TTL: 5 * time.Second, WaitReplicas: 1, WaitTimeout: 3 * time.Second})
	handOff := func() (*redislock.Lock, error) {
		h := tryAcquire(t, holders, "k", "holder")
		type res struct {
			l   *redislock.Lock
			err error
		}
		got := make(chan res, 1)
		go func() { l, err := waiters.Acquire(ctx(t), "k", "waiter"); got <- res{l, err} }()
		eventually(t, 5*time.Second, "waiter queued", func() bool { return e.rdb.LLen(ctx(t), queueKey).Val() == 1 })
		if err := h.Release(ctx(t)); err != nil {
			t.Fatal(err)
		}
		r := <-got
		return r.l, r.err
	}
	l, err := handOff()
	if err != nil {
		t.Fatalf("handed-over Acquire with the replica in sync = %v", err)
	}
	if v, _ := rr.Get(ctx(t), lockKey("k")).Result(); !strings.Contains(v, " waiter") {
		t.Errorf("replica's lock key after the confirmed handoff = %q, want the waiter's grant", v)
	}
	if err := l.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	link.BlackholeTx(true)
	link.BlackholeRx(true)
	start := time.Now()
	_, err = handOff()
	if !errors.Is(err, redislock.ErrNotReplicated) {
		t.Fatalf("handed-over Acquire with the replica cut off = %v, want ErrNotReplicated", err)
	}
	t.Logf("handoff with the replica cut off failed after %v: %v", time.Since(start), err)
	if v := e.get(lockKey("k")); v != "" {
		t.Errorf("lock key after the unconfirmed handoff = %q, want the grant ended", v)
	}
}

// Many rounds of a holder releasing while its one waiter gives up: the
// waiter either returns the lock or leaves, and the leave ends a grant the
// release made to it and hands the lock on, so a third client always gets
// the lock at once, never after the TTL.
func TestHandoffRacesWaiterGivingUp(t *testing.T) {
	e := newEnv(t, redistest.Config{})
	cfg := redislock.Config{TTL: 10 * time.Second}
	ch, cw, cn := e.locks(e.rdb, cfg), e.locks(e.rdb, cfg), e.locks(e.rdb, cfg)
	warmUp(t, cw)
	warmUp(t, cn)
	var took, left atomic.Int32
	for i := range 40 {
		h := tryAcquire(t, ch, "k", "holder")
		wctx, cancel := context.WithCancel(ctx(t))
		res := make(chan *redislock.Lock, 1)
		go func() { l, _ := cw.Acquire(wctx, "k", "quitter"); res <- l }()
		eventually(t, 2*time.Second, "quitter queued", func() bool { return e.rdb.LLen(ctx(t), queueKey).Val() == 1 })
		next := make(chan *redislock.Lock, 1)
		go func() { l, _ := cn.Acquire(ctx(t), "k", "next"); next <- l }()
		eventually(t, 2*time.Second, "next queued", func() bool { return e.rdb.LLen(ctx(t), queueKey).Val() == 2 })
		go func() {
			time.Sleep(time.Duration(i%8) * 50 * time.Microsecond)
			cancel()
		}()
		if err := h.Release(ctx(t)); err != nil {
			t.Fatal(err)
		}
		if q := <-res; q != nil {
			took.Add(1)
			_ = q.Release(ctx(t))
		} else {
			left.Add(1)
		}
		select {
		case l := <-next:
			if l == nil {
				t.Fatalf("round %d: next waiter's Acquire failed", i)
			}
			_ = l.Release(ctx(t))
		case <-time.After(2 * time.Second):
			t.Fatalf("round %d: the waiter behind one that gave up did not get the lock within 2 s (TTL %v): "+
				"a grant made to the quitter was left standing", i, cfg.TTL)
		}
		cancel()
	}
	t.Logf("the quitter took the lock %d times and left %d times", took.Load(), left.Load())
}

// A queued entry whose grant request Redis would refuse (a TTL of 0: SET
// PX 0 fails, and a Lua error leaves the writes before it in place) is
// treated as a waiter that only asks to be woken: the release still
// releases, and the lock stays free.
func TestReleaseWithUnusableGrantRequestReleases(t *testing.T) {
	e := newEnv(t, redistest.Config{})
	c := e.locks(e.rdb, redislock.Config{TTL: 5 * time.Second})
	h := tryAcquire(t, c, "k", "holder")
	e.rdb.RPush(ctx(t), queueKey, "other/1")
	e.rdb.Set(ctx(t), "lockwarden:{k}:w:other/1", strings.Repeat("ab", 16)+" 1 0 w", 5*time.Second)
	if err := h.Release(ctx(t)); err != nil {
		t.Fatalf("Release with an unusable grant request queued = %v, want nil", err)
	}
	if v := e.get(lockKey("k")); v != "" {
		t.Errorf("lock key = %q, want free", v)
	}
}
