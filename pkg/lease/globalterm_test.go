package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockwarden/lockwarden/internal/etcdtest"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

func TestGlobalConfirm(t *testing.T) {
	e := newGlobalEnv(t)
	token, _ := e.first(t, "held", record("east", "p", 30), 5*time.Second)
	old, oldLease := e.first(t, "replaced", record("east", "p", 30), 5*time.Second)
	if ok, err := e.g.Delete(ctx(t), "replaced", old, oldLease, e.guard); !ok || err != nil {
		t.Fatalf("Delete = %v, %v", ok, err)
	}
	next, _, err := e.g.Grant(ctx(t), "replaced", lease.GlobalGrantRequest{Basis: lease.GrantSuccession, Rev: old, Record: record("east", "p", 30), TTL: 5 * time.Second}, e.guard)
	if err != nil {
		t.Fatalf("Grant(succession) = %v", err)
	}
	cases := []struct {
		name  string
		gname string
		token int64
		fail  bool
		want  bool
	}{
		{"held", "held", token, false, true},
		{"held under the next token", "replaced", next, false, true},
		{"another token", "held", token + 1, false, false},
		{"replaced grant's token", "replaced", old, false, false},
		{"never granted", "none", token, false, false},
		{"guard lost", "held", token, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			guard := e.guard
			if tc.fail {
				guard = e.noGuard
			}
			rev := e.rev(t)
			held, err := e.g.Confirm(ctx(t), tc.gname, tc.token, guard)
			if err != nil || held != tc.want {
				t.Fatalf("Confirm(%q, %d) = %v, %v, want %v, nil", tc.gname, tc.token, held, err, tc.want)
			}
			if got := e.rev(t); got != rev {
				t.Fatalf("Confirm wrote: revision %d -> %d", rev, got)
			}
		})
	}
}

func TestGlobalRenew(t *testing.T) {
	e := newGlobalEnv(t)
	gate := etcdtest.NewGate()
	g := e.gated(t, gate, e.g.Prefix())
	_, live := e.first(t, "live", record("east", "p", 30), 4*time.Second)
	_, gone := e.first(t, "gone", record("east", "p", 30), 4*time.Second)
	if _, err := e.cli.Revoke(ctx(t), gone); err != nil {
		t.Fatalf("Revoke = %v", err)
	}

	t.Run("live", func(t *testing.T) {
		c, cancel := context.WithTimeout(ctx(t), time.Second)
		defer cancel()
		n := gate.Count("LeaseKeepAlive")
		ttl, err := g.Renew(c, live)
		if err != nil || ttl != 4*time.Second {
			t.Fatalf("Renew(live) = %v, %v, want 4s, nil", ttl, err)
		}
		if got := gate.Count("LeaseKeepAlive") - n; got != 1 {
			t.Fatalf("Renew opened %d keepalive streams, want 1 (one KeepAliveOnce)", got)
		}
	})
	t.Run("revoked", func(t *testing.T) {
		c, cancel := context.WithTimeout(ctx(t), time.Second)
		defer cancel()
		ttl, err := g.Renew(c, gone)
		if ttl != 0 || !errors.Is(err, lease.ErrNotHeld) || !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			t.Fatalf("Renew(revoked) = %v, %v, want 0, ErrNotHeld wrapping ErrLeaseNotFound", ttl, err)
		}
	})
	t.Run("no deadline", func(t *testing.T) {
		n := gate.Count("LeaseKeepAlive")
		ttl, err := g.Renew(context.Background(), live)
		if ttl != 0 || !errors.Is(err, lease.ErrInvalid) {
			t.Fatalf("Renew without a deadline = %v, %v, want 0, ErrInvalid", ttl, err)
		}
		if got := gate.Count("LeaseKeepAlive") - n; got != 0 {
			t.Fatalf("Renew without a deadline sent %d keepalives, want 0", got)
		}
	})
}

func TestGlobalDelete(t *testing.T) {
	e := newGlobalEnv(t)
	other, err := e.cli.Grant(ctx(t), 30)
	if err != nil {
		t.Fatalf("Grant lease = %v", err)
	}
	cases := []struct {
		name    string
		token   func(token int64) int64
		lease   func(id clientv3.LeaseID) clientv3.LeaseID
		fail    bool // guard does not hold
		deleted bool
	}{
		{name: "own token", deleted: true},
		{name: "own token, no lease to revoke", lease: func(clientv3.LeaseID) clientv3.LeaseID { return 0 }, deleted: true},
		{name: "own token, a lease K is not on", lease: func(clientv3.LeaseID) clientv3.LeaseID { return other.ID }, deleted: true},
		{name: "wrong token", token: func(tk int64) int64 { return tk + 1 }},
		{name: "guard lost", fail: true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := "d" + string(rune('a'+i))
			token, id := e.first(t, name, record("east", "p", 30), 5*time.Second)
			tk, l, guard := token, id, e.guard
			if tc.token != nil {
				tk = tc.token(token)
			}
			if tc.lease != nil {
				l = tc.lease(id)
			}
			if tc.fail {
				guard = e.noGuard
			}
			tomb := e.kv(t, e.g.TombstonePath(name)).String()
			before := e.state(t, name)
			deleted, err := e.g.Delete(ctx(t), name, tk, l, guard)
			if err != nil || deleted != tc.deleted {
				t.Fatalf("Delete(%q, %d) = %v, %v, want %v, nil", name, tk, deleted, err, tc.deleted)
			}
			if got := e.kv(t, e.g.TombstonePath(name)).String(); got != tomb {
				t.Fatalf("T after Delete = %s, want unchanged %s", got, tomb)
			}
			if !tc.deleted {
				if got := e.state(t, name); got != before {
					t.Fatalf("failed Delete changed K/T: %q, want %q", got, before)
				}
				if ttl := e.ttlOf(t, id); ttl <= 0 {
					t.Fatalf("failed Delete: grant lease TTL %d, want alive", ttl)
				}
				return
			}
			if kv := e.kv(t, e.g.GrantPath(name)); kv != nil {
				t.Fatalf("K after Delete = %s, want absent", kv)
			}
			wantRevoked := l == id
			if ttl := e.ttlOf(t, id); (ttl == -1) != wantRevoked {
				t.Fatalf("grant lease TTL after Delete = %d, want revoked %v", ttl, wantRevoked)
			}
			if ttl := e.ttlOf(t, other.ID); ttl <= 0 {
				t.Fatalf("unrelated lease TTL after Delete = %d, want alive", ttl)
			}
			// Deleted once: a second Delete of the token finds nothing.
			if again, err := e.g.Delete(ctx(t), name, tk, l, guard); again || err != nil {
				t.Fatalf("second Delete = %v, %v, want false, nil", again, err)
			}
		})
	}
}
