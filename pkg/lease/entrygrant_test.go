package lease_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lockwarden/lockwarden/internal/etcdtest"
	"github.com/lockwarden/lockwarden/pkg/fence"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// acquired is the outcome of an Acquire run in the background.
type acquired struct {
	l   *lease.Lock
	err error
}

// acquireAsync starts s.Acquire(key, holder) and returns its outcome channel.
func acquireAsync(t *testing.T, s *lease.Session, key, holder string, opts ...lease.LockOption) <-chan acquired {
	c := make(chan acquired, 1)
	go func() {
		l, err := s.Acquire(ctx(t), key, holder, opts...)
		c <- acquired{l, err}
	}()
	return c
}

// await returns the outcome of an acquireAsync, failing after timeout.
func await(t *testing.T, c <-chan acquired, timeout time.Duration, who string) acquired {
	t.Helper()
	select {
	case a := <-c:
		return a
	case <-time.After(timeout):
		t.Fatalf("%s: no Acquire result after %v", who, timeout)
		return acquired{}
	}
}

// entryToken returns the CreateRevision of session s's queue entry for key.
func entryToken(t *testing.T, e *env, key string, s *lease.Session) int64 {
	t.Helper()
	resp, err := e.cli.Get(ctx(t), fmt.Sprintf("%s/queue/%s/%016x", prefix(t), key, int64(s.ID())))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("Get queue entry of %x = %v (err %v), want one", s.ID(), resp, err)
	}
	return resp.Kvs[0].CreateRevision
}

// Issue 24: a blocking Acquire that queued takes the lock without a write of
// its own: its queue entry is the grant once the lock key is gone, with the
// entry's CreateRevision as token. Everything that works on a grant by name
// and token sees it: Inspect, TryAcquire's HeldError, fence.Check,
// UpdateRecord, Release, ForceRelease (whose lock-delay holds the next
// waiter off); a waiting entry is never taken for the grant.
func TestQueuedEntryIsTheGrant(t *testing.T) {
	const ttl = 2 * time.Second
	e := newEnv(t)
	eng := e.engine(e.cli)
	first, err := e.session(eng, ttl).TryAcquire(ctx(t), "k", "first")
	if err != nil {
		t.Fatalf("TryAcquire = %v, want nil", err)
	}
	ws, xs := e.session(eng, ttl), e.session(eng, ttl)
	record := json.RawMessage(`{"phase":"Held"}`)
	wc := acquireAsync(t, ws, "k", "w", lease.WithRecord(record))
	waiters(t, eng, "k", 1)
	xc := acquireAsync(t, xs, "k", "x")
	waiters(t, eng, "k", 2)
	xToken := entryToken(t, e, "k", xs)

	if err := first.Release(ctx(t)); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	a := await(t, wc, 5*time.Second, "w")
	if a.err != nil {
		t.Fatalf("w: Acquire = %v, want nil", a.err)
	}
	w := a.l
	if w.Token() <= first.Token() || !strings.Contains(w.Path(), "/queue/") {
		t.Fatalf("w's grant = token %d at %s, want a token above %d at its queue entry", w.Token(), w.Path(), first.Token())
	}
	h := holding(t, eng, "k")
	if h.Holder != "w" || h.Token != w.Token() || h.Lease != ws.ID() || string(h.Record) != string(record) || h.Waiters != 1 {
		t.Fatalf("Inspect = %+v, want holder w, token %d, lease %x, record %s, 1 waiter", h, w.Token(), ws.ID(), record)
	}
	_, err = e.session(eng, ttl).TryAcquire(ctx(t), "k", "other")
	if he := asHeld(t, err); he.Holder != "w" || he.Token != w.Token() {
		t.Fatalf("HeldError = %+v, want holder w with token %d", *he, w.Token())
	}
	if err := fence.Check(ctx(t), eng, "k", w.Token()); err != nil {
		t.Fatalf("fence.Check(w's token) = %v, want nil", err)
	}
	// x's entry is waiting, not the grant: nothing acts on it by its token.
	if err := eng.Release(ctx(t), "k", xToken); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("Release(waiting entry's revision) = %v, want ErrNotHeld", err)
	}
	if err := eng.UpdateRecord(ctx(t), "k", xToken, json.RawMessage(`{}`)); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("UpdateRecord(waiting entry's revision) = %v, want ErrNotHeld", err)
	}
	if err := eng.ForceRelease(ctx(t), "k", xToken); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("ForceRelease(waiting entry's revision) = %v, want ErrNotHeld", err)
	}
	releasing := json.RawMessage(`{"phase":"Releasing"}`)
	if err := eng.UpdateRecord(ctx(t), "k", w.Token(), releasing); err != nil {
		t.Fatalf("UpdateRecord(w's token) = %v, want nil", err)
	}
	if h := holding(t, eng, "k"); string(h.Record) != string(releasing) || h.Token != w.Token() {
		t.Fatalf("Inspect after UpdateRecord = token %d record %s, want %d %s", h.Token, h.Record, w.Token(), releasing)
	}
	if !w.Valid() {
		t.Fatalf("w.Valid() = false after UpdateRecord, want true (err %v)", w.Err())
	}

	// ForceRelease deletes w's entry and puts the tombstone: x, now the
	// oldest entry, waits for the lock-delay.
	forced := time.Now()
	if err := eng.ForceRelease(ctx(t), "k", w.Token()); err != nil {
		t.Fatalf("ForceRelease(w's token) = %v, want nil", err)
	}
	waitClosed(t, w.Done(), ttl, "w's Done after ForceRelease")
	if h := holding(t, eng, "k"); h.Token != 0 || !h.LockDelay || h.Waiters != 1 {
		t.Fatalf("Inspect after ForceRelease = token %d lock-delay %v waiters %d, want 0, true, 1", h.Token, h.LockDelay, h.Waiters)
	}
	a = await(t, xc, 4*ttl, "x")
	if a.err != nil {
		t.Fatalf("x: Acquire = %v, want nil", a.err)
	}
	if d := time.Since(forced); d < ttl {
		t.Fatalf("x acquired %v after the ForceRelease, want at least the evicted lease's TTL %v", d, ttl)
	}
	if a.l.Token() != xToken || a.l.Token() <= w.Token() {
		t.Fatalf("x's token = %d, want its entry's revision %d, above w's %d", a.l.Token(), xToken, w.Token())
	}
	if err := eng.Release(ctx(t), "k", a.l.Token()); err != nil {
		t.Fatalf("Release(x's token) = %v, want nil", err)
	}
	if h := holding(t, eng, "k"); h.Token != 0 || h.Waiters != 0 {
		t.Fatalf("Inspect after Release = token %d waiters %d, want a free lock", h.Token, h.Waiters)
	}
	waitClosed(t, a.l.Done(), ttl, "x's Done after its grant was released by token")
}

