package redislock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockwarden/lockwarden/internal/redistest"
	"github.com/lockwarden/lockwarden/pkg/redislock"
)

// The tombstone of a Release names its call: a second Release of a lock
// that the first one handed over finds the tombstone of another call and
// the waiter's key, and reports ErrNotHeld, as it does when the first one
// deleted the key (TestLock). Only a resend of the first call's own script
// (TestReview4ReleaseResentByGoRedisIsNotHeld) counts as released.
func TestSecondReleaseAfterHandoffIsNotHeld(t *testing.T) {
	e := newEnv(t, redistest.Config{})
	cfg := redislock.Config{TTL: 5 * time.Second}
	holders := e.locks(e.rdb, cfg)
	waiters := e.locks(e.rdb, cfg)
	h := tryAcquire(t, holders, "k", "holder")
	got := e.queue(waiters, "waiter", 1)
	if err := h.Release(ctx(t)); err != nil {
		t.Fatalf("Release() = %v, want nil", err)
	}
	w := <-got
	if w == nil {
		t.FailNow()
	}
	defer func() { _ = w.Release(ctx(t)) }()
	if v := e.get(lockKey("k")); !strings.HasSuffix(v, " waiter") {
		t.Fatalf("lock key after the handoff = %q, want the waiter's", v)
	}
	if err := h.Release(ctx(t)); !errors.Is(err, redislock.ErrNotHeld) {
		t.Errorf("second Release() after a handoff = %v, want ErrNotHeld", err)
	}
	if !w.Valid() {
		t.Error("the waiter's lock ended by the holder's second Release")
	}
}
