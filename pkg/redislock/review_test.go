package redislock_test

// The adversarial review of pkg/redislock (session 3) reproduced these
// defects; the tests now state the required behaviour: an acquire that
// fails after its script granted leaves no key, a lock lost by its deadline
// deletes its key (so a late renewal cannot keep it), Close and Release
// honour their ctx while a call is stuck, a typed-nil client is rejected.

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwarden/lockwarden/internal/redistest"
	"github.com/lockwarden/lockwarden/pkg/redislock"
)

// A TryAcquire or Acquire whose WAIT is refused by the server (here an ACL
// that denies WAIT; the script itself is allowed) returns an error, so the
// caller has no Lock; the script's grant must not stay in Redis.
func TestReviewWaitRefusedUndoesGrant(t *testing.T) {
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
	if !errors.Is(err, redislock.ErrNotReplicated) {
		t.Errorf("TryAcquire with WAIT denied = %v, want ErrNotReplicated", err)
	}
	if v := e.get(lockKey("k")); v != "" {
		t.Errorf("lock key after a failed TryAcquire = %q, want none (the caller got no Lock, nothing must stay held)", v)
	}
	// The blocking Acquire: the same, at once (no retry until ctx ends).
	actx, cancel := context.WithTimeout(ctx(t), 5*time.Second)
	defer cancel()
	start := time.Now()
	l, err = c.Acquire(actx, "k", "a")
	if err == nil || time.Since(start) > 2*time.Second {
		t.Fatalf("Acquire with WAIT denied = %v, %v after %v; want an error within 2s", l, err, time.Since(start))
	}
	t.Logf("Acquire error: %v", err)
	if v := e.get(lockKey("k")); v != "" {
		t.Errorf("lock key after a failed Acquire = %q, want none", v)
	}
}

// Close(ctx) returns when ctx ends although the watchdog's renewal (and the
// delete after the loss) are stuck on a socket without a read deadline
// (ReadTimeout -1) on a network that swallows requests; once the
// connections drop, the goroutines end and a second Close returns nil.
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
	start := time.Now()
	cctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	closeErr := make(chan error, 1)
	go func() { closeErr <- c.Close(cctx) }()
	select {
	case err := <-closeErr:
		t.Logf("Close returned after %v: %v", time.Since(start), err)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Close(ctx with 1s timeout) with a call stuck = %v, want context.DeadlineExceeded", err)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("Close(ctx with 1s timeout) has not returned after %v (in-flight renewal/release blocked on a socket without deadline)", time.Since(start))
		p.DropConnections() // unblock, so that the test leaves nothing running
		err := <-closeErr
		t.Logf("Close returned after DropConnections, %v total: %v", time.Since(start), err)
	}
	p.Heal()
	p.DropConnections() // the stuck calls fail now, and their goroutines end
	c2ctx, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	if err := c.Close(c2ctx); err != nil {
		t.Errorf("second Close after the connections dropped = %v, want nil (the goroutines ended)", err)
	}
}

