package lease_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockwarden/lockwarden/internal/etcdtest"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// lostAnswer runs call with its answers from etcd held back by p, so that it
// reaches etcd but times out, then lets the traffic through again.
func lostAnswer(t *testing.T, p *etcdtest.Proxy, call func(context.Context) error) error {
	t.Helper()
	p.PauseRx()
	c, cancel := context.WithTimeout(ctx(t), 300*time.Millisecond)
	err := call(c)
	cancel()
	p.UnpauseRx()
	return err
}

// Grant takes a free key in TryAcquire's one transaction and tracks nothing;
// it refuses what TryAcquire refuses, names a refusal of etcd as itself, and
// leaves a lost answer to the caller.
func TestGrant(t *testing.T) {
	const ttl = 2 * time.Second
	e := newEnv(t)
	p := etcdtest.NewProxy(t, e.srv.Endpoint())
	eng := e.engine(etcdtest.NewClient(t, []string{p.Endpoint()}))
	s := e.session(eng, ttl)
	record := json.RawMessage(`{"phase":"Held"}`)

	token, err := s.Grant(ctx(t), "ns/a", "uid-a", lease.WithRecord(record))
	if err != nil || token <= 0 {
		t.Fatalf("Grant(ns/a) = %d, %v, want a token, nil", token, err)
	}
	if h := holding(t, eng, "ns/a"); h.Token != token || h.Holder != "uid-a" || h.Lease != s.ID() || string(h.Record) != string(record) {
		t.Fatalf("Inspect = %+v, want token %d holder uid-a lease %x record %s", h, token, s.ID(), record)
	}
	// Nothing tracks it: Adopt would fail with ErrBusy if a *Lock did.
	adopted, err := s.Adopt(ctx(t), "ns/a", token)
	if err != nil {
		t.Fatalf("Adopt(granted key) = %v, want nil (Grant tracks nothing)", err)
	}
	if err := adopted.Release(ctx(t)); err != nil {
		t.Fatalf("Release(adopted) = %v, want nil", err)
	}

	held, err := s.Grant(ctx(t), "ns/held", "uid-h")
	if err != nil {
		t.Fatalf("Grant(ns/held) = %v, want nil", err)
	}
	other := e.session(e.engine(e.cli), ttl)
	forced, err := other.TryAcquire(ctx(t), "ns/forced", "x")
	if err != nil {
		t.Fatalf("TryAcquire(ns/forced) = %v, want nil", err)
	}
	if err := eng.ForceRelease(ctx(t), "ns/forced", forced.Token()); err != nil {
		t.Fatalf("ForceRelease = %v, want nil", err)
	}
	failing := lease.WithGuard(clientv3.Compare(clientv3.CreateRevision(prefix(t)+"/nothing"), "=", 1))
	manyGuards := make([]clientv3.Cmp, 125)
	for i := range manyGuards {
		manyGuards[i] = clientv3.Compare(clientv3.CreateRevision(prefix(t)+"/nothing"), "=", 0)
	}
	closed := e.session(eng, ttl)
	if err := closed.Close(ctx(t)); err != nil {
		t.Fatalf("Close = %v, want nil", err)
	}
	for _, tc := range []struct {
		name string
		s    *lease.Session
		key  string
		opts []lease.LockOption
		want error
	}{
		{"held", s, "ns/held", nil, lease.ErrLocked},
		{"lock-delay", s, "ns/forced", nil, lease.ErrLocked},
		{"guard", s, "ns/free", []lease.LockOption{failing}, lease.ErrGuardFailed},
		{"bad key", s, "/abs", nil, lease.ErrInvalid},
		{"bad record", s, "ns/free", []lease.LockOption{lease.WithRecord(json.RawMessage(`{`))}, lease.ErrInvalid},
		{"too many guards", s, "ns/free", []lease.LockOption{lease.WithGuard(manyGuards...)}, lease.ErrInvalid},
		{"closed session", closed, "ns/free", nil, lease.ErrSessionClosed},
		{"request too large", s, "ns/free", []lease.LockOption{lease.WithRecord(json.RawMessage(`"` + strings.Repeat("x", 1600<<10) + `"`))}, rpctypes.ErrRequestTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.s.Grant(ctx(t), tc.key, "uid-b", tc.opts...)
			if !errors.Is(err, tc.want) || got != 0 {
				t.Fatalf("Grant(%q) = %d, %v, want 0, %v", tc.key, got, err, tc.want)
			}
			if errors.Is(err, lease.ErrUnknownOutcome) {
				t.Fatalf("Grant(%q) = %v, want no ErrUnknownOutcome for a definite answer", tc.key, err)
			}
		})
	}
	_, err = s.Grant(ctx(t), "ns/held", "uid-b")
	if he := asHeld(t, err); he.Holder != "uid-h" || he.Token != held {
		t.Fatalf("HeldError = %+v, want uid-h with token %d", *he, held)
	}
	if h := holding(t, eng, "ns/free"); h.Token != 0 {
		t.Fatalf("Inspect(ns/free) = token %d after refused grants, want 0", h.Token)
	}

	// A lost answer: the key was created, the caller is told it may have
	// been, and nothing cleans it up behind the caller's back.
	err = lostAnswer(t, p, func(c context.Context) error { _, err := s.Grant(c, "ns/lost", "uid-l"); return err })
	if !errors.Is(err, lease.ErrUnknownOutcome) {
		t.Fatalf("Grant with a lost answer = %v, want ErrUnknownOutcome", err)
	}
	time.Sleep(ttl) // three ownership-check periods: a clean-up would have run
	if h := holding(t, eng, "ns/lost"); h.Holder != "uid-l" || h.Lease != s.ID() {
		t.Fatalf("Inspect(ns/lost) = holder %q lease %x, want uid-l on %x (settled by the caller, not deleted)", h.Holder, h.Lease, s.ID())
	}
}

