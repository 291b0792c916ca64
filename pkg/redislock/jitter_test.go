package redislock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwarden/lockwarden/internal/redistest"
	"github.com/lockwarden/lockwarden/pkg/fence"
	"github.com/lockwarden/lockwarden/pkg/redislock"
)

// The jitter timeline: client A holds the lock; its traffic is delayed past
// the TTL; B acquires; A's late renewal arrives.
//
// The anti-pattern, a watchdog that renews with "SET key value XX PX ttl"
// (it checks only that the key exists), extends B's key with A's value: both
// believe they hold the lock. With pkg/redislock, A's Valid() is false by its
// own deadline, its late renewal compares the value and changes nothing (B's
// key and TTL are untouched), and a fenced resource rejects A's write by
// token.
func TestJitterTimeline(t *testing.T) {
	const (
		ttl   = time.Second
		delay = 1500 * time.Millisecond // past the TTL
	)

	t.Run("anti-pattern: existence-checked renewal", func(t *testing.T) {
		e := newEnv(t, redistest.Config{})
		p := redistest.StartProxy(t, e.srv.Addr())
		// go-redis's default read timeout is 3 s: the late reply is awaited.
		viaProxy := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ReadTimeout: 3 * time.Second})
		t.Cleanup(func() { _ = viaProxy.Close() })
		key := "flawed"
		if ok, err := viaProxy.SetNX(ctx(t), key, "a", ttl).Result(); !ok || err != nil {
			t.Fatalf("A: SET NX = %v, %v", ok, err)
		}
		p.DelayTx(delay, 0)
		renewed := make(chan error, 1)
		go func() {
			// A's watchdog renews: the flaw is XX, which checks existence only.
			renewed <- viaProxy.SetArgs(ctx(t), key, "a", redis.SetArgs{Mode: "XX", TTL: ttl}).Err()
		}()
		// B acquires once A's key has expired.
		eventually(t, 3*time.Second, "B acquires", func() bool {
			ok, err := e.rdb.SetNX(ctx(t), key, "b", ttl).Result()
			return ok && err == nil
		})
		err := <-renewed // A's late renewal arrives after B acquired
		if err != nil {
			t.Fatalf("A's late renewal = %v, want it to succeed (the flaw under test)", err)
		}
		// Both hold: B acquired and was never told otherwise; A's renewal
		// succeeded and the key now carries A's value.
		if v := e.get(key); v != "a" {
			t.Fatalf("key after A's late renewal = %q, want %q: the anti-pattern must show the overlap", v, "a")
		}
		t.Logf("anti-pattern: B acquired, then A's late SET XX PX returned OK and replaced B's value: both hold")
		p.Heal()
	})

	t.Run("redislock", func(t *testing.T) {
		e := newEnv(t, redistest.Config{})
		p, viaProxy := e.proxied()
		ca := e.locks(viaProxy, redislock.Config{TTL: ttl, Margin: 200 * time.Millisecond})
		// B's TTL is long, so that a renewal by A (PX 1000) would show as a
		// drop of B's PTTL below 1 s.
		cb := e.locks(e.rdb, redislock.Config{TTL: 10 * time.Second})
		var ledger fence.Monotonic
		warmUp(t, ca) // A's late renewal must reach a server that has the script

		sent := time.Now()
		a := tryAcquire(t, ca, "k", "a")
		if err := ledger.Admit("a", a.Token()); err != nil {
			t.Fatalf("A's first write: %v", err)
		}
		p.DelayTx(delay, 0) // A's renewals now arrive after its key expired
		b, err := cb.Acquire(ctx(t), "k", "b")
		if err != nil {
			t.Fatalf("B: Acquire = %v", err)
		}
		bValue := e.get(lockKey("k"))
		if time.Since(sent) < ttl-50*time.Millisecond {
			t.Fatalf("B acquired %v after A, before A's key could expire", time.Since(sent))
		}
		// A's own deadline: Valid is false at ValidUntil, which is at most
		// TTL - margin after A sent its acquire.
		if vu := a.ValidUntil(); vu.Sub(sent) > 820*time.Millisecond { // 20 ms: projection noise under load
			t.Errorf("A's ValidUntil is %v after its send, want at most TTL - margin", vu.Sub(sent))
		}
		time.Sleep(time.Until(a.ValidUntil()))
		if a.Valid() {
			t.Fatal("A: Valid() = true at its ValidUntil")
		}
		select {
		case <-a.Done():
		case <-time.After(time.Second):
			t.Fatal("A: Done not closed after its deadline")
		}
		if !errors.Is(a.Err(), redislock.ErrExpired) {
			t.Errorf("A: Err() = %v, want ErrExpired", a.Err())
		}
		// A's late renewal arrives (the proxy delivers everything it held).
		eventually(t, 3*time.Second, "A's delayed traffic delivered", func() bool { return p.Pending() == 0 })
		if v := e.get(lockKey("k")); v != bValue {
			t.Errorf("B's key after A's late renewal = %q, want %q (untouched)", v, bValue)
		}
		if pttl, _ := e.rdb.PTTL(ctx(t), lockKey("k")).Result(); pttl <= ttl {
			t.Errorf("B's PTTL after A's late renewal = %v, want above %v (not extended or shortened by A)", pttl, ttl)
		}
		// B writes with its token; A, had it written anyway, is refused.
		if err := ledger.Admit("b", b.Token()); err != nil {
			t.Fatalf("B's write (token %d): %v", b.Token(), err)
		}
		if err := ledger.Admit("a", a.Token()); !errors.Is(err, fence.ErrStale) {
			t.Errorf("A's late write (token %d) = %v, want fence.ErrStale", a.Token(), err)
		}
		if !b.Valid() || b.Token() <= a.Token() {
			t.Errorf("B: Valid %v token %d, want true and above A's %d", b.Valid(), b.Token(), a.Token())
		}
		p.Heal()
	})
}