// A queued grant is a grant of its lease like a lock key: a resumed session
// lists it (Keys), keeps it (ResumeSession deletes only waiting entries),
// and can Adopt it.
func TestQueuedGrantResumed(t *testing.T) {
	const ttl = 2 * time.Second
	e := newEnv(t)
	eng := e.engine(e.cli)
	first, err := e.session(eng, ttl).TryAcquire(ctx(t), "k", "first")
	if err != nil {
		t.Fatalf("TryAcquire = %v, want nil", err)
	}
	old := e.session(eng, ttl)
	wc := acquireAsync(t, old, "k", "w")
	waiters(t, eng, "k", 1)
	if err := first.Release(ctx(t)); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	a := await(t, wc, 5*time.Second, "w")
	if a.err != nil {
		t.Fatalf("Acquire = %v, want nil", a.err)
	}
	// A second lock of the old session is queued behind another holder's:
	// its entry is waiting, and goes with the resume.
	other, err := e.session(eng, ttl).TryAcquire(ctx(t), "busy", "other")
	if err != nil {
		t.Fatalf("TryAcquire(busy) = %v, want nil", err)
	}
	bc := acquireAsync(t, old, "busy", "w")
	waiters(t, eng, "busy", 1)
	old.Orphan()
	if b := await(t, bc, 5*time.Second, "busy waiter"); !errors.Is(b.err, lease.ErrSessionClosed) {
		t.Fatalf("Acquire(busy) of an orphaned session = %v, want ErrSessionClosed", b.err)
	}

	s, err := eng.ResumeSession(ctx(t), old.ID())
	if err != nil {
		t.Fatalf("ResumeSession = %v, want nil", err)
	}
	t.Cleanup(func() { _ = s.Close(ctx(t)) })
	keys, err := s.Keys(ctx(t))
	if err != nil {
		t.Fatalf("Keys = %v, want nil", err)
	}
	if fmt.Sprint(keys) != fmt.Sprint(map[string]int64{"k": a.l.Token()}) {
		t.Fatalf("Keys = %v, want k with token %d only", keys, a.l.Token())
	}
	waiters(t, eng, "busy", 0)
	adopted, err := s.Adopt(ctx(t), "k", a.l.Token())
	if err != nil {
		t.Fatalf("Adopt(k, %d) = %v, want nil", a.l.Token(), err)
	}
	if adopted.Path() != a.l.Path() || adopted.Holder() != "w" {
		t.Fatalf("adopted = %s holder %q, want %s holder w", adopted.Path(), adopted.Holder(), a.l.Path())
	}
	if h := holding(t, eng, "k"); h.Token != a.l.Token() || h.Lease != s.ID() {
		t.Fatalf("Inspect = token %d lease %x, want %d %x", h.Token, h.Lease, a.l.Token(), s.ID())
	}
	if err := adopted.Release(ctx(t)); err != nil {
		t.Fatalf("Release(adopted) = %v, want nil", err)
	}
	if h := holding(t, eng, "k"); h.Token != 0 {
		t.Fatalf("Inspect after Release = token %d, want 0", h.Token)
	}
	if err := other.Release(ctx(t)); err != nil {
		t.Fatalf("Release(busy) = %v, want nil", err)
	}
}

