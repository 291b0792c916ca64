package lease_test

import (
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockwarden/lockwarden/pkg/lease"
)

// ForceRelease evicts a holder: the holder's lock ends, the next holder waits
// out a lock-delay of the evicted holder's TTL, and gets a larger token.
func TestForceRelease(t *testing.T) {
	const ttl = 2 * time.Second
	e := newEnv(t)
	eng := e.engine(e.cli)
	h, err := e.session(eng, ttl).TryAcquire(ctx(t), "k", "stuck")
	if err != nil {
		t.Fatalf("TryAcquire = %v, want nil", err)
	}
	next := e.session(eng, ttl)

	t.Run("wrong token", func(t *testing.T) {
		before := leases(t, e.cli)
		if err := eng.ForceRelease(ctx(t), "k", h.Token()+1000); !errors.Is(err, lease.ErrNotHeld) {
			t.Fatalf("ForceRelease(wrong token) = %v, want ErrNotHeld", err)
		}
		for id := range leases(t, e.cli) {
			if !before[id] {
				t.Fatalf("lease %x left behind by a failed ForceRelease", id)
			}
		}
	})

	forced := time.Now()
	if err := eng.ForceRelease(ctx(t), "k", h.Token()); err != nil {
		t.Fatalf("ForceRelease = %v, want nil", err)
	}
	waitClosed(t, h.Done(), ttl, "evicted holder's Done")
	if !errors.Is(h.Err(), lease.ErrNotHeld) {
		t.Fatalf("evicted holder Err() = %v, want ErrNotHeld", h.Err())
	}
	if got := holding(t, eng, "k"); got.Token != 0 || !got.LockDelay {
		t.Fatalf("Inspect after ForceRelease = token %d lock-delay %v, want 0 true", got.Token, got.LockDelay)
	}
	if _, err := next.TryAcquire(ctx(t), "k", "next"); !errors.Is(err, lease.ErrLocked) {
		t.Fatalf("TryAcquire during lock-delay = %v, want ErrLocked", err)
	}
	if err := eng.ForceRelease(ctx(t), "k", h.Token()); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("second ForceRelease = %v, want ErrNotHeld", err)
	}

	l, err := next.Acquire(ctx(t), "k", "next")
	if err != nil {
		t.Fatalf("Acquire = %v, want nil", err)
	}
	// etcd never expires a lease early, so the wait is at least the TTL.
	if waited := time.Since(forced); waited < ttl {
		t.Fatalf("next holder got the lock %v after ForceRelease, want at least the TTL %v", waited, ttl)
	}
	if l.Token() <= h.Token() {
		t.Fatalf("next token = %d, want > %d", l.Token(), h.Token())
	}
	if got := holding(t, eng, "k"); got.LockDelay || got.Token != l.Token() {
		t.Fatalf("Inspect = token %d lock-delay %v, want %d false", got.Token, got.LockDelay, l.Token())
	}
}

// ForceRelease's fence rests on this etcd behaviour: a transaction whose
// taken branch puts on a lease etcd no longer has fails as a whole with
// ErrLeaseNotFound, its other operations (here a delete) not applied.
func TestEtcdTxnPutOnGoneLeaseFailsWhole(t *testing.T) {
	e := newEnv(t)
	if _, err := e.cli.Put(ctx(t), "victim", "v"); err != nil {
		t.Fatalf("Put = %v, want nil", err)
	}
	g, err := e.cli.Grant(ctx(t), 5)
	if err != nil {
		t.Fatalf("Grant = %v, want nil", err)
	}
	if _, err := e.cli.Revoke(ctx(t), g.ID); err != nil {
		t.Fatalf("Revoke = %v, want nil", err)
	}
	_, err = e.cli.Txn(ctx(t)).
		If(clientv3.Compare(clientv3.CreateRevision("victim"), ">", 0)).
		Then(clientv3.OpDelete("victim"), clientv3.OpPut("marker", "", clientv3.WithLease(g.ID))).
		Commit()
	if !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		t.Fatalf("Txn putting on a revoked lease = %v, want ErrLeaseNotFound", err)
	}
	got, err := e.cli.Get(ctx(t), "", clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("Get = %v, want nil", err)
	}
	if len(got.Kvs) != 1 || string(got.Kvs[0].Key) != "victim" {
		t.Fatalf("keys after the refused Txn = %v, want only victim (nothing applied)", got.Kvs)
	}
}
