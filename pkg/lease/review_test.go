package lease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockwarden/lockwarden/internal/etcdtest"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// Review of issue 10, items 8-9: a process that stops (here: Orphan) while
// one of its Acquire calls waits leaves that call's queue entry on its lease.
// When the lease is resumed (the restart ResumeSession exists for) and the
// resumed session does not happen to Acquire the same key again, nothing
// deletes the entry: the resumed session renews it for as long as it lives,
// and a lock that became free stays blocked for everyone else. Fixed:
// ResumeSession deletes the queue entries on the lease.
func TestResumeDeletesDeadCallsQueueEntry(t *testing.T) {
	const ttl = 3 * time.Second
	e := newEnv(t)
	direct := e.engine(e.cli)
	holder, err := e.session(direct, ttl).TryAcquire(ctx(t), "k", "holder")
	if err != nil {
		t.Fatalf("TryAcquire = %v, want nil", err)
	}
	first := e.session(direct, ttl)
	res := make(chan error, 1)
	go func() { _, err := first.Acquire(ctx(t), "k", "stopped"); res <- err }()
	waiters(t, direct, "k", 1)
	first.Orphan() // the process stops while its Acquire waits
	if err := <-res; !errors.Is(err, lease.ErrSessionClosed) {
		t.Fatalf("Acquire of an orphaned session = %v, want ErrSessionClosed", err)
	}
	resumed, err := direct.ResumeSession(ctx(t), first.ID())
	if err != nil {
		t.Fatalf("ResumeSession = %v, want nil", err)
	}
	t.Cleanup(func() { _ = resumed.Close(context.Background()) })

	if err := holder.Release(ctx(t)); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	other := e.session(direct, ttl)
	c, cancel := context.WithTimeout(ctx(t), 3*ttl)
	defer cancel()
	l, err := other.Acquire(c, "k", "other")
	if err != nil {
		h := holding(t, direct, "k")
		t.Fatalf("Acquire of the free lock = %v (token %d, waiters %d, resumed session valid %v), want nil: "+
			"the stopped call's queue entry, renewed by the resumed lease, blocks the free lock",
			err, h.Token, h.Waiters, resumed.Valid())
	}
	if err := l.Release(ctx(t)); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
}

// Review of issue 10, item 9: a cancelled Acquire whose leave fails leaves
// its entry E (created at revision R) to the session's clean-up. If nothing
// else is written to etcd before the session's next Acquire of the key, that
// Acquire's join sees E with CreateRevision == the transaction's revision R
// and takes it for the entry it just put: it waits in E's place. The clean-up
// then deletes E (it still carries the cancelled call's value), so the live
// waiter loses its place to a waiter that queued after it. Fixed: join
// tells its own entry by value, never by revision alone.
func TestRejoinAtCurrentRevisionKeepsPlace(t *testing.T) {
	const ttl = 4 * time.Second
	e := newEnv(t)
	direct := e.engine(e.cli)
	holder, err := e.session(direct, ttl).TryAcquire(ctx(t), "k", "holder")
	if err != nil {
		t.Fatalf("TryAcquire = %v, want nil", err)
	}
	gate := etcdtest.NewGate()
	ws := e.session(e.engine(e.srv.Client(t, gate.DialOptions()...)), ttl)
	c1, cancel1 := context.WithCancel(ctx(t))
	res := make(chan error, 1)
	go func() { _, err := ws.Acquire(c1, "k", "ws"); res <- err }()
	waiters(t, direct, "k", 1)

	// The leave cannot be sent: its read and the session's retries stall.
	gate.Stall("Txn", "Range")
	t.Cleanup(func() { gate.Unstall("Txn", "Range") })
	cancel1()
	if err := <-res; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Acquire = %v, want context.Canceled", err)
	}

	type got struct {
		who string
		l   *lease.Lock
		err error
	}
	order := make(chan got, 2)
	// Transactions pass again (the clean-up's reads still stall): the
	// session's next Acquire of the key joins the queue before anyone else.
	gate.Unstall("Txn")
	txns := gate.Count("Txn")
	go func() { l, err := ws.Acquire(ctx(t), "k", "ws"); order <- got{"ws", l, err} }()
	eventually(t, 5*time.Second, func() error {
		if gate.Count("Txn") == txns {
			return errors.New("the second Acquire sent no transaction yet")
		}
		return nil
	})
	time.Sleep(200 * time.Millisecond) // let its join apply and its wait start

	later := e.session(direct, ttl)
	go func() { l, err := later.Acquire(ctx(t), "k", "later"); order <- got{"later", l, err} }()
	waiters(t, direct, "k", 2)

	before := queue(t, e, "k")
	gate.Unstall("Range") // the clean-up runs
	time.Sleep(ttl / 2)   // it deletes the entry; the live waiter re-reads and requeues
	t.Logf("queue before the clean-up ran: %v", before)
	t.Logf("queue after: %v", queue(t, e, "k"))

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
	if fmt.Sprint(seq) != "[ws later]" {
		t.Fatalf("order = %v, want [ws later]: the session's clean-up deleted the queue entry of its own live waiter, which queued first", seq)
	}
}