// Tokens grow across every kind of grant, handed over or taken: a lock key,
// queued grants in FIFO order, then a lock key again.
func TestHandedOverTokensGrow(t *testing.T) {
	const ttl = 2 * time.Second
	e := newEnv(t)
	eng := e.engine(e.cli)
	l, err := e.session(eng, ttl).TryAcquire(ctx(t), "k", "h0")
	if err != nil {
		t.Fatalf("TryAcquire = %v, want nil", err)
	}
	const n = 4
	cs := make([]<-chan acquired, n)
	for i := range cs {
		cs[i] = acquireAsync(t, e.session(eng, ttl), "k", fmt.Sprintf("h%d", i+1))
		waiters(t, eng, "k", int64(i+1))
	}
	last := l.Token()
	for i := range cs {
		if err := l.Release(ctx(t)); err != nil {
			t.Fatalf("Release = %v, want nil", err)
		}
		a := await(t, cs[i], 5*time.Second, fmt.Sprintf("waiter %d", i))
		if a.err != nil {
			t.Fatalf("waiter %d: Acquire = %v, want nil", i, a.err)
		}
		if a.l.Token() <= last {
			t.Fatalf("waiter %d: token %d, want above %d", i, a.l.Token(), last)
		}
		last, l = a.l.Token(), a.l
	}
	if err := l.Release(ctx(t)); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	again, err := e.session(eng, ttl).Acquire(ctx(t), "k", "again")
	if err != nil {
		t.Fatalf("Acquire of the free lock = %v, want nil", err)
	}
	if again.Token() <= last || again.Path() != eng.Path("k") {
		t.Fatalf("free lock's grant = token %d at %s, want above %d at %s", again.Token(), again.Path(), last, eng.Path("k"))
	}
}

// A queued grant whose Lock lapsed (its checks could not get through) stays
// the grant, as a lapsed lock key does: the session's next Acquire of the key
// reports it held by the session instead of deleting it to queue, and Adopt
// takes it back.
func TestLapsedQueuedGrantStays(t *testing.T) {
	const ttl = 2 * time.Second
	e := newEnv(t)
	eng := e.engine(e.cli)
	first, err := e.session(eng, ttl).TryAcquire(ctx(t), "k", "first")
	if err != nil {
		t.Fatalf("TryAcquire = %v, want nil", err)
	}
	gate := etcdtest.NewGate()
	s := e.session(e.engine(e.srv.Client(t, gate.DialOptions()...)), ttl)
	wc := acquireAsync(t, s, "k", "w")
	waiters(t, eng, "k", 1)
	if err := first.Release(ctx(t)); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	a := await(t, wc, 5*time.Second, "w")
	if a.err != nil {
		t.Fatalf("Acquire = %v, want nil", a.err)
	}
	gate.Stall("Txn") // ownership checks cannot get through; renewals can
	t.Cleanup(func() { gate.Unstall("Txn") })
	waitClosed(t, a.l.Done(), 2*ttl, "lapsed lock's Done")
	if !errors.Is(a.l.Err(), lease.ErrExpired) {
		t.Fatalf("lapsed lock Err() = %v, want ErrExpired", a.l.Err())
	}
	gate.Unstall("Txn")
	_, err = s.Acquire(ctx(t), "k", "w")
	if he := asHeld(t, err); he.Token != a.l.Token() || he.Lease != s.ID() {
		t.Fatalf("HeldError = %+v, want token %d on lease %x", *he, a.l.Token(), s.ID())
	}
	if h := holding(t, eng, "k"); h.Token != a.l.Token() {
		t.Fatalf("Inspect = token %d, want %d (the lapsed grant stays)", h.Token, a.l.Token())
	}
	adopted, err := s.Adopt(ctx(t), "k", a.l.Token())
	if err != nil {
		t.Fatalf("Adopt = %v, want nil", err)
	}
	if err := adopted.Release(ctx(t)); err != nil {
		t.Fatalf("Release(adopted) = %v, want nil", err)
	}
}
