package lease_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/lockwarden/lockwarden/internal/etcdtest"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// Issue 24, safety: a handoff racing the next waiter's session expiry. etcd
// ends the waiter's lease (here: a revoke) at the moment the holder releases,
// in either order: the lock must go to the waiter behind it, never to the
// expired one, whose Acquire returns its session's error.
func TestHandoffRacesWaiterLeaseEnd(t *testing.T) {
	const ttl = 2 * time.Second
	for _, lag := range []time.Duration{-2 * time.Millisecond, 0, 2 * time.Millisecond} {
		t.Run("revoke "+lag.String()+" after the release", func(t *testing.T) {
			e := newEnv(t)
			eng := e.engine(e.cli)
			h, err := e.session(eng, ttl).TryAcquire(ctx(t), "k", "holder")
			if err != nil {
				t.Fatalf("TryAcquire = %v, want nil", err)
			}
			expiring := e.session(eng, ttl)
			ec := acquireAsync(t, expiring, "k", "expiring")
			waiters(t, eng, "k", 1)
			nc := acquireAsync(t, e.session(eng, ttl), "k", "next")
			waiters(t, eng, "k", 2)

			var wg sync.WaitGroup
			wg.Go(func() {
				time.Sleep(max(lag, 0))
				if _, err := e.cli.Revoke(ctx(t), expiring.ID()); err != nil {
					t.Errorf("Revoke = %v, want nil", err)
				}
			})
			wg.Go(func() {
				time.Sleep(max(-lag, 0))
				if err := h.Release(ctx(t)); err != nil {
					t.Errorf("Release = %v, want nil", err)
				}
			})
			wg.Wait()

			a := await(t, ec, ttl+slack, "expiring waiter")
			if a.err == nil {
				// It may have taken the lock before etcd ended its lease;
				// then it must lose it, by its own checks, within its
				// session's end.
				waitClosed(t, a.l.Done(), ttl+slack, "expired waiter's lock Done")
				if a.l.Valid() {
					t.Fatal("expired waiter's lock Valid() = true after its lease was revoked")
				}
			} else if !errors.Is(a.err, lease.ErrSessionExpired) {
				t.Fatalf("expiring waiter's Acquire = %v, want ErrSessionExpired", a.err)
			}
			n := await(t, nc, ttl, "next waiter")
			if n.err != nil {
				t.Fatalf("next waiter's Acquire = %v, want nil", n.err)
			}
			if n.l.Token() <= h.Token() {
				t.Fatalf("next waiter's token = %d, want above the holder's %d", n.l.Token(), h.Token())
			}
			if got := holding(t, eng, "k"); got.Holder != "next" || got.Token != n.l.Token() {
				t.Fatalf("Inspect = holder %q token %d, want next with %d", got.Holder, got.Token, n.l.Token())
			}
		})
	}
}

// Issue 24, safety: the waiter's own session ends while etcd still keeps its
// lease (its renewals stall; its validity ends a margin before etcd's
// expiry). Its Acquire returns ErrSessionExpired and never a Lock, and its
// entry (which a release would make the grant) is deleted at once, so the
// next waiter is not held up until etcd expires the lease.
func TestWaiterSessionLapseSkipsItsEntry(t *testing.T) {
	const ttl = 4 * time.Second
	const margin = 1500 * time.Millisecond // etcd keeps the lease 1.5 s past the session's end
	e := newEnv(t)
	eng := e.engine(e.cli)
	h, err := e.session(eng, ttl).TryAcquire(ctx(t), "k", "holder")
	if err != nil {
		t.Fatalf("TryAcquire = %v, want nil", err)
	}
	gate := etcdtest.NewGate()
	lapsing := e.session(e.engine(e.srv.Client(t, gate.DialOptions()...)), ttl, lease.WithMargin(margin))
	lc := acquireAsync(t, lapsing, "k", "lapsing")
	waiters(t, eng, "k", 1)
	nc := acquireAsync(t, e.session(eng, ttl), "k", "next")
	waiters(t, eng, "k", 2)

	gate.Stall("LeaseKeepAlive")
	t.Cleanup(func() { gate.Unstall("LeaseKeepAlive") })
	a := await(t, lc, ttl+slack, "lapsing waiter")
	if !errors.Is(a.err, lease.ErrSessionExpired) {
		t.Fatalf("lapsing waiter's Acquire = %v (lock %v), want ErrSessionExpired", a.err, a.l)
	}
	ended := time.Now()
	eventually(t, margin/2, func() error {
		if got := holding(t, eng, "k").Waiters; got != 1 {
			return errors.New("the lapsed waiter's entry is still queued")
		}
		return nil
	})
	if ttlResp, err := e.cli.TimeToLive(ctx(t), lapsing.ID()); err != nil || ttlResp.TTL <= 0 {
		t.Fatalf("lapsed waiter's lease TTL = %v (err %v) %v after its session ended, want still alive in etcd (the test's premise)",
			ttlResp.TTL, err, time.Since(ended))
	}
	if err := h.Release(ctx(t)); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	n := await(t, nc, margin/2, "next waiter")
	if n.err != nil {
		t.Fatalf("next waiter's Acquire = %v, want nil", n.err)
	}
	if got := holding(t, eng, "k"); got.Holder != "next" || got.Lease == lapsing.ID() {
		t.Fatalf("Inspect = holder %q lease %x, want next, not the lapsed waiter's lease", got.Holder, got.Lease)
	}
}
