package lease_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockwarden/lockwarden/internal/etcdtest"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// GrantBatch grants each free key of a batch under its own compares in one
// transaction, and refuses each other key as Grant would, without letting one
// refusal hold up the others.
func TestGrantBatch(t *testing.T) {
	const ttl = 2 * time.Second
	e := newEnv(t)
	eng := e.engine(e.cli)
	s := e.session(eng, ttl)
	other := e.session(e.engine(e.cli), ttl)

	held, err := s.Grant(ctx(t), "ns/held", "uid-h")
	if err != nil {
		t.Fatalf("Grant(ns/held) = %v, want nil", err)
	}
	forced, err := other.TryAcquire(ctx(t), "ns/forced", "x")
	if err != nil {
		t.Fatalf("TryAcquire(ns/forced) = %v, want nil", err)
	}
	if err := eng.ForceRelease(ctx(t), "ns/forced", forced.Token()); err != nil {
		t.Fatalf("ForceRelease = %v, want nil", err)
	}
	queued := e.session(e.engine(e.cli), ttl)
	owner, err := queued.TryAcquire(ctx(t), "ns/queued", "owner")
	if err != nil {
		t.Fatalf("TryAcquire(ns/queued) = %v, want nil", err)
	}
	waiter := e.session(e.engine(e.cli), ttl)
	wctx, cancelWait := context.WithCancel(ctx(t))
	waited := make(chan error, 1)
	go func() { _, err := waiter.Acquire(wctx, "ns/queued", "waiter"); waited <- err }()
	t.Cleanup(func() {
		cancelWait()
		if err := <-waited; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("waiter's Acquire = %v, want nil or context.Canceled", err)
		}
	})
	waiters(t, eng, "ns/queued", 1)
	if err := owner.Release(ctx(t)); err != nil {
		t.Fatalf("Release(ns/queued) = %v, want nil", err)
	}
	// The waiter now takes ns/queued; until it does the queue is not empty. Either way the batch
	// must not barge past it.

	reqs := []lease.GrantRequest{
		{Key: "ns/a", Holder: "uid-a", Record: json.RawMessage(`{"phase":"Held"}`)},
		{Key: "ns/held", Holder: "uid-b"},
		{Key: "ns/b", Holder: "uid-b"},
		{Key: "ns/forced", Holder: "uid-f"},
		{Key: "/abs", Holder: "uid-x"},
		{Key: "ns/a", Holder: "uid-dup"},
		{Key: "ns/c", Holder: "uid-c", Record: json.RawMessage(`{`)},
		{Key: "ns/queued", Holder: "uid-q"},
		{Key: "ns/d", Holder: "uid-d"},
	}
	results, err := s.GrantBatch(ctx(t), reqs)
	if err != nil || len(results) != len(reqs) {
		t.Fatalf("GrantBatch = %d results, %v, want %d, nil", len(results), err, len(reqs))
	}
	var token int64
	for _, i := range []int{0, 2, 8} {
		r, q := results[i], reqs[i]
		if r.Err != nil || r.Token <= held {
			t.Fatalf("GrantBatch result %d (%s) = %+v, want a token above %d", i, q.Key, r, held)
		}
		if token != 0 && r.Token != token {
			t.Fatalf("token of %s = %d, want %d: one transaction, one revision", q.Key, r.Token, token)
		}
		token = r.Token
		if h := holding(t, eng, q.Key); h.Token != r.Token || h.Holder != q.Holder || h.Lease != s.ID() || string(h.Record) != string(q.Record) {
			t.Fatalf("Inspect(%s) = %+v, want token %d holder %s lease %x record %s", q.Key, h, r.Token, q.Holder, s.ID(), q.Record)
		}
	}
	if he := asHeld(t, results[1].Err); he.Holder != "uid-h" || he.Token != held || results[1].Token != 0 {
		t.Fatalf("result for ns/held = %+v (%+v), want uid-h's HeldError with token %d", results[1], *he, held)
	}
	for i, want := range map[int]error{3: lease.ErrLocked, 4: lease.ErrInvalid, 5: lease.ErrInvalid, 6: lease.ErrInvalid} {
		if r := results[i]; !errors.Is(r.Err, want) || r.Token != 0 {
			t.Fatalf("result %d (%s) = %+v, want %v", i, reqs[i].Key, r, want)
		}
	}
	if h := holding(t, eng, "ns/a"); h.Holder != "uid-a" {
		t.Fatalf("ns/a held by %q, want uid-a: the duplicate request must not replace the first", h.Holder)
	}
	if h := holding(t, eng, "ns/queued"); h.Holder == "uid-q" {
		t.Fatalf("ns/queued granted to uid-q past its queued waiter")
	}
	if r := results[7]; r.Err == nil {
		t.Fatalf("result for ns/queued = %+v, want a refusal (held by the waiter, or its queue not empty)", r)
	}

	// Each lock's own token still grows: a batch after a release grants a larger one.
	if err := eng.Release(ctx(t), "ns/a", token); err != nil {
		t.Fatalf("Release(ns/a) = %v, want nil", err)
	}
	again, err := s.GrantBatch(ctx(t), []lease.GrantRequest{{Key: "ns/a", Holder: "uid-a2"}})
	if err != nil || again[0].Err != nil || again[0].Token <= token {
		t.Fatalf("GrantBatch(ns/a again) = %+v, %v, want a token above %d", again, err, token)
	}
}

