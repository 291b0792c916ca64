package redislock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockwarden/lockwarden/internal/redistest"
	"github.com/lockwarden/lockwarden/pkg/redislock"
)

func TestTryAcquireHeldAndTokens(t *testing.T) {
	e := newEnv(t, redistest.Config{})
	c := e.locks(e.rdb, redislock.Config{TTL: 2 * time.Second})
	a := tryAcquire(t, c, "k", "worker-a")
	if a.Token() != 1 || !a.Valid() || a.Holder() != "worker-a" {
		t.Fatalf("first grant: token %d valid %v holder %q, want 1 true worker-a", a.Token(), a.Valid(), a.Holder())
	}
	_, err := c.TryAcquire(ctx(t), "k", "worker-b")
	var he *redislock.HeldError
	if !errors.As(err, &he) || !errors.Is(err, redislock.ErrLocked) || he.Holder != "worker-a" || he.Token != 1 || he.Left <= 0 {
		t.Fatalf("TryAcquire(held) = %v, want *HeldError{worker-a, 1, Left > 0}", err)
	}
	if err := a.Release(ctx(t)); err != nil {
		t.Fatalf("Release() = %v, want nil", err)
	}
	if a.Valid() || !closed(a.Done()) || !errors.Is(a.Err(), redislock.ErrReleased) || a.Context().Err() == nil {
		t.Errorf("after Release: Valid %v, Done closed %v, Err %v, ctx %v; want false, true, ErrReleased, cancelled",
			a.Valid(), closed(a.Done()), a.Err(), a.Context().Err())
	}
	if v := e.get(lockKey("k")); v != "" {
		t.Errorf("lock key after Release = %q, want gone", v)
	}
	prev := a.Token()
	for i := range 5 {
		l := tryAcquire(t, c, "k", "worker-b")
		if l.Token() <= prev {
			t.Fatalf("grant %d: token %d, want above %d", i, l.Token(), prev)
		}
		prev = l.Token()
		if err := l.Release(ctx(t)); err != nil {
			t.Fatalf("Release() = %v", err)
		}
	}
	// A second Release of one grant says the key is not this grant's.
	if err := a.Release(ctx(t)); !errors.Is(err, redislock.ErrNotHeld) {
		t.Errorf("second Release() = %v, want ErrNotHeld", err)
	}
}

// The watchdog keeps a lock past its TTL, and Valid follows the renewals.
func TestRenewalKeepsLock(t *testing.T) {
	e := newEnv(t, redistest.Config{})
	c := e.locks(e.rdb, redislock.Config{TTL: 600 * time.Millisecond, Margin: 100 * time.Millisecond})
	l := tryAcquire(t, c, "k", "w")
	first := l.ValidUntil()
	time.Sleep(1500 * time.Millisecond) // 2.5 TTLs: only renewals keep it
	if !l.Valid() || l.Err() != nil {
		t.Fatalf("after 2.5 TTLs: Valid %v Err %v, want true nil", l.Valid(), l.Err())
	}
	if !l.ValidUntil().After(first.Add(time.Second)) { // renewed: about 1.2 s later
		t.Errorf("ValidUntil %v, want after the first %v", l.ValidUntil(), first)
	}
	if v := e.get(lockKey("k")); !strings.HasSuffix(v, " 1 w") {
		t.Errorf("lock value %q, want this grant's", v)
	}
	pttl, _ := e.rdb.PTTL(ctx(t), lockKey("k")).Result()
	if pttl <= 0 || pttl > 600*time.Millisecond {
		t.Errorf("PTTL = %v, want in (0, 600ms]", pttl)
	}
}

// A renewal that finds the key gone, or someone else's, ends the lock at
// once and creates or extends nothing.
func TestRenewalAfterExpiry(t *testing.T) {
	e := newEnv(t, redistest.Config{})
	c := e.locks(e.rdb, redislock.Config{TTL: 900 * time.Millisecond, Margin: 100 * time.Millisecond})
	a := tryAcquire(t, c, "k", "a")
	// The key is deleted behind A's back and B takes the lock with its own TTL.
	if err := e.rdb.Del(ctx(t), lockKey("k")).Err(); err != nil {
		t.Fatal(err)
	}
	other := e.locks(e.rdb, redislock.Config{TTL: 5 * time.Second})
	b := tryAcquire(t, other, "k", "b")
	select {
	case <-a.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("A's Done did not close after its key was taken")
	}
	if !errors.Is(a.Err(), redislock.ErrNotHeld) || a.Valid() {
		t.Errorf("A: Err %v Valid %v, want ErrNotHeld false", a.Err(), a.Valid())
	}
	if pttl, _ := e.rdb.PTTL(ctx(t), lockKey("k")).Result(); pttl <= 900*time.Millisecond {
		t.Errorf("B's PTTL = %v, want above A's TTL (A's renewal must not touch it)", pttl)
	}
	if !b.Valid() || b.Token() != a.Token()+1 {
		t.Errorf("B: Valid %v token %d, want true %d", b.Valid(), b.Token(), a.Token()+1)
	}
	// A renewal of a key that expired creates nothing.
	_ = b.Release(ctx(t))
	c2 := e.locks(e.rdb, redislock.Config{TTL: 900 * time.Millisecond, Margin: 100 * time.Millisecond})
	d := tryAcquire(t, c2, "k2", "d")
	_ = e.rdb.Del(ctx(t), lockKey("k2")).Err()
	<-d.Done()
	if n, _ := e.rdb.Exists(ctx(t), lockKey("k2")).Result(); n != 0 {
		t.Errorf("EXISTS k2 after a renewal of a deleted key = %d, want 0", n)
	}
}

// With its traffic cut, a holder's Valid turns false by its own deadline
// (S + TTL - margin), Done closes and the cause is ErrExpired.
func TestValidityEndsWithoutRenewal(t *testing.T) {
	e := newEnv(t, redistest.Config{})
	p, rdb := e.proxied()
	c := e.locks(rdb, redislock.Config{TTL: time.Second, Margin: 200 * time.Millisecond})
	warmUp(t, c)
	// The acquire's reply is 300 ms late: validity counts from the send, so
	// it ends 800 ms after it, not 800 ms after the reply.
	p.DelayRx(300*time.Millisecond, 0)
	before := time.Now()
	l := tryAcquire(t, c, "k", "w")
	if d := time.Since(before); d < 300*time.Millisecond {
		t.Fatalf("acquire took %v through a 300 ms reply delay", d)
	}
	p.BlackholeTx(true)
	p.BlackholeRx(true)
	deadline := l.ValidUntil()
	// 20 ms: ValidUntil projects one clock onto another with two readings,
	// and a preemption between them on a loaded machine shows up here.
	if d := deadline.Sub(before); d > 820*time.Millisecond {
		t.Fatalf("ValidUntil - send = %v, want at most TTL - margin = 800ms (counted from the send, not the reply)", d)
	}
	select {
	case <-l.Done():
	case <-time.After(3 * time.Second):
		t.Fatal("Done did not close with renewals cut off")
	}
	if !errors.Is(l.Err(), redislock.ErrExpired) || l.Valid() {
		t.Errorf("Err %v Valid %v, want ErrExpired false", l.Err(), l.Valid())
	}
	if l.ValidUntil().After(deadline.Add(20 * time.Millisecond)) { // the projection reads two clocks
		t.Errorf("ValidUntil after loss %v, want no later than %v", l.ValidUntil(), deadline)
	}
	p.Heal()
}