// queue describes key's queue entries: lease, CreateRevision and value.
func queue(t *testing.T, e *env, key string) []string {
	t.Helper()
	resp, err := e.cli.Get(ctx(t), prefix(t)+"/queue/"+key+"/", clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		t.Fatalf("Get queue = %v, want nil", err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		out = append(out, fmt.Sprintf("%s@%d=%s", strings.TrimPrefix(string(kv.Key), prefix(t)), kv.CreateRevision, kv.Value))
	}
	return out
}

// Review of issue 10, item 8: the clean-up reads a ghost key, sees the lost
// call's value, then deletes it guarded by CreateRevision and lease only. A
// write between the read and the delete that changes the value but keeps the
// grant (Engine.UpdateRecord by the token, which a controller reads with
// Inspect) is deleted with it: the clean-up deletes a key that no longer
// carries the value its call wrote, against leftover's contract. Fixed:
// the delete also compares the ModRevision it read.
func TestCleanupSparesChangedKey(t *testing.T) {
	const ttl = 4 * time.Second
	e := newEnv(t)
	direct := e.engine(e.cli)
	p := etcdtest.NewProxy(t, e.srv.Endpoint())
	gate := etcdtest.NewGate()
	s := e.session(e.engine(etcdtest.NewClient(t, []string{p.Endpoint()}, gate.DialOptions()...)), ttl)

	p.PauseRx() // the acquire applies; its answer, and the first clean-up reads, are held
	c, cancel := context.WithTimeout(ctx(t), 300*time.Millisecond)
	_, err := s.TryAcquire(c, "k", "h")
	cancel()
	if !errors.Is(err, lease.ErrUnknownOutcome) {
		t.Fatalf("TryAcquire with its answer held = %v, want ErrUnknownOutcome", err)
	}
	h := holding(t, direct, "k")
	if h.Lease != s.ID() {
		t.Fatalf("ghost key lease = %x, want %x (the transaction applied)", h.Lease, s.ID())
	}
	gate.Stall("Txn") // the clean-up's read passes, its guarded delete waits
	t.Cleanup(func() { gate.Unstall("Txn") })
	txns := gate.Count("Txn")
	p.UnpauseRx()
	eventually(t, 3*ttl, func() error {
		if gate.Count("Txn") == txns {
			return errors.New("the clean-up sent no delete yet")
		}
		return nil
	})
	// Between the clean-up's read and its delete, the key changes.
	if err := direct.UpdateRecord(ctx(t), "k", h.Token, []byte(`{"changed":true}`)); err != nil {
		t.Fatalf("UpdateRecord = %v, want nil", err)
	}
	gate.Unstall("Txn")
	time.Sleep(ttl / 4) // the delete applies, if it will

	after := holding(t, direct, "k")
	if after.Token != h.Token {
		t.Fatalf("key after the clean-up = token %d, want %d with record %s: the clean-up deleted a key whose value "+
			"was no longer the lost call's (its delete compares CreateRevision and lease, not the value it read)",
			after.Token, h.Token, `{"changed":true}`)
	}
}

// Review of issue 10, item 8 (the same ghost, from the other end): Release
// ends the Lock locally first, then deletes the key. When that delete cannot
// be sent (here: the usual `defer l.Release(ctx)` with a ctx that is already
// cancelled, as doc.go's example writes it), the key stays on the session's
// lease with no Lock and no clean-up for it: the lock stays blocked for the
// session's life, for every other session and for this one. Fixed: Release
// sends its delete even after ctx ended (and hands a delete that got no
// answer to the session's clean-up, TestReleaseUnsentHandsKeyToCleanup).
func TestReleaseWithEndedContextDeletes(t *testing.T) {
	const ttl = 3 * time.Second
	e := newEnv(t)
	direct := e.engine(e.cli)
	s := e.session(direct, ttl)
	l, err := s.TryAcquire(ctx(t), "k", "h")
	if err != nil {
		t.Fatalf("TryAcquire = %v, want nil", err)
	}
	done, cancel := context.WithCancel(ctx(t))
	cancel() // the worker's context ended; its deferred Release runs now
	if err := l.Release(done); err != nil {
		t.Fatalf("Release(cancelled ctx) = %v, want nil (the delete is sent anyway)", err)
	}
	if l.Valid() {
		t.Fatal("Lock.Valid() after Release = true, want false")
	}
	other := e.session(direct, ttl)
	c, cancelWait := context.WithTimeout(ctx(t), 3*ttl)
	defer cancelWait()
	ol, err := other.Acquire(c, "k", "other")
	if err != nil {
		h := holding(t, direct, "k")
		_, again := s.TryAcquire(ctx(t), "k", "h")
		t.Fatalf("Acquire after the holder released = %v (key token %d on lease %x, releasing session valid %v; "+
			"its own TryAcquire = %v), want nil: the key of a Release that could not be sent stays for the session's life",
			err, h.Token, h.Lease, s.Valid(), again)
	}
	if err := ol.Release(ctx(t)); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
}

// Review of issue 10, item 8: a Release whose delete is sent but gets no
// answer (its ctx ends first) leaves the key, if it is still there, to the
// session's clean-up, which deletes it while it is still that grant on the
// session's lease.
func TestReleaseUnsentHandsKeyToCleanup(t *testing.T) {
	const ttl = 3 * time.Second
	e := newEnv(t)
	direct := e.engine(e.cli)
	gate := etcdtest.NewGate()
	s := e.session(e.engine(e.srv.Client(t, gate.DialOptions()...)), ttl)
	l, err := s.TryAcquire(ctx(t), "k", "h")
	if err != nil {
		t.Fatalf("TryAcquire = %v, want nil", err)
	}
	gate.Stall("Txn")
	t.Cleanup(func() { gate.Unstall("Txn") })
	c, cancel := context.WithTimeout(ctx(t), 300*time.Millisecond)
	err = l.Release(c)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Release with its transaction stalled = %v, want context.DeadlineExceeded", err)
	}
	if h := holding(t, direct, "k"); h.Token != l.Token() {
		t.Fatalf("key while the delete stalls = token %d, want %d", h.Token, l.Token())
	}
	gate.Unstall("Txn")
	eventually(t, ttl, func() error {
		if h := holding(t, direct, "k"); h.Token != 0 {
			return fmt.Errorf("key still held with token %d (lease %x): nothing deleted the released key", h.Token, h.Lease)
		}
		return nil
	})
	if !s.Valid() {
		t.Fatal("session valid = false after the clean-up, want true")
	}
}

