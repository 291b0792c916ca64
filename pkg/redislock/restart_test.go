package redislock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/lockwarden/lockwarden/internal/redistest"
	"github.com/lockwarden/lockwarden/pkg/fence"
	"github.com/lockwarden/lockwarden/pkg/redislock"
)

// grants takes and releases the lock n times, each grant writing to the
// fenced resource, and returns the last token.
func grants(t *testing.T, c *redislock.Client, ledger *fence.Monotonic, n int) int64 {
	t.Helper()
	var last int64
	for range n {
		l := tryAcquire(t, c, "k", "w")
		if err := ledger.Admit("w", l.Token()); err != nil {
			t.Fatalf("write under token %d: %v", l.Token(), err)
		}
		last = l.Token()
		if err := l.Release(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
	return last
}

// A restart without persistence forgets the token counter: tokens start
// again at 1, and a fenced resource refuses the new holder (safe, not live),
// as documented. With AOF (appendfsync always) the counter survives and
// tokens keep growing. A lock held across the restart learns that its key is
// gone at its next renewal.
func TestRestart(t *testing.T) {
	for _, tt := range []struct {
		name    string
		persist redistest.Persistence
	}{{"no persistence", redistest.None}, {"AOF", redistest.AOF}} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, redistest.Config{Persistence: tt.persist})
			c := e.locks(e.rdb, redislock.Config{TTL: 2 * time.Second})
			var ledger fence.Monotonic
			last := grants(t, c, &ledger, 3)
			held := tryAcquire(t, c, "held", "h")

			e.srv.Kill()
			if err := e.srv.Restart(); err != nil {
				t.Fatal(err)
			}
			restarted := time.Now()
			// The pooled connections broke with the kill; the next calls redial.
			var l *redislock.Lock
			eventually(t, 5*time.Second, "acquire after restart", func() bool {
				var err error
				l, err = c.TryAcquire(ctx(t), "k", "after")
				return err == nil
			})
			err := ledger.Admit("after", l.Token())
			switch tt.persist {
			case redistest.None:
				if l.Token() > last || !errors.Is(err, fence.ErrStale) {
					t.Errorf("after a restart without persistence: token %d (before: %d), write = %v; want a repeated token refused with fence.ErrStale",
						l.Token(), last, err)
				}
				t.Logf("documented refusal: token %d after restart, fence at %d: %v", l.Token(), last, err)
			case redistest.AOF:
				if l.Token() != last+1 || err != nil {
					t.Errorf("after an AOF restart: token %d, write = %v; want %d admitted", l.Token(), err, last+1)
				}
			}
			if tt.persist == redistest.None {
				select {
				case <-held.Done():
					if !errors.Is(held.Err(), redislock.ErrNotHeld) {
						t.Errorf("lock held across a restart without persistence: Err %v, want ErrNotHeld", held.Err())
					}
				case <-time.After(3 * time.Second):
					t.Error("lock held across a restart without persistence: Done not closed")
				}
				return
			}
			// With AOF the key and its TTL survive: a renewal after the
			// restart is confirmed and moves ValidUntil on.
			eventually(t, 3*time.Second, "renewal confirmed after the AOF restart", func() bool {
				return held.ValidUntil().After(restarted.Add(c.Config().TTL - c.Config().Margin))
			})
			if !held.Valid() {
				t.Errorf("lock held across an AOF restart: Valid false (%v), want it kept", held.Err())
			}
		})
	}
}