// Engine.Release and UpdateRecord change a key only while it holds the given
// grant, and only when every guard holds.
func TestEngineReleaseAndUpdateRecord(t *testing.T) {
	const ttl = 2 * time.Second
	e := newEnv(t)
	p := etcdtest.NewProxy(t, e.srv.Endpoint())
	eng := e.engine(etcdtest.NewClient(t, []string{p.Endpoint()}))
	s := e.session(eng, ttl)
	token, err := s.Grant(ctx(t), "k", "uid-a", lease.WithRecord(json.RawMessage(`{"phase":"Held"}`)))
	if err != nil {
		t.Fatalf("Grant = %v, want nil", err)
	}
	failing := lease.WithGuard(clientv3.Compare(clientv3.CreateRevision(prefix(t)+"/nothing"), "=", 1))

	rec := json.RawMessage(`{"phase":"Releasing"}`)
	if err := eng.UpdateRecord(ctx(t), "k", token, rec); err != nil {
		t.Fatalf("UpdateRecord = %v, want nil", err)
	}
	if h := holding(t, eng, "k"); h.Token != token || h.Holder != "uid-a" || h.Lease != s.ID() || string(h.Record) != string(rec) {
		t.Fatalf("Inspect = %+v, want token %d holder uid-a lease %x record %s", h, token, s.ID(), rec)
	}
	for _, tc := range []struct {
		name string
		call func() error
		want error
	}{
		{"update, wrong token", func() error { return eng.UpdateRecord(ctx(t), "k", token+1, json.RawMessage(`1`)) }, lease.ErrNotHeld},
		{"update, guard", func() error { return eng.UpdateRecord(ctx(t), "k", token, json.RawMessage(`1`), failing) }, lease.ErrGuardFailed},
		{"update, bad record", func() error { return eng.UpdateRecord(ctx(t), "k", token, json.RawMessage(`{`)) }, lease.ErrInvalid},
		{"update, bad token", func() error { return eng.UpdateRecord(ctx(t), "k", 0, json.RawMessage(`1`)) }, lease.ErrInvalid},
		{"release, wrong token", func() error { return eng.Release(ctx(t), "k", token+1) }, lease.ErrNotHeld},
		{"release, guard", func() error { return eng.Release(ctx(t), "k", token, failing) }, lease.ErrGuardFailed},
		{"release, bad key", func() error { return eng.Release(ctx(t), "", token) }, lease.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
	if h := holding(t, eng, "k"); h.Token != token || string(h.Record) != string(rec) {
		t.Fatalf("Inspect after refusals = token %d record %s, want %d %s", h.Token, h.Record, token, rec)
	}

	err = lostAnswer(t, p, func(c context.Context) error {
		return eng.UpdateRecord(c, "k", token, json.RawMessage(`{"phase":"Lost"}`))
	})
	if !errors.Is(err, lease.ErrUnknownOutcome) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("UpdateRecord with a lost answer = %v, want ErrUnknownOutcome", err)
	}
	err = lostAnswer(t, p, func(c context.Context) error { return eng.Release(c, "k", token) })
	if !errors.Is(err, lease.ErrUnknownOutcome) {
		t.Fatalf("Release with a lost answer = %v, want ErrUnknownOutcome", err)
	}
	eventually(t, 2*time.Second, func() error {
		if h := holding(t, eng, "k"); h.Token != 0 {
			return errors.New("the lost release did not apply")
		}
		return nil
	})
	if err := eng.Release(ctx(t), "k", token); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("Release again = %v, want ErrNotHeld", err)
	}
}
