package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lockwarden/lockwarden/internal/redistest"
	"github.com/lockwarden/lockwarden/pkg/redislock"
)

const queueKey = "lockwarden:{k}:queue"

// Waiters are served in order of arrival, each woken by the release before
// it, with growing tokens.
func TestAcquireFIFO(t *testing.T) {
	e := newEnv(t, redistest.Config{})
	c := e.locks(e.rdb, redislock.Config{TTL: 5 * time.Second})
	first := tryAcquire(t, c, "k", "holder")
	const n = 4
	got := make(chan *redislock.Lock, n)
	for i := range n {
		go func() {
			l, err := c.Acquire(ctx(t), "k", fmt.Sprintf("waiter-%d", i))
			if err != nil {
				t.Errorf("Acquire(waiter-%d) = %v", i, err)
			}
			got <- l
		}()
		// Start the next waiter only once this one is queued.
		eventually(t, 2*time.Second, "waiter queued", func() bool {
			return e.rdb.LLen(ctx(t), queueKey).Val() == int64(i+1)
		})
	}
	start := time.Now()
	if err := first.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	prev := first.Token()
	for i := range n {
		l := <-got
		if l == nil {
			t.FailNow()
		}
		if want := fmt.Sprintf("waiter-%d", i); l.Holder() != want || l.Token() <= prev {
			t.Errorf("grant %d: holder %q token %d, want %q above %d", i, l.Holder(), l.Token(), want, prev)
		}
		prev = l.Token()
		if err := l.Release(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
	// Woken by releases, not by the 5 s TTL or the TTL/3 poll.
	if d := time.Since(start); d > time.Second {
		t.Errorf("%d handoffs took %v, want well under the poll interval (woken by release)", n, d)
	}
	if l := e.rdb.LLen(ctx(t), queueKey).Val(); l != 0 {
		t.Errorf("queue length after all grants = %d, want 0", l)
	}
}

// A waiter whose context ends leaves the queue and returns the cause; the
// waiter behind it is served.
func TestAcquireCancelledLeavesQueue(t *testing.T) {
	e := newEnv(t, redistest.Config{})
	c := e.locks(e.rdb, redislock.Config{TTL: 5 * time.Second})
	h := tryAcquire(t, c, "k", "holder")
	cctx, cancel := context.WithCancelCause(ctx(t))
	gone := make(chan error, 1)
	go func() { _, err := c.Acquire(cctx, "k", "quitter"); gone <- err }()
	eventually(t, 2*time.Second, "quitter queued", func() bool { return e.rdb.LLen(ctx(t), queueKey).Val() == 1 })
	next := make(chan *redislock.Lock, 1)
	go func() { l, _ := c.Acquire(ctx(t), "k", "next"); next <- l }()
	eventually(t, 2*time.Second, "next queued", func() bool { return e.rdb.LLen(ctx(t), queueKey).Val() == 2 })
	stop := errors.New("caller gave up")
	cancel(stop)
	if err := <-gone; !errors.Is(err, stop) {
		t.Errorf("cancelled Acquire = %v, want the cause %v", err, stop)
	}
	if l := e.rdb.LLen(ctx(t), queueKey).Val(); l != 1 {
		t.Errorf("queue length after the quitter left = %d, want 1", l)
	}
	_ = h.Release(ctx(t))
	select {
	case l := <-next:
		if l == nil || l.Holder() != "next" {
			t.Fatalf("next waiter got %v", l)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the waiter behind a cancelled one was not served")
	}
}

// TryAcquire does not barge past a live waiter; a dead waiter (its liveness
// key expired) is dropped from the head of the queue.
func TestTryAcquireDoesNotBarge(t *testing.T) {
	e := newEnv(t, redistest.Config{})
	c := e.locks(e.rdb, redislock.Config{TTL: 2 * time.Second})
	// A waiter of another process, queued while the lock is free (between a
	// release and its wake-up).
	e.rdb.RPush(ctx(t), queueKey, "other/1")
	e.rdb.Set(ctx(t), "lockwarden:{k}:w:other/1", "1", 5*time.Second)
	_, err := c.TryAcquire(ctx(t), "k", "barger")
	var he *redislock.HeldError
	if !errors.Is(err, redislock.ErrLocked) || errors.As(err, &he) {
		t.Fatalf("TryAcquire with a live waiter queued = %v, want ErrLocked (queued), not a *HeldError", err)
	}
	if v := e.get(lockKey("k")); v != "" {
		t.Fatalf("lock key = %q, want none", v)
	}
	e.rdb.Del(ctx(t), "lockwarden:{k}:w:other/1") // the waiter died
	if l := tryAcquire(t, c, "k", "barger"); l.Token() != 1 {
		t.Errorf("token %d, want 1", l.Token())
	}
	if l := e.rdb.LLen(ctx(t), queueKey).Val(); l != 0 {
		t.Errorf("queue length = %d, want 0 (the dead waiter dropped)", l)
	}
}

// A holder that dies without releasing hands over when its key expires: the
// waiter looks again when the key's PTTL runs out.
func TestAcquireAfterHolderDies(t *testing.T) {
	e := newEnv(t, redistest.Config{})
	// The dead holder: a key written as the package writes it, never renewed.
	e.rdb.Set(ctx(t), lockKey("k"), "00000000000000000000000000000000 7 dead", 700*time.Millisecond)
	c := e.locks(e.rdb, redislock.Config{TTL: 5 * time.Second})
	start := time.Now()
	l, err := c.Acquire(ctx(t), "k", "heir")
	if err != nil {
		t.Fatalf("Acquire = %v", err)
	}
	// The poll interval is 5s/3: the waiter must wake at the key's expiry.
	if d := time.Since(start); d > 1500*time.Millisecond {
		t.Errorf("Acquire took %v, want about the dead key's 700 ms", d)
	}
	if l.Token() != 1 {
		t.Errorf("token %d, want 1", l.Token())
	}
}

// Close releases held locks, wakes blocked waiters with ErrClosed and
// refuses new acquires.
func TestClose(t *testing.T) {
	e := newEnv(t, redistest.Config{})
	c, err := redislock.New(e.rdb, redislock.Config{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	h := tryAcquire(t, c, "k", "holder")
	other := e.locks(e.rdb, redislock.Config{TTL: 5 * time.Second})
	o := tryAcquire(t, other, "k2", "other")
	waitErr := make(chan error, 1)
	go func() { _, err := c.Acquire(ctx(t), "k2", "waiter"); waitErr <- err }()
	eventually(t, 2*time.Second, "waiter queued", func() bool {
		return e.rdb.LLen(ctx(t), "lockwarden:{k2}:queue").Val() == 1
	})
	if err := c.Close(ctx(t)); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	if err := <-waitErr; !errors.Is(err, redislock.ErrClosed) {
		t.Errorf("blocked Acquire after Close = %v, want ErrClosed", err)
	}
	if !closed(h.Done()) || e.get(lockKey("k")) != "" {
		t.Errorf("held lock after Close: Done closed %v, key %q; want closed and deleted", closed(h.Done()), e.get(lockKey("k")))
	}
	if _, err := c.TryAcquire(ctx(t), "k", "again"); !errors.Is(err, redislock.ErrClosed) {
		t.Errorf("TryAcquire after Close = %v, want ErrClosed", err)
	}
	if !o.Valid() {
		t.Error("another client's lock ended by Close")
	}
}
