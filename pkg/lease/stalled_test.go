package lease_test

import (
	"errors"
	"testing"
	"time"

	"github.com/lockwarden/lockwarden/internal/etcdtest"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// Failure 6: the key of a held lock is deleted (ForceRelease, an operator's
// etcdctl del) while its session lives on, and its watch is stalled. The
// lock must still end within TTL - margin of its last confirmed ownership
// check, not live on with the session.
func TestDeletedKeyWithStalledWatch(t *testing.T) {
	const ttl = 2 * time.Second
	cases := []struct {
		name    string
		stalled []string // etcd methods held back for the lock's client
		cause   error
	}{
		// Ownership checks still get through: one of them sees the key gone.
		{"watch stalled", []string{"Watch"}, lease.ErrNotHeld},
		// Checks stall too: the lock's own deadline ends it.
		{"watch and checks stalled", []string{"Watch", "Txn"}, lease.ErrExpired},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			gate := etcdtest.NewGate()
			s := e.session(e.engine(e.srv.Client(t, gate.DialOptions()...)), ttl)
			l, err := s.TryAcquire(ctx(t), "k", "h")
			if err != nil {
				t.Fatalf("TryAcquire = %v, want nil", err)
			}
			t.Cleanup(func() { gate.Unstall(tc.stalled...) })

			// Nothing sent after this can confirm ownership, so the lock's
			// validity is bounded by what was confirmed before it.
			stalled := time.Now()
			gate.Stall(tc.stalled...)
			if _, err := e.cli.Delete(ctx(t), l.Path()); err != nil {
				t.Fatalf("Delete(%q) = %v, want nil", l.Path(), err)
			}

			lost := waitClosed(t, l.Done(), 3*ttl, "lock Done")
			if limit := ttl - s.Margin() + slack; lost.Sub(stalled) > limit {
				t.Errorf("lock lost %v after its last possible check, want within TTL - margin + slack = %v",
					lost.Sub(stalled), limit)
			}
			if !errors.Is(l.Err(), tc.cause) {
				t.Errorf("Err() = %v, want %v", l.Err(), tc.cause)
			}
			if l.Valid() {
				t.Errorf("Valid() = true, want false")
			}
			// The session itself is fine: renewals were never stalled.
			if !s.Valid() || s.Err() != nil {
				t.Errorf("session Valid() = %v, Err() = %v; want true, nil", s.Valid(), s.Err())
			}
			ttlResp, err := e.cli.TimeToLive(ctx(t), s.ID())
			if err != nil || ttlResp.TTL <= 0 {
				t.Errorf("session lease TTL = %v (err %v), want alive", ttlResp.TTL, err)
			}
		})
	}
}
