package lease_test

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockwarden/lockwarden/pkg/lease"
)

// Failure 1: a token that restarts after expiry, or is parsed wrongly. The
// token is the key's CreateRevision and must grow across every grant of a
// lock: after release, expiry, revoke, forced release and an etcd restart.
// (Leader change: TestLeaderKilledWhileHeld.)
func TestTokenMonotonic(t *testing.T) {
	e := newEnv(t)
	const key = "orders"
	const ttl = 2 * time.Second
	var last int64
	var clients []*clientv3.Client

	// grant takes the lock on a fresh session (on a fresh client: the
	// restart step replaces the server under the old one) and checks that
	// its token grew and is what etcd reports.
	grant := func(t *testing.T) (*lease.Session, *lease.Lock) {
		t.Helper()
		cli := e.srv.Client(e.t)
		clients = append(clients, cli)
		eng := lease.NewEngine(cli, lease.WithPrefix(prefix(e.t)))
		s := e.session(eng, ttl)
		l, err := s.Acquire(ctx(t), key, "holder")
		if err != nil {
			t.Fatalf("Acquire(%q) = %v, want nil", key, err)
		}
		if l.Token() <= last {
			t.Fatalf("token = %d, want > %d (the previous grant's)", l.Token(), last)
		}
		if h := holding(t, eng, key); h.Token != l.Token() {
			t.Fatalf("Inspect token = %d, want %d", h.Token, l.Token())
		}
		last = l.Token()
		return s, l
	}

	steps := []struct {
		name string
		end  func(t *testing.T, s *lease.Session, l *lease.Lock)
	}{
		{"release", func(t *testing.T, s *lease.Session, l *lease.Lock) {
			if err := l.Release(ctx(t)); err != nil {
				t.Fatalf("Release = %v, want nil", err)
			}
		}},
		{"expiry", func(t *testing.T, s *lease.Session, l *lease.Lock) {
			s.Orphan() // stop renewing; etcd expires the lease after the TTL
		}},
		{"revoke", func(t *testing.T, s *lease.Session, l *lease.Lock) {
			if _, err := e.cli.Revoke(ctx(t), s.ID()); err != nil {
				t.Fatalf("Revoke = %v, want nil", err)
			}
		}},
		{"force release", func(t *testing.T, s *lease.Session, l *lease.Lock) {
			if err := e.engine(e.cli).ForceRelease(ctx(t), key, l.Token()); err != nil {
				t.Fatalf("ForceRelease = %v, want nil", err)
			}
		}},
		{"etcd restart", func(t *testing.T, s *lease.Session, l *lease.Lock) {
			if err := s.Close(ctx(t)); err != nil {
				t.Fatalf("Close = %v, want nil", err)
			}
			// Close every client first: the server's graceful stop waits for
			// open watch streams.
			for _, c := range clients {
				c.Close()
			}
			e.cli.Close()
			e.srv.Stop()
			e.srv.Restart(t)
			e.cli = e.srv.Client(e.t)
		}},
	}
	_, l := grant(t)
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			st.end(t, l.Session(), l)
			_, l = grant(t)
		})
	}
}

// The token a TryAcquire reports in a HeldError is the holder's token.
func TestHeldErrorNamesHolder(t *testing.T) {
	e := newEnv(t)
	eng := e.engine(e.cli)
	a, b := e.session(eng, 2*time.Second), e.session(eng, 2*time.Second)
	l, err := a.TryAcquire(ctx(t), "k", "alice")
	if err != nil {
		t.Fatalf("TryAcquire = %v, want nil", err)
	}
	_, err = b.TryAcquire(ctx(t), "k", "bob")
	he := asHeld(t, err)
	if he.Holder != "alice" || he.Token != l.Token() || he.Lease != a.ID() {
		t.Fatalf("HeldError = %+v, want holder alice, token %d, lease %x", *he, l.Token(), a.ID())
	}
}
