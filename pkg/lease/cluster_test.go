package lease_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/lockwarden/lockwarden/internal/etcdtest"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// A 3-member etcd cluster loses its leader while a lock is held: the lock
// survives (its renewals and ownership checks go on through the new leader),
// and tokens keep growing across the leader change.
func TestLeaderKilledWhileHeld(t *testing.T) {
	const ttl = 6 * time.Second
	c := etcdtest.StartCluster(t, 3)
	cli := c.Client(t)
	eng := lease.NewEngine(cli, lease.WithPrefix(prefix(t)))
	s, err := eng.NewSession(ctx(t), ttl)
	if err != nil {
		t.Fatalf("NewSession = %v, want nil", err)
	}
	t.Cleanup(func() { _ = s.Close(ctx(t)) })
	l, err := s.TryAcquire(ctx(t), "k", "h")
	if err != nil {
		t.Fatalf("TryAcquire = %v, want nil", err)
	}

	old := c.Leader(t)
	killed := time.Now()
	c.Kill(old)
	if now := c.Leader(t); now == old {
		t.Fatalf("leader after kill = member %d, want another", now)
	}

	// A renewal and an ownership check, both sent after the kill, confirmed:
	// the validity now reaches past what anything sent before could give.
	eventually(t, ttl, func() error {
		if reach := l.ValidUntil().Sub(killed); reach <= ttl-s.Margin() {
			return fmt.Errorf("lock valid until %v after the kill, want > TTL - margin (%v)", reach, ttl-s.Margin())
		}
		return nil
	})
	select {
	case <-l.Done():
		t.Fatalf("lock lost across the leader change: %v", l.Err())
	default:
	}
	if h := holding(t, eng, "k"); h.Token != l.Token() || h.Lease != s.ID() {
		t.Fatalf("Inspect = token %d lease %x, want %d %x", h.Token, h.Lease, l.Token(), s.ID())
	}

	// Tokens keep growing: another key now, then this one again after the
	// killed member is back.
	l2, err := s.TryAcquire(ctx(t), "k2", "h")
	if err != nil {
		t.Fatalf("TryAcquire(k2) = %v, want nil", err)
	}
	if l2.Token() <= l.Token() {
		t.Fatalf("token after leader change = %d, want > %d", l2.Token(), l.Token())
	}
	if err := l.Release(ctx(t)); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	c.Restart(t, old)
	c.Leader(t)
	l3, err := s.TryAcquire(ctx(t), "k", "h")
	if err != nil {
		t.Fatalf("TryAcquire(k) again = %v, want nil", err)
	}
	if l3.Token() <= l2.Token() {
		t.Fatalf("token after restart of the old leader = %d, want > %d", l3.Token(), l2.Token())
	}
}
