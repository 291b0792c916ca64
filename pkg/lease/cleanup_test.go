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

// Issue 10, item 8: a TryAcquire or Acquire whose answer is lost leaves the
// key on the session's lease with no Lock for it. The clean-up's first
// attempts fail too (the answers stay held for longer than a call's
// deadline); the session retries until the ghost is gone. A key on the lease
// that the session never tried to acquire (a resumed session's keys, adopted
// or not) stays.
func TestGhostKeyCleanedUp(t *testing.T) {
	for _, tc := range []struct {
		name string
		call func(context.Context, *lease.Session) error
	}{
		{"TryAcquire", func(c context.Context, s *lease.Session) error { _, err := s.TryAcquire(c, "ghost", "h"); return err }},
		{"Acquire", func(c context.Context, s *lease.Session) error { _, err := s.Acquire(c, "ghost", "h"); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) { testGhostKey(t, tc.call) })
	}
}

func testGhostKey(t *testing.T, call func(context.Context, *lease.Session) error) {
	const ttl = 4 * time.Second
	e := newEnv(t)
	direct := e.engine(e.cli)
	old := e.session(direct, ttl)
	if _, err := old.TryAcquire(ctx(t), "kept", "h"); err != nil {
		t.Fatalf("TryAcquire(kept) = %v, want nil", err)
	}
	old.Orphan() // a restart: the new process resumes the lease, adopts nothing yet

	p := etcdtest.NewProxy(t, e.srv.Endpoint())
	s, err := e.engine(etcdtest.NewClient(t, []string{p.Endpoint()})).ResumeSession(ctx(t), old.ID())
	if err != nil {
		t.Fatalf("ResumeSession = %v, want nil", err)
	}
	t.Cleanup(func() { _ = s.Close(ctx(t)) })

	p.PauseRx()
	c, cancel := context.WithTimeout(ctx(t), 300*time.Millisecond)
	err = call(c, s)
	cancel()
	if err == nil {
		t.Fatal("acquire with its answer held = nil, want an error")
	}
	// The transaction applied: the ghost is on the session's lease.
	if h := holding(t, direct, "ghost"); h.Lease != s.ID() {
		t.Fatalf("ghost key lease = %x, want %x (the transaction applied)", h.Lease, s.ID())
	}
	time.Sleep(ttl / 8) // the session's retries fail too
	p.UnpauseRx()

	eventually(t, 3*ttl, func() error {
		if h := holding(t, direct, "ghost"); h.Token != 0 {
			return fmt.Errorf("ghost key still held with token %d on lease %x", h.Token, h.Lease)
		}
		return nil
	})
	if !s.Valid() {
		t.Fatalf("session Valid() = false, want true (err %v)", s.Err())
	}
	if h := holding(t, direct, "kept"); h.Lease != s.ID() {
		t.Fatalf("kept key = lease %x, want %x: the clean-up deleted a key it never tried to acquire", h.Lease, s.ID())
	}
	if _, err := s.TryAcquire(ctx(t), "ghost", "h"); err != nil {
		t.Fatalf("TryAcquire(ghost) after the clean-up = %v, want nil", err)
	}
}

// Issue 10, item 9: a cancelled Acquire whose leave cannot reach etcd (its
// transactions and reads stall in the client; renewals pass) leaves its queue
// entry; the session retries the leave, so a lock that becomes free is not
// blocked by it.
func TestCancelledWaiterEntryCleanedUp(t *testing.T) {
	const ttl = 4 * time.Second
	e := newEnv(t)
	direct := e.engine(e.cli)
	holder, err := e.session(direct, ttl).TryAcquire(ctx(t), "k", "holder")
	if err != nil {
		t.Fatalf("TryAcquire = %v, want nil", err)
	}
	gate := etcdtest.NewGate()
	ws := e.session(e.engine(e.srv.Client(t, gate.DialOptions()...)), ttl)
	c, cancel := context.WithCancel(ctx(t))
	res := make(chan error, 1)
	go func() { _, err := ws.Acquire(c, "k", "waiter"); res <- err }()
	waiters(t, direct, "k", 1)

	gate.Stall("Txn", "Range") // the leave cannot be sent
	t.Cleanup(func() { gate.Unstall("Txn", "Range") })
	cancel()
	if err := <-res; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Acquire = %v, want context.Canceled", err)
	}
	time.Sleep(ttl / 2) // several clean-up attempts fail
	if got := holding(t, direct, "k").Waiters; got != 1 {
		t.Fatalf("waiters while the leave cannot be sent = %d, want 1", got)
	}
	gate.Unstall("Txn", "Range")

	if err := holder.Release(ctx(t)); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	other := e.session(direct, ttl)
	eventually(t, ttl, func() error {
		l, err := other.TryAcquire(ctx(t), "k", "other")
		if err != nil {
			return fmt.Errorf("TryAcquire of the free lock = %w (waiters %d), want nil", err, holding(t, direct, "k").Waiters)
		}
		return l.Release(ctx(t))
	})
	if !ws.Valid() {
		t.Fatalf("waiter session Valid() = false, want true (err %v)", ws.Err())
	}
}

// Issue 10, item 9: an Acquire of a session whose earlier Acquire of the same
// key left its queue entry (here: the process stopped while waiting, and the
// lease was resumed) queues at the back, behind those who came after the
// stale entry; it does not take the stale entry's place.
func TestStaleEntryPlaceNotReused(t *testing.T) {
	const ttl = 4 * time.Second
	e := newEnv(t)
	direct := e.engine(e.cli)
	holder, err := e.session(direct, ttl).TryAcquire(ctx(t), "k", "holder")
	if err != nil {
		t.Fatalf("TryAcquire = %v, want nil", err)
	}
	first := e.session(direct, ttl)
	res := make(chan error, 1)
	go func() { _, err := first.Acquire(ctx(t), "k", "restarted"); res <- err }()
	waiters(t, direct, "k", 1)
	first.Orphan() // its entry stays, with the lease
	if err := <-res; !errors.Is(err, lease.ErrSessionClosed) {
		t.Fatalf("Acquire of an orphaned session = %v, want ErrSessionClosed", err)
	}

	type got struct {
		who string
		l   *lease.Lock
		err error
	}
	order := make(chan got, 2)
	later := e.session(direct, ttl)
	go func() { l, err := later.Acquire(ctx(t), "k", "later"); order <- got{"later", l, err} }()
	waiters(t, direct, "k", 2)
	resumed, err := direct.ResumeSession(ctx(t), first.ID())
	if err != nil {
		t.Fatalf("ResumeSession = %v, want nil", err)
	}
	t.Cleanup(func() { _ = resumed.Close(ctx(t)) })
	go func() { l, err := resumed.Acquire(ctx(t), "k", "restarted"); order <- got{"restarted", l, err} }()
	time.Sleep(500 * time.Millisecond) // let it queue (or take the old place)

	if err := holder.Release(ctx(t)); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	var seq []string
	for range 2 {
		select {
		case g := <-order:
			if g.err != nil {
				t.Fatalf("%s: Acquire = %v, want nil", g.who, g.err)
			}
			seq = append(seq, g.who)
			if err := g.l.Release(ctx(t)); err != nil {
				t.Fatalf("%s: Release = %v, want nil", g.who, err)
			}
		case <-time.After(3 * ttl):
			t.Fatalf("no acquire after %v; order so far %v", 3*ttl, seq)
		}
	}
	if fmt.Sprint(seq) != "[later restarted]" {
		t.Fatalf("order = %v, want [later restarted]: the restarted session barged into its stale place", seq)
	}
}