// A failed guard writes nothing for the whole batch; a batch larger than
// MaxGrantBatch is refused before it is sent, and MaxGrantBatch is exactly
// what a real etcd with its default --max-txn-ops accepts.
func TestGrantBatchGuardAndSize(t *testing.T) {
	const ttl = 2 * time.Second
	e := newEnv(t)
	eng := e.engine(e.cli)
	s := e.session(eng, ttl)
	failing := lease.WithGuard(clientv3.Compare(clientv3.CreateRevision(prefix(t)+"/nothing"), "=", 1))
	passing := lease.WithGuard(clientv3.Compare(clientv3.CreateRevision(prefix(t)+"/nothing"), "=", 0))

	_, err := s.GrantBatch(ctx(t), []lease.GrantRequest{{Key: "g/a", Holder: "u"}, {Key: "g/b", Holder: "u"}}, failing)
	if !errors.Is(err, lease.ErrGuardFailed) {
		t.Fatalf("GrantBatch with a failing guard = %v, want ErrGuardFailed", err)
	}
	for _, k := range []string{"g/a", "g/b"} {
		if h := holding(t, eng, k); h.Token != 0 {
			t.Fatalf("Inspect(%s) = token %d after a failed guard, want 0", k, h.Token)
		}
	}

	limit := eng.MaxGrantBatch(1)
	if limit != 125 {
		t.Fatalf("MaxGrantBatch(1) = %d, want 125 under 128 operations per transaction", limit)
	}
	batch := func(n int, prefix string) []lease.GrantRequest {
		reqs := make([]lease.GrantRequest, n)
		for i := range reqs {
			reqs[i] = lease.GrantRequest{Key: fmt.Sprintf("%s/%d", prefix, i), Holder: "u"}
		}
		return reqs
	}
	results, err := s.GrantBatch(ctx(t), batch(limit, "full"), passing)
	if err != nil {
		t.Fatalf("GrantBatch(%d) = %v, want nil", limit, err)
	}
	for i, r := range results {
		if r.Err != nil || r.Token == 0 {
			t.Fatalf("GrantBatch(%d) result %d = %+v, want granted", limit, i, r)
		}
	}
	if _, err := s.GrantBatch(ctx(t), batch(limit+1, "over"), passing); !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("GrantBatch(%d) = %v, want ErrInvalid", limit+1, err)
	}
	// The bound is etcd's: an engine told the server takes more sends one more, and etcd
	// refuses it as too many operations, applying nothing.
	loose := lease.NewEngine(e.cli, lease.WithPrefix(prefix(t)), lease.WithMaxTxnOps(129))
	ls := e.session(loose, ttl)
	if _, err := ls.GrantBatch(ctx(t), batch(limit+1, "over"), passing); !errors.Is(err, rpctypes.ErrTooManyOps) || errors.Is(err, lease.ErrUnknownOutcome) {
		t.Fatalf("GrantBatch(%d) past etcd's limit = %v, want etcd's ErrTooManyOps (a definite refusal)", limit+1, err)
	}
	if h := holding(t, eng, "over/0"); h.Token != 0 {
		t.Fatalf("Inspect(over/0) = token %d after a refused batch, want 0", h.Token)
	}
}

// A batch whose answer is lost is reported as of unknown outcome for all of
// it, and nothing is cleaned up behind the caller: a re-read settles it.
func TestGrantBatchLostAnswer(t *testing.T) {
	const ttl = 2 * time.Second
	e := newEnv(t)
	p := etcdtest.NewProxy(t, e.srv.Endpoint())
	eng := e.engine(etcdtest.NewClient(t, []string{p.Endpoint()}))
	s := e.session(eng, ttl)
	reqs := []lease.GrantRequest{{Key: "l/a", Holder: "uid-a"}, {Key: "l/b", Holder: "uid-b"}}
	err := lostAnswer(t, p, func(c context.Context) error { _, err := s.GrantBatch(c, reqs); return err })
	if !errors.Is(err, lease.ErrUnknownOutcome) {
		t.Fatalf("GrantBatch with a lost answer = %v, want ErrUnknownOutcome", err)
	}
	time.Sleep(ttl) // three ownership-check periods: a clean-up would have run
	for _, r := range reqs {
		if h := holding(t, eng, r.Key); h.Holder != r.Holder || h.Lease != s.ID() {
			t.Fatalf("Inspect(%s) = holder %q lease %x, want %s on %x (settled by the caller, not deleted)", r.Key, h.Holder, h.Lease, r.Holder, s.ID())
		}
	}
	if _, err := s.GrantBatch(ctx(t), nil); err != nil {
		t.Fatalf("GrantBatch(nothing) = %v, want nil", err)
	}
}
