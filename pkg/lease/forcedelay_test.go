package lease_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lockwarden/lockwarden/internal/etcdtest"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// Issue 10, item 6: ForceRelease's lock-delay must count from after its
// transaction committed. The evicted holder keeps confirming ownership while
// the transaction is held back (a slow commit, a paused client), then is cut
// off just before it applies: its validity reaches TTL - margin past its last
// check. A waiter must not get the lock while that validity lasts.
func TestForceReleaseDelayedTransaction(t *testing.T) {
	const ttl = 3 * time.Second
	e := newEnv(t)
	p := etcdtest.NewProxy(t, e.srv.Endpoint())
	evicted := e.session(e.engine(etcdtest.NewClient(t, []string{p.Endpoint()})), ttl)
	h, err := evicted.TryAcquire(ctx(t), "k", "stuck")
	if err != nil {
		t.Fatalf("TryAcquire = %v, want nil", err)
	}
	waiter := e.session(e.engine(e.cli), ttl)
	type result struct {
		l   *lease.Lock
		at  time.Time
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := waiter.Acquire(ctx(t), "k", "next")
		got <- result{l, time.Now(), err}
	}()
	waiters(t, e.engine(e.cli), "k", 1)

	gate := etcdtest.NewGate()
	forcer := e.engine(e.srv.Client(t, gate.DialOptions()...))
	gate.Stall("Txn")
	t.Cleanup(func() { gate.Unstall("Txn") })
	forced := make(chan error, 1)
	go func() { forced <- forcer.ForceRelease(context.Background(), "k", h.Token()) }()
	eventually(t, 5*time.Second, func() error {
		if gate.Count("Txn") == 0 {
			return errors.New("ForceRelease has not sent its transaction yet")
		}
		return nil
	})
	time.Sleep(ttl - 500*time.Millisecond) // the holder's checks go on meanwhile
	p.Pause()                              // cut off: it cannot see the delete
	gate.Unstall("Txn")
	if err := <-forced; err != nil {
		t.Fatalf("ForceRelease = %v, want nil", err)
	}

	var r result
	select {
	case r = <-got:
	case <-time.After(3 * ttl):
		t.Fatal("waiter did not get the lock after the lock-delay")
	}
	if r.err != nil {
		t.Fatalf("waiter Acquire = %v, want nil", r.err)
	}
	if vu := h.ValidUntil(); !vu.Before(r.at) {
		t.Fatalf("the waiter acquired while the evicted lock was valid for %v more", vu.Sub(r.at))
	}
	if r.l.Token() <= h.Token() {
		t.Fatalf("next token = %d, want > %d", r.l.Token(), h.Token())
	}
}

// Issue 10, item 7, and the review of item 6: a ForceRelease whose answer
// was lost revokes its freshness lease, which fences the transaction off (a
// put on a revoked lease fails it as a whole), then reads: here the
// transaction never left the client, so ForceRelease knows it did not apply
// and leaves nothing behind.
func TestForceReleaseLostAnswerFencedOff(t *testing.T) {
	const ttl = 2 * time.Second
	e := newEnv(t)
	h, err := e.session(e.engine(e.cli), ttl).TryAcquire(ctx(t), "k", "stuck")
	if err != nil {
		t.Fatalf("TryAcquire = %v, want nil", err)
	}
	gate := etcdtest.NewGate()
	forcer := e.engine(e.srv.Client(t, gate.DialOptions()...))
	before := leases(t, e.cli)
	gate.Stall("Txn")
	c, cancel := context.WithTimeout(ctx(t), 500*time.Millisecond)
	err = forcer.ForceRelease(c, "k", h.Token())
	cancel()
	gate.Unstall("Txn")
	if err == nil || errors.Is(err, lease.ErrUnknownOutcome) {
		t.Fatalf("ForceRelease with its transaction stalled = %v, want a known failure (not ErrUnknownOutcome)", err)
	}
	if got := holding(t, e.engine(e.cli), "k"); got.Token != h.Token() || got.LockDelay {
		t.Fatalf("after a fenced-off ForceRelease: token %d lock-delay %v, want %d false", got.Token, got.LockDelay, h.Token())
	}
	for id := range leases(t, e.cli) {
		if !before[id] {
			t.Fatalf("lease %x left behind by a ForceRelease shown not to have applied", id)
		}
	}
}

// Issue 10, item 7: when even the fence's revoke gets no answer, the outcome
// is unknown and the tombstone's lease is never revoked: the transaction may
// have applied, and a revoke would delete its tombstone at once (a lock-delay
// of zero). Unrenewed leases expire by themselves.
func TestForceReleaseUnknownOutcomeKeepsLease(t *testing.T) {
	const ttl = 2 * time.Second
	e := newEnv(t)
	h, err := e.session(e.engine(e.cli), ttl).TryAcquire(ctx(t), "k", "stuck")
	if err != nil {
		t.Fatalf("TryAcquire = %v, want nil", err)
	}
	gate := etcdtest.NewGate()
	forcer := e.engine(e.srv.Client(t, gate.DialOptions()...))
	before := leases(t, e.cli)
	gate.Stall("Txn", "LeaseRevoke")
	c, cancel := context.WithTimeout(ctx(t), 500*time.Millisecond)
	err = forcer.ForceRelease(c, "k", h.Token())
	cancel()
	gate.Unstall("Txn", "LeaseRevoke")
	if !errors.Is(err, lease.ErrUnknownOutcome) {
		t.Fatalf("ForceRelease with its transaction and revokes stalled = %v, want ErrUnknownOutcome", err)
	}
	var delayLease []string
	for id := range leases(t, e.cli) {
		if before[id] {
			continue
		}
		ttlr, err := e.cli.TimeToLive(ctx(t), id)
		if err != nil {
			t.Fatalf("TimeToLive(%x) = %v, want nil", id, err)
		}
		if time.Duration(ttlr.GrantedTTL)*time.Second > lease.MinTTL {
			delayLease = append(delayLease, fmt.Sprintf("%x", id))
		}
	}
	if len(delayLease) != 1 {
		t.Fatalf("lock-delay leases after an unknown outcome = %v, want exactly one (not revoked)", delayLease)
	}
}