// Release(ctx) returns when ctx ends although its call is stuck on a socket
// without a read deadline; a Release after the network heals succeeds.
func TestReviewReleaseHonoursCtx(t *testing.T) {
	e := newEnv(t, redistest.Config{})
	p := redistest.StartProxy(t, e.srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ReadTimeout: -1, WriteTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	c := e.locks(rdb, redislock.Config{TTL: 10 * time.Second})
	l := tryAcquire(t, c, "k", "a")
	p.BlackholeTx(true)
	rctx, cancel := context.WithTimeout(ctx(t), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	released := make(chan error, 1)
	go func() { released <- l.Release(rctx) }()
	select {
	case err := <-released:
		t.Logf("Release returned after %v: %v", time.Since(start), err)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Release(ctx with 500ms timeout) with its call stuck = %v, want context.DeadlineExceeded", err)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("Release(ctx with 500ms timeout) has not returned after %v", time.Since(start))
		p.DropConnections()
		t.Logf("Release returned after DropConnections: %v", <-released)
	}
	if l.Valid() {
		t.Error("Valid() = true after Release")
	}
	p.Heal()
	p.DropConnections()
	if err := l.Release(ctx(t)); err != nil {
		t.Errorf("Release after the network healed = %v, want nil", err)
	}
	if v := e.get(lockKey("k")); v != "" {
		t.Errorf("lock key after the second Release = %q, want deleted", v)
	}
}

// A token counter raised by hand to a value that is not positive (the doc
// tells operators to SET it) makes the grant unparsable: TryAcquire and
// Acquire fail at once with a parse error and leave no key.
func TestReviewBadCounterUndoesGrant(t *testing.T) {
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
	actx, cancel := context.WithTimeout(ctx(t), 5*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := c.Acquire(actx, "k", "a"); err == nil || errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Errorf("Acquire with counter -4 = %v after %v, want a parse error within 2s", err, time.Since(start))
	}
	if v := e.get(lockKey("k")); v != "" {
		t.Errorf("lock key after a failed Acquire = %q, want none", v)
	}
}

// A renewal sent while valid that reaches Redis after the holder's own
// validity ended (but before the server expired the key) extends the key by
// a full TTL. The Lock stays lost (a late reply does not revive it), and its
// watchdog deletes the key by nonce, so B gets the lock long before the
// extended TTL would have run out, and A's late traffic leaves B's key alone.
func TestReviewLateRenewalAfterLossDropsKey(t *testing.T) {
	e := newEnv(t, redistest.Config{})
	p := redistest.StartProxy(t, e.srv.Addr())
	// A read timeout above the delay, so that A's late renewal is answered
	// (and its reply reaches A after the loss), and idle connections in the
	// pool: a new connection would spend two delayed round trips (HELLO,
	// CLIENT SETINFO) before the delete could be sent.
	viaProxy := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ReadTimeout: 3 * time.Second, WriteTimeout: time.Second})
	t.Cleanup(func() { _ = viaProxy.Close() })
	ca := e.locks(viaProxy, redislock.Config{TTL: 2 * time.Second})
	cb := e.locks(e.rdb, redislock.Config{TTL: 2 * time.Second})
	warmUp(t, ca)
	var pings sync.WaitGroup
	for range 4 {
		pings.Go(func() { _ = viaProxy.Ping(ctx(t)).Err() })
	}
	pings.Wait()
	a := tryAcquire(t, ca, "k", "a")
	acquired := time.Now()
	// The first renewal (sent at ~0.67s) reaches Redis at ~1.67s and extends
	// the key to ~3.67s; A's validity ends at ~1.5s (TTL - margin 0.5s), and
	// its delete, sent then through the same delay, lands at ~2.5s.
	p.DelayTx(time.Second, 0)
	<-a.Done()
	t.Logf("A lost after %v: %v", time.Since(acquired), a.Err())
	time.Sleep(time.Until(acquired.Add(2150 * time.Millisecond))) // past A's TTL as first granted
	pttl, _ := e.rdb.PTTL(ctx(t), lockKey("k")).Result()
	t.Logf("key PTTL %v at %v after A's grant (TTL 2s): above 0 means the late renewal extended it", pttl, time.Since(acquired))
	// Before the extended TTL could end (~3.67s), B must get the lock.
	deadline := acquired.Add(3300 * time.Millisecond)
	var b *redislock.Lock
	var err error
	for {
		if b, err = cb.TryAcquire(ctx(t), "k", "b"); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		pttl, _ := e.rdb.PTTL(ctx(t), lockKey("k")).Result()
		t.Fatalf("B's TryAcquire %v after A's grant (TTL 2s) and after A reported loss = %v (key PTTL %v); want the lock free",
			time.Since(acquired), err, pttl)
	}
	t.Logf("B acquired %v after A's grant", time.Since(acquired))
	bValue := e.get(lockKey("k"))
	eventually(t, 5*time.Second, "A's delayed traffic delivered", func() bool { return p.Pending() == 0 })
	if a.Valid() || !errors.Is(a.Err(), redislock.ErrExpired) {
		t.Errorf("A after its late renewal's reply: Valid %v Err %v, want false and ErrExpired (not revived)", a.Valid(), a.Err())
	}
	if v := e.get(lockKey("k")); v != bValue || !b.Valid() {
		t.Errorf("B's key after A's late traffic = %q (B valid %v), want %q untouched", v, b.Valid(), bValue)
	}
	_ = b.Release(ctx(t))
	p.Heal()
}

// A typed nil *redis.Client (or *ClusterClient, *Ring) in the
// UniversalClient interface is not == nil; New must still reject it with
// ErrInvalid instead of returning a client that panics at its first call.
func TestReviewTypedNilClient(t *testing.T) {
	tests := []struct {
		name string
		rdb  redis.UniversalClient
	}{
		{"Client", (*redis.Client)(nil)},
		{"ClusterClient", (*redis.ClusterClient)(nil)},
		{"Ring", (*redis.Ring)(nil)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := redislock.New(tt.rdb, redislock.Config{})
			if err != nil {
				if !errors.Is(err, redislock.ErrInvalid) {
					t.Fatalf("New(typed nil %s) = %v, want ErrInvalid", tt.name, err)
				}
				t.Logf("New(typed nil %s) = %v", tt.name, err)
				return
			}
			t.Errorf("New((*redis.%s)(nil)) = client, nil; want ErrInvalid", tt.name)
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
		})
	}
}
