package lease_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/lockwarden/lockwarden/pkg/lease"
)

// The controller's pattern: it grants, updates and releases keys on a shared
// grant session on behalf of holders, every write guarded by its own
// election lock's IsOwner(). Once the election is lost, nothing it sends
// changes etcd.
func TestGuards(t *testing.T) {
	const ttl = 2 * time.Second
	e := newEnv(t)
	eng := e.engine(e.cli)
	election, err := e.session(eng, ttl).TryAcquire(ctx(t), "_controller", "replica-a")
	if err != nil {
		t.Fatalf("TryAcquire(_controller) = %v, want nil", err)
	}
	grants := e.session(eng, ttl)
	guard := lease.WithGuard(election.IsOwner())

	// Two holders on one session.
	a, err := grants.TryAcquire(ctx(t), "shop/payments", "uid-a", guard, lease.WithRecord(json.RawMessage(`{"phase":"Held"}`)))
	if err != nil {
		t.Fatalf("grant a = %v, want nil", err)
	}
	if _, err := grants.TryAcquire(ctx(t), "shop/orders", "uid-b", guard); err != nil {
		t.Fatalf("grant b = %v, want nil", err)
	}
	// The grant session holds payments for uid-a: asking for it for uid-c
	// names the holder.
	_, err = grants.TryAcquire(ctx(t), "shop/payments", "uid-c", guard)
	if he := asHeld(t, err); he.Holder != "uid-a" || he.Token != a.Token() {
		t.Fatalf("HeldError = %+v, want uid-a with token %d", *he, a.Token())
	}

	if err := a.Update(ctx(t), json.RawMessage(`{"phase":"Releasing"}`), guard); err != nil {
		t.Fatalf("Update = %v, want nil", err)
	}
	if h := holding(t, eng, "shop/payments"); string(h.Record) != `{"phase":"Releasing"}` || h.Holder != "uid-a" {
		t.Fatalf("Inspect = holder %q record %s, want uid-a {\"phase\":\"Releasing\"}", h.Holder, h.Record)
	}

	// The replica loses the election.
	if err := election.Release(ctx(t)); err != nil {
		t.Fatalf("Release(_controller) = %v, want nil", err)
	}
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"grant", func() error { _, err := grants.TryAcquire(ctx(t), "shop/new", "uid-n", guard); return err }},
		{"blocking grant", func() error { _, err := grants.Acquire(ctx(t), "shop/new", "uid-n", guard); return err }},
		{"update", func() error { return a.Update(ctx(t), json.RawMessage(`{"phase":"Held"}`), guard) }},
		{"force release", func() error { return eng.ForceRelease(ctx(t), "shop/payments", a.Token(), guard) }},
		{"release", func() error { return a.Release(ctx(t), guard) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); !errors.Is(err, lease.ErrGuardFailed) {
				t.Fatalf("err = %v, want ErrGuardFailed", err)
			}
		})
	}
	h := holding(t, eng, "shop/payments")
	if h.Token != a.Token() || string(h.Record) != `{"phase":"Releasing"}` || h.LockDelay {
		t.Fatalf("Inspect = token %d record %s lock-delay %v, want %d, unchanged, false", h.Token, h.Record, h.LockDelay, a.Token())
	}
	if h := holding(t, eng, "shop/new"); h.Token != 0 || h.Waiters != 0 {
		t.Fatalf("Inspect(shop/new) = token %d waiters %d, want nothing", h.Token, h.Waiters)
	}
	// Without the guard (a new epoch would pass its own), release works.
	if err := a.Release(ctx(t)); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
}
