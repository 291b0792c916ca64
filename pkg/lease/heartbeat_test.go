package lease_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockwarden/lockwarden/internal/etcdtest"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// Failure 5: a heartbeat that logs renewal failures and carries on. Loss
// must close Done, cancel the lock's context and turn Valid false, promptly
// and once, and stay that way when etcd becomes reachable again.
func TestHeartbeatLoss(t *testing.T) {
	const ttl = 2 * time.Second
	cases := []struct {
		name string
		// fail breaks the heartbeat; within bounds how long after it the
		// lock must be lost.
		fail   func(t *testing.T, e *env, p *etcdtest.Proxy, s *lease.Session)
		heal   func(p *etcdtest.Proxy)
		within func(s *lease.Session) time.Duration
		causes []error
	}{
		{
			name:   "renewals held in the network",
			fail:   func(t *testing.T, e *env, p *etcdtest.Proxy, s *lease.Session) { p.Pause() },
			heal:   func(p *etcdtest.Proxy) { p.Unpause() },
			within: func(s *lease.Session) time.Duration { return s.TTL() - s.Margin() + slack },
			causes: []error{lease.ErrSessionExpired, lease.ErrExpired},
		},
		{
			name: "lease revoked behind the session's back",
			fail: func(t *testing.T, e *env, p *etcdtest.Proxy, s *lease.Session) {
				if _, err := e.cli.Revoke(ctx(t), s.ID()); err != nil {
					t.Fatalf("Revoke = %v, want nil", err)
				}
			},
			heal:   func(p *etcdtest.Proxy) {},
			within: func(s *lease.Session) time.Duration { return s.TTL()/3 + s.TTL()/4 + slack },
			// The key goes with the lease: the watch may see that first.
			causes: []error{lease.ErrSessionExpired, lease.ErrNotHeld},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			p := etcdtest.NewProxy(t, e.srv.Endpoint())
			s := e.session(e.engine(etcdtest.NewClient(t, []string{p.Endpoint()})), ttl)
			l, err := s.TryAcquire(ctx(t), "k", "h")
			if err != nil {
				t.Fatalf("TryAcquire = %v, want nil", err)
			}
			var cancels atomic.Int32
			context.AfterFunc(l.Context(), func() { cancels.Add(1) })

			failed := time.Now()
			tc.fail(t, e, p, s)
			lost := waitClosed(t, l.Done(), 3*ttl, "lock Done")
			if d, limit := lost.Sub(failed), tc.within(s); d > limit {
				t.Errorf("lock lost %v after the heartbeat broke, want within %v", d, limit)
			}
			if l.Valid() {
				t.Errorf("Valid() = true after Done closed, want false")
			}
			if l.Context().Err() == nil {
				t.Errorf("Context().Err() = nil after Done closed, want cancelled")
			}
			cause := context.Cause(l.Context())
			if !isAny(cause, tc.causes) || !errors.Is(l.Err(), cause) {
				t.Errorf("cause = %v, Err() = %v, want the same, one of %v", cause, l.Err(), tc.causes)
			}
			waitClosed(t, s.Done(), 3*ttl, "session Done")

			// Once lost, always lost: healing the network brings nothing back.
			tc.heal(p)
			deadline := time.Now().Add(ttl)
			for time.Now().Before(deadline) {
				if l.Valid() || s.Valid() {
					t.Fatalf("Valid() = true again after loss, want false forever")
				}
				time.Sleep(20 * time.Millisecond)
			}
			eventually(t, time.Second, func() error {
				if cancels.Load() == 0 {
					return errors.New("context AfterFunc did not run")
				}
				return nil
			})
			if n := cancels.Load(); n != 1 {
				t.Errorf("context AfterFunc ran %d times, want 1", n)
			}
			if !errors.Is(l.Err(), cause) {
				t.Errorf("Err() = %v after healing, want unchanged %v", l.Err(), cause)
			}
		})
	}
}

func isAny(err error, targets []error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}
