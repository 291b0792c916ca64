package lease_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/lockwarden/lockwarden/internal/etcdtest"
	"github.com/lockwarden/lockwarden/pkg/fence"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// slack absorbs timer and scheduling delay (with -race, on 2 cores) on top of
// a deadline the engine computed itself.
const slack = 400 * time.Millisecond

// Failure 2: a renewal that only checks that the key exists lets a delayed
// renewal from an ex-holder extend the new holder's lock. Timeline: A holds;
// A's traffic to etcd is held in a proxy past the TTL; etcd expires A's
// lease; B acquires; A's late traffic arrives. A must have stopped by its own
// clock before B started, and nothing late from A may touch B's grant.
func TestDelayedTrafficFromExHolder(t *testing.T) {
	const ttl = 2 * time.Second
	e := newEnv(t)
	p := etcdtest.NewProxy(t, e.srv.Endpoint())
	engA := e.engine(etcdtest.NewClient(t, []string{p.Endpoint()}))
	engB := e.engine(e.cli)
	sA, sB := e.session(engA, ttl), e.session(engB, ttl)
	margin := sA.Margin()

	a, err := sA.TryAcquire(ctx(t), "db", "A")
	if err != nil {
		t.Fatalf("A: TryAcquire = %v, want nil", err)
	}

	// From here on A's requests reach etcd only when the proxy lets them.
	paused := time.Now()
	p.PauseTx()
	late := context.Background() // late calls must outlive the pause
	lateWrite := make(chan error, 1)
	go func() {
		_, err := fence.Put(late, a, prefix(t)+"/resource", "written by A")
		lateWrite <- err
	}()
	lateUpdate := make(chan error, 1)
	go func() { lateUpdate <- a.Update(late, json.RawMessage(`{"by":"A"}`)) }()

	// A's validity ends by its own clock: the last confirmed renewal or
	// ownership check was sent before the pause.
	aDone := waitClosed(t, a.Done(), 2*ttl, "A's Done")
	if limit := paused.Add(ttl - margin + slack); aDone.After(limit) {
		t.Errorf("A's Done closed %v after the pause, want within TTL - margin (%v) + %v",
			aDone.Sub(paused), ttl-margin, slack)
	}
	if a.Valid() {
		t.Errorf("A.Valid() = true after Done closed, want false")
	}
	if cause := context.Cause(a.Context()); !errors.Is(cause, lease.ErrSessionExpired) && !errors.Is(cause, lease.ErrExpired) {
		t.Errorf("A's context cause = %v, want ErrSessionExpired or ErrExpired", cause)
	}
	// A's release is sent now, still held in the proxy, and lands after B's
	// grant.
	lateRelease := make(chan error, 1)
	go func() { lateRelease <- a.Release(late) }()

	// etcd expires A's lease at least TTL after the last renewal it received.
	var b *lease.Lock
	eventually(t, 3*ttl, func() error {
		b, err = sB.TryAcquire(ctx(t), "db", "B")
		return err
	})
	bAcquired := time.Now()
	if vu := a.ValidUntil(); !vu.Before(bAcquired) {
		t.Fatalf("A valid until %v after B acquired, want A's validity over first", vu.Sub(bAcquired))
	}
	if b.Token() <= a.Token() {
		t.Fatalf("B's token = %d, want > A's %d", b.Token(), a.Token())
	}

	// The late traffic arrives.
	p.UnpauseTx()
	for name, c := range map[string]chan error{"fence.Put": lateWrite, "Update": lateUpdate, "Release": lateRelease} {
		select {
		case err := <-c:
			if !errors.Is(err, lease.ErrNotHeld) {
				t.Errorf("A's late %s = %v, want ErrNotHeld", name, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("A's late %s did not return", name)
		}
	}

	// B's grant is untouched: same token, B's lease, B's record, and B's
	// lease is alive with at most its own TTL.
	h := holding(t, engB, "db")
	if h.Token != b.Token() || h.Lease != sB.ID() || h.Holder != "B" {
		t.Errorf("Inspect = token %d lease %x holder %q, want token %d lease %x holder B",
			h.Token, h.Lease, h.Holder, b.Token(), sB.ID())
	}
	ttlResp, err := e.cli.TimeToLive(ctx(t), sB.ID())
	if err != nil || ttlResp.TTL <= 0 || ttlResp.TTL > int64(ttl/time.Second) {
		t.Errorf("B's lease TTL = %v (err %v), want in (0, %d]", ttlResp.TTL, err, ttl/time.Second)
	}
	if !b.Valid() {
		t.Errorf("B.Valid() = false, want true")
	}
	got, err := e.cli.Get(ctx(t), prefix(t)+"/resource")
	if err != nil || len(got.Kvs) != 0 {
		t.Errorf("resource = %v (err %v), want no write from A", got.Kvs, err)
	}
}
