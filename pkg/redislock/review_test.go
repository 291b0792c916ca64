//go:build review

// The adversarial review of pkg/redislock (session 3): four of these tests reproduce open
// defects (a failed WAIT leaves a grant, a late renewal after local loss keeps the key, Close
// ignores its ctx, a typed-nil client panics) and fail until they are fixed. Run them with
// go test -tags review -run TestReview ./pkg/redislock/; drop the tag once they pass.

package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwarden/lockwarden/internal/redistest"
	"github.com/lockwarden/lockwarden/pkg/redislock"
)

// Review: a TryAcquire whose WAIT is refused by the server (here an ACL
// that denies WAIT; the script itself is allowed) returns an error, so the
// caller has no Lock, but the script's grant stays in Redis: the lock is
// unavailable to everyone for the TTL and a token was consumed.
func TestReviewTryAcquireWaitRefusedLeavesGrant(t *testing.T) {
	e := newEnv(t, redistest.Config{})
	if err := e.rdb.Do(ctx(t), "ACL", "SETUSER", "nowait", "on", ">pw", "~*", "&*", "+@all", "-wait").Err(); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: e.srv.Addr(), Username: "nowait", Password: "pw", MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	c := e.locks(rdb, redislock.Config{TTL: 10 * time.Second, WaitReplicas: 1, WaitTimeout: 100 * time.Millisecond})
	l, err := c.TryAcquire(ctx(t), "k", "a")
	if err == nil {
		t.Fatalf("TryAcquire with WAIT denied = %v, nil; want an error", l)
	}
	t.Logf("TryAcquire error: %v", err)
	if v := e.get(lockKey("k")); v != "" {
		t.Errorf("lock key after a failed TryAcquire = %q, want none (the caller got no Lock, nothing must stay held)", v)
	}
}

// Review: Close(ctx) waits for the watchdog's in-flight renewal with no
// bound. With a go-redis client whose socket has no read deadline
// (ReadTimeout -1) and a network that swallows requests, the renewal never
// returns and Close ignores its ctx.
func TestReviewCloseHonoursCtx(t *testing.T) {
	e := newEnv(t, redistest.Config{})
	p := redistest.StartProxy(t, e.srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ReadTimeout: -1, WriteTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := redislock.New(rdb, redislock.Config{TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	l := tryAcquire(t, c, "k", "a")
	p.BlackholeTx(true)
	select {
	case <-l.Done():
	case <-time.After(3 * time.Second):
		t.Fatal("Done not closed within 3s of a 2s TTL with the network blackholed")
	}
	closeErr := make(chan error, 1)
	start := time.Now()
	go func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		closeErr <- c.Close(cctx)
	}()
	select {
	case err := <-closeErr:
		t.Logf("Close returned after %v: %v", time.Since(start), err)
	case <-time.After(5 * time.Second):
		t.Errorf("Close(ctx with 1s timeout) has not returned after %v (in-flight renewal/release blocked on a socket without deadline)", time.Since(start))
		p.DropConnections() // unblock, so that the test leaves nothing running
		err := <-closeErr
		t.Logf("Close returned after DropConnections, %v total: %v", time.Since(start), err)
	}
	p.Heal()
}

// Review: a token counter raised by hand to a value that is not positive
// (the doc tells operators to SET it) makes the grant unparsable: TryAcquire
// fails, but the key it set stays held for the TTL.
func TestReviewBadCounterLeavesGrant(t *testing.T) {
	e := newEnv(t, redistest.Config{})
	c := e.locks(e.rdb, redislock.Config{TTL: 10 * time.Second})
	if err := e.rdb.Set(ctx(t), tokenKey, -5, 0).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := c.TryAcquire(ctx(t), "k", "a")
	if err == nil {
		t.Fatal("TryAcquire with counter -5 = nil error, want one")
	}
	t.Logf("TryAcquire error: %v", err)
	if v := e.get(lockKey("k")); v != "" {
		t.Errorf("lock key after a failed TryAcquire = %q, want none", v)
	}
	if errors.Is(err, redislock.ErrLocked) {
		t.Errorf("error is ErrLocked, want a parse error")
	}
}

// Review: a renewal sent while valid that reaches Redis after the holder's
// own validity ended (but before the server expired the key) extends the
// key by a full TTL. The Lock is already lost (Done closed), and nothing
// deletes the key: the lock stays taken by a dead grant for up to another
// TTL unless the caller happens to call Release.
func TestReviewLateRenewalAfterLossKeepsKey(t *testing.T) {
	e := newEnv(t, redistest.Config{})
	p, viaProxy := e.proxied()
	ca := e.locks(viaProxy, redislock.Config{TTL: 2 * time.Second})
	cb := e.locks(e.rdb, redislock.Config{TTL: 2 * time.Second})
	warmUp(t, ca)
	a := tryAcquire(t, ca, "k", "a")
	acquired := time.Now()
	p.DelayTx(time.Second, 0) // the first renewal (at ~0.67s) reaches Redis at ~1.67s
	<-a.Done()
	t.Logf("A lost after %v: %v", time.Since(acquired), a.Err())
	time.Sleep(time.Until(acquired.Add(2300 * time.Millisecond))) // past A's TTL as first granted
	pttl, _ := e.rdb.PTTL(ctx(t), lockKey("k")).Result()
	b, err := cb.TryAcquire(ctx(t), "k", "b")
	if err != nil {
		t.Errorf("B's TryAcquire %v after A's grant (TTL 2s) and after A reported loss = %v (key PTTL %v); want the lock free", time.Since(acquired), err, pttl)
	} else {
		_ = b.Release(ctx(t))
	}
	p.Heal()
}

// Review: a typed nil *redis.Client in the UniversalClient interface is not
// == nil, so New accepts it and the first call panics instead of returning
// a clear ErrInvalid.
func TestReviewTypedNilClient(t *testing.T) {
	var rdb *redis.Client
	c, err := redislock.New(rdb, redislock.Config{})
	if err != nil {
		if !errors.Is(err, redislock.ErrInvalid) {
			t.Fatalf("New(typed nil) = %v, want ErrInvalid", err)
		}
		return
	}
	t.Errorf("New((*redis.Client)(nil)) = client, nil; want ErrInvalid")
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Errorf("TryAcquire on it panicked: %v", r)
			}
		}()
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := c.TryAcquire(cctx, "k", "a")
		t.Logf("TryAcquire on it = %v", err)
	}()
}
