package lease_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/lockwarden/lockwarden/internal/etcdtest"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// Issue 10, item 11: TryAcquire of a key that a live Lock of the same session
// still tracks (its key was deleted behind its back, its watch stalled) is
// refused without touching the session's map: the old Lock still ends, by its
// ownership check, and the key can be taken afterwards.
func TestTryAcquireTrackedKey(t *testing.T) {
	const ttl = 2 * time.Second
	e := newEnv(t)
	gate := etcdtest.NewGate()
	s := e.session(e.engine(e.srv.Client(t, gate.DialOptions()...)), ttl)
	gate.Stall("Watch")
	t.Cleanup(func() { gate.Unstall("Watch") })
	old, err := s.TryAcquire(ctx(t), "k", "h")
	if err != nil {
		t.Fatalf("TryAcquire = %v, want nil", err)
	}
	if _, err := e.cli.Delete(ctx(t), old.Path()); err != nil {
		t.Fatalf("Delete = %v, want nil", err)
	}
	l, err := s.TryAcquire(ctx(t), "k", "h")
	if err == nil {
		t.Fatalf("TryAcquire of a tracked key = token %d, nil; want a refusal (old lock token %d still tracked)", l.Token(), old.Token())
	}
	if he := asHeld(t, err); he.Token != old.Token() {
		t.Fatalf("HeldError token = %d, want the tracked lock's %d", he.Token, old.Token())
	}
	waitClosed(t, old.Done(), 2*ttl, "old lock's Done")
	if !errors.Is(old.Err(), lease.ErrNotHeld) {
		t.Fatalf("old lock Err() = %v, want ErrNotHeld", old.Err())
	}
	if _, err := s.TryAcquire(ctx(t), "k", "h"); err != nil {
		t.Fatalf("TryAcquire after the old lock ended = %v, want nil", err)
	}
}

// Issue 10, item 13: Update of a lock whose validity lapsed (no ownership
// check confirmed within TTL - margin, its session alive) is refused with
// ErrExpired and writes nothing.
func TestUpdateAfterValidityLapsed(t *testing.T) {
	const ttl = 2 * time.Second
	e := newEnv(t)
	gate := etcdtest.NewGate()
	s := e.session(e.engine(e.srv.Client(t, gate.DialOptions()...)), ttl)
	l, err := s.TryAcquire(ctx(t), "k", "h", lease.WithRecord(json.RawMessage(`{"v":1}`)))
	if err != nil {
		t.Fatalf("TryAcquire = %v, want nil", err)
	}
	gate.Stall("Txn", "Watch") // ownership checks stall; renewals go on
	t.Cleanup(func() { gate.Unstall("Txn", "Watch") })
	waitClosed(t, l.Done(), 2*ttl, "lock Done")
	if !errors.Is(l.Err(), lease.ErrExpired) || !s.Valid() {
		t.Fatalf("lock Err() = %v, session valid %v; want ErrExpired, true", l.Err(), s.Valid())
	}
	gate.Unstall("Txn")
	if err := l.Update(ctx(t), json.RawMessage(`{"v":2}`)); !errors.Is(err, lease.ErrExpired) {
		t.Fatalf("Update of a lapsed lock = %v, want ErrExpired", err)
	}
	if h := holding(t, e.engine(e.cli), "k"); string(h.Record) != `{"v":1}` {
		t.Fatalf("record after a refused Update = %s, want {\"v\":1}", h.Record)
	}
}

// Issue 10, item 13: one engine refuses a second live session of one lease
// (ResumeSession of a lease it already renews), so two sessions of one
// process never adopt the same token. Two processes can: see doc.go.
func TestResumeLiveSession(t *testing.T) {
	const ttl = 2 * time.Second
	e := newEnv(t)
	eng := e.engine(e.cli)
	s := e.session(eng, ttl)
	if _, err := s.TryAcquire(ctx(t), "k", "h"); err != nil {
		t.Fatalf("TryAcquire = %v, want nil", err)
	}
	twin, err := eng.ResumeSession(ctx(t), s.ID())
	if !errors.Is(err, lease.ErrBusy) {
		if twin != nil {
			twin.Orphan()
		}
		t.Fatalf("ResumeSession of a lease this engine renews = %v, want ErrBusy", err)
	}
	s.Orphan()
	resumed, err := eng.ResumeSession(ctx(t), s.ID())
	if err != nil {
		t.Fatalf("ResumeSession after Orphan = %v, want nil", err)
	}
	t.Cleanup(func() { _ = resumed.Close(ctx(t)) })
}