// Review of issue 10, item 6: the tombstone's lease is granted before the
// transaction and renewed once after the commit, when the forcer has the
// transaction's answer. When that answer is slow to come back (here: held by
// the forcer's link for longer than the rest of the lease's TTL), the renewal
// comes too late: the tombstone went with its lease at grant + TTL, not
// commit + TTL, and the waiter takes the lock while the evicted Lock is still
// Valid() by its own clock. ForceRelease then returns ErrLockDelayUnconfirmed,
// after the fact. Fixed: the transaction also puts on a short freshness
// lease granted before the tombstone's, so it cannot apply after that lease
// ended, and the tombstone's lease outlives it by the lock-delay.
func TestForceReleaseSlowAnswerKeepsLockDelay(t *testing.T) {
	const ttl = 4 * time.Second
	e := newEnv(t)
	hgate := etcdtest.NewGate()
	evicted := e.session(e.engine(e.srv.Client(t, hgate.DialOptions()...)), ttl)
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

	fp := etcdtest.NewProxy(t, e.srv.Endpoint())
	gate := etcdtest.NewGate()
	forcer := e.engine(etcdtest.NewClient(t, []string{fp.Endpoint()}, gate.DialOptions()...))
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
	granted := time.Now() // the tombstone's lease was granted just before
	time.Sleep(ttl / 2)   // a transaction slow to be sent
	// An ownership check of the evicted holder, just before the delete.
	if err := h.Update(ctx(t), []byte(`{"still":"working"}`)); err != nil {
		t.Fatalf("Update = %v, want nil", err)
	}
	// The evicted holder's checks and watch stall from now on (its
	// keepalives pass): it cannot see the delete, and stays valid until its
	// last ownership check + TTL - margin.
	hgate.Stall("Txn", "Watch")
	t.Cleanup(func() { hgate.Unstall("Txn", "Watch") })
	fp.PauseRx() // the transaction applies; its answer is slow to come back
	gate.Unstall("Txn")

	var r result
	select {
	case r = <-got:
	case <-time.After(3 * ttl):
		t.Fatal("waiter did not get the lock after the lock-delay")
	}
	fp.UnpauseRx()
	ferr := <-forced
	if r.err != nil {
		t.Fatalf("waiter Acquire = %v, want nil", r.err)
	}
	t.Logf("waiter acquired %v after the tombstone's lease was granted; ForceRelease = %v",
		r.at.Sub(granted).Round(time.Millisecond), ferr)
	if vu := h.ValidUntil(); !vu.Before(r.at) {
		t.Fatalf("the waiter acquired while the evicted lock was valid for %v more (ForceRelease: %v)",
			vu.Sub(r.at).Round(time.Millisecond), ferr)
	}
}
