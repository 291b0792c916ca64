package lease_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lockwarden/lockwarden/pkg/lease"
)

// A process that restarts resumes its session by lease ID and adopts its
// lock: same key, same token, same record, kept alive by the new session.
func TestResumeSessionAdopt(t *testing.T) {
	const ttl = 2 * time.Second
	e := newEnv(t)
	old := e.session(e.engine(e.srv.Client(t)), ttl)
	record := json.RawMessage(`{"phase":"Held"}`)
	l, err := old.TryAcquire(ctx(t), "k", "pod-1", lease.WithRecord(record))
	if err != nil {
		t.Fatalf("TryAcquire = %v, want nil", err)
	}
	old.Orphan() // the process stops; the lease lives on until its TTL
	if !errors.Is(l.Err(), lease.ErrSessionClosed) {
		t.Fatalf("old lock Err() = %v, want ErrSessionClosed", l.Err())
	}

	// The new process, with a new client.
	eng := e.engine(e.srv.Client(t))
	s, err := eng.ResumeSession(ctx(t), old.ID())
	if err != nil {
		t.Fatalf("ResumeSession(%x) = %v, want nil", old.ID(), err)
	}
	t.Cleanup(func() { _ = s.Close(ctx(t)) })
	if s.ID() != old.ID() || s.TTL() != ttl {
		t.Fatalf("resumed session = lease %x TTL %v, want %x %v", s.ID(), s.TTL(), old.ID(), ttl)
	}
	adopted, err := s.Adopt(ctx(t), "k", l.Token())
	if err != nil {
		t.Fatalf("Adopt(k, %d) = %v, want nil", l.Token(), err)
	}
	if adopted.Token() != l.Token() || adopted.Holder() != "pod-1" || string(adopted.Record()) != string(record) {
		t.Fatalf("adopted = token %d holder %q record %s, want %d pod-1 %s",
			adopted.Token(), adopted.Holder(), adopted.Record(), l.Token(), record)
	}

	// The new session keeps it: three TTLs later it is still held and valid.
	select {
	case <-adopted.Done():
		t.Fatalf("adopted lock lost: %v", adopted.Err())
	case <-time.After(3 * ttl):
	}
	if !adopted.Valid() {
		t.Fatalf("adopted.Valid() = false after 3 TTLs, want true")
	}
	if h := holding(t, eng, "k"); h.Token != l.Token() || h.Lease != old.ID() {
		t.Fatalf("Inspect = token %d lease %x, want %d %x", h.Token, h.Lease, l.Token(), old.ID())
	}

	other := e.session(eng, ttl)
	if _, err := other.TryAcquire(ctx(t), "other", "x"); err != nil {
		t.Fatalf("TryAcquire(other) = %v, want nil", err)
	}
	for _, tc := range []struct {
		name  string
		s     *lease.Session
		key   string
		token int64
		want  error
	}{
		{"held already", s, "k", l.Token(), lease.ErrBusy},
		{"wrong token", other, "k", l.Token() + 1, lease.ErrNotHeld},
		{"another session's key", other, "k", l.Token(), lease.ErrNotHeld},
		{"free key", s, "free", 1, lease.ErrNotHeld},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.s.Adopt(ctx(t), tc.key, tc.token); !errors.Is(err, tc.want) {
				t.Fatalf("Adopt(%q, %d) = %v, want %v", tc.key, tc.token, err, tc.want)
			}
		})
	}

	t.Run("gone lease", func(t *testing.T) {
		if _, err := e.cli.Revoke(ctx(t), other.ID()); err != nil {
			t.Fatalf("Revoke = %v, want nil", err)
		}
		if _, err := eng.ResumeSession(ctx(t), other.ID()); !errors.Is(err, lease.ErrSessionExpired) {
			t.Fatalf("ResumeSession(revoked) = %v, want ErrSessionExpired", err)
		}
	})
}

// Session.Keys lists the lock keys on a resumed lease, by name with their
// tokens, and nothing else on it (its queue entries are not lock keys).
func TestResumedSessionKeys(t *testing.T) {
	const ttl = 3 * time.Second
	e := newEnv(t)
	direct := e.engine(e.cli)
	other, err := e.session(direct, ttl).TryAcquire(ctx(t), "busy", "other")
	if err != nil {
		t.Fatalf("TryAcquire = %v, want nil", err)
	}
	old := e.session(direct, ttl)
	a, err := old.TryAcquire(ctx(t), "a", "pod-1")
	if err != nil {
		t.Fatalf("TryAcquire(a) = %v, want nil", err)
	}
	b, err := old.TryAcquire(ctx(t), "ns/b", "pod-1")
	if err != nil {
		t.Fatalf("TryAcquire(ns/b) = %v, want nil", err)
	}
	res := make(chan error, 1)
	go func() { _, err := old.Acquire(ctx(t), "busy", "pod-1"); res <- err }()
	waiters(t, direct, "busy", 1)
	old.Orphan()
	if err := <-res; !errors.Is(err, lease.ErrSessionClosed) {
		t.Fatalf("Acquire of an orphaned session = %v, want ErrSessionClosed", err)
	}

	s, err := e.engine(e.srv.Client(t)).ResumeSession(ctx(t), old.ID())
	if err != nil {
		t.Fatalf("ResumeSession = %v, want nil", err)
	}
	t.Cleanup(func() { _ = s.Close(ctx(t)) })
	got, err := s.Keys(ctx(t))
	if err != nil {
		t.Fatalf("Keys = %v, want nil", err)
	}
	want := map[string]int64{"a": a.Token(), "ns/b": b.Token()}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Keys = %v, want %v", got, want)
	}
	if h := holding(t, direct, "busy"); h.Waiters != 0 || h.Token != other.Token() {
		t.Fatalf("busy after resume: token %d waiters %d, want %d 0 (the dead call's entry deleted)", h.Token, h.Waiters, other.Token())
	}
}
