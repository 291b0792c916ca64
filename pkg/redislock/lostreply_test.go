package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockwarden/lockwarden/internal/redistest"
	"github.com/lockwarden/lockwarden/pkg/redislock"
)

const tokenKey = "lockwarden:{k}:token"

// A release whose reply is lost has deleted the key; retrying it is
// harmless: it reports success and never deletes the next holder's key.
func TestLostReplyRelease(t *testing.T) {
	e := newEnv(t, redistest.Config{})
	p, viaProxy := e.proxied()
	ca := e.locks(viaProxy, redislock.Config{TTL: 10 * time.Second})
	cb := e.locks(e.rdb, redislock.Config{TTL: 10 * time.Second})
	warmUp(t, ca)
	a := tryAcquire(t, ca, "k", "a")

	p.BlackholeRx(true) // the script runs; its reply is lost
	rctx, cancel := context.WithTimeout(ctx(t), 1500*time.Millisecond)
	err := a.Release(rctx)
	cancel()
	if err == nil {
		t.Fatal("Release with its reply lost = nil, want an error (the outcome is unknown to A)")
	}
	if v := e.get(lockKey("k")); v != "" {
		t.Fatalf("lock key after the unanswered release = %q, want deleted (the script ran)", v)
	}
	b := tryAcquire(t, cb, "k", "b")
	p.Heal()
	if err := a.Release(ctx(t)); err != nil {
		t.Errorf("retried Release = %v, want nil (the first one deleted the key)", err)
	}
	if v := e.get(lockKey("k")); v == "" || !b.Valid() {
		t.Errorf("B's key after A's retried release = %q, B valid %v; want B's key untouched", v, b.Valid())
	}
}

// A TryAcquire whose reply is lost deletes, by value, the key it may have
// set, so the lock is free again without waiting for the TTL.
func TestLostReplyTryAcquire(t *testing.T) {
	e := newEnv(t, redistest.Config{})
	p, viaProxy := e.proxied()
	ca := e.locks(viaProxy, redislock.Config{TTL: 10 * time.Second})
	warmUp(t, ca)
	p.BlackholeRx(true)
	_, err := ca.TryAcquire(ctx(t), "k", "a")
	if err == nil {
		t.Fatal("TryAcquire with its reply lost = nil, want an error")
	}
	if n, _ := e.rdb.Get(ctx(t), tokenKey).Int64(); n != 1 {
		t.Fatalf("token counter = %d, want 1 (the acquire ran on the server)", n)
	}
	p.Heal()
	// The client deletes the key it may have set as soon as Redis answers
	// again, long before its TTL of 10 s.
	eventually(t, 3*time.Second, "orphaned key deleted", func() bool { return e.get(lockKey("k")) == "" })
	cb := e.locks(e.rdb, redislock.Config{TTL: 2 * time.Second})
	if b := tryAcquire(t, cb, "k", "b"); b.Token() != 2 {
		t.Errorf("next grant token %d, want 2", b.Token())
	}
}

// A blocking Acquire whose reply is lost retries with the same nonce: the
// script recognises its own grant, no second token is drawn, and the lock is
// returned with the first grant's token.
func TestLostReplyAcquireRetried(t *testing.T) {
	e := newEnv(t, redistest.Config{})
	p, viaProxy := e.proxied()
	ca := e.locks(viaProxy, redislock.Config{TTL: 10 * time.Second})
	warmUp(t, ca)
	r := acquireAfterLostReply(t, e, p, ca)
	if r.err != nil {
		t.Fatalf("Acquire after a lost reply = %v, want the lock", r.err)
	}
	if n, _ := e.rdb.Get(ctx(t), tokenKey).Int64(); r.l.Token() != 1 || n != 1 {
		t.Errorf("token %d, counter %d; want 1 and 1 (one grant, recognised by its nonce)", r.l.Token(), n)
	}
	if !r.l.Valid() {
		t.Error("Valid() = false, want true")
	}
	if err := r.l.Release(ctx(t)); err != nil || errors.Is(err, redislock.ErrNotHeld) {
		t.Errorf("Release() = %v, want nil", err)
	}
}

// acquired is the outcome of an Acquire.
type acquired struct {
	l   *redislock.Lock
	err error
}

// acquireAfterLostReply runs ca.Acquire of "k" for "a" (a lock that is
// free) with the replies through p blackholed until the acquire has run
// on the server, then heals p and returns the Acquire's outcome: the
// retry's, which finds its own grant by nonce.
func acquireAfterLostReply(t *testing.T, e *env, p *redistest.Proxy, ca *redislock.Client) acquired {
	t.Helper()
	p.BlackholeRx(true)
	done := make(chan acquired, 1)
	go func() {
		l, err := ca.Acquire(ctx(t), "k", "a")
		done <- acquired{l, err}
	}()
	eventually(t, 5*time.Second, "acquire ran on the server", func() bool {
		n, _ := e.rdb.Get(ctx(t), tokenKey).Int64()
		return n == 1
	})
	time.Sleep(200 * time.Millisecond) // let the unanswered call time out on A's side
	p.Heal()
	return <-done
}

// warmUp runs one acquire, renewal and release on another key, and one
// blocking Acquire, so that the server has every script cached: a lost or
// late request then belongs to a script that runs. (A script the server
// does not have answers NOSCRIPT, and go-redis sends the script itself only
// after that answer arrives: delayed past the read timeout, nothing runs.)
func warmUp(t *testing.T, c *redislock.Client) {
	t.Helper()
	l := tryAcquire(t, c, "warm-up", "w")
	// A renewal moves ValidUntil by about the renew interval; two readings
	// without one differ only by the projection's noise (microseconds).
	first := l.ValidUntil()
	step := c.Config().RenewInterval / 2
	eventually(t, 5*time.Second, "warm-up renewal", func() bool { return l.ValidUntil().After(first.Add(step)) })
	if err := l.Release(ctx(t)); err != nil {
		t.Fatalf("warm-up Release() = %v", err)
	}
	cl, err := c.Acquire(ctx(t), "warm-up", "w")
	if err != nil {
		t.Fatalf("warm-up Acquire() = %v", err)
	}
	_ = cl.Release(ctx(t))
}
