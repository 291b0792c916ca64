package controllers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockwarden/lockwarden/internal/etcdtest"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// batchEnv is a grant session on a real etcd whose Txn calls a gate counts and can stall,
// and an election lock (on another client) whose IsOwner guards the batches.
type batchEnv struct {
	gate     *etcdtest.Gate
	engine   *lease.Engine
	grants   *lease.Session
	election *lease.Lock
}

func newBatchEnv(t *testing.T) *batchEnv {
	t.Helper()
	srv := etcdtest.Start(t)
	e := &batchEnv{gate: etcdtest.NewGate()}
	prefix := "/batch/" + t.Name()
	e.engine = lease.NewEngine(srv.Client(t, e.gate.DialOptions()...), lease.WithPrefix(prefix))
	electionEngine := lease.NewEngine(srv.Client(t), lease.WithPrefix(prefix))
	ctx := t.Context()
	var err error
	if e.grants, err = e.engine.NewSession(ctx, 10*time.Second); err != nil {
		t.Fatalf("NewSession = %v", err)
	}
	es, err := electionEngine.NewSession(ctx, 10*time.Second)
	if err != nil {
		t.Fatalf("NewSession(election) = %v", err)
	}
	if e.election, err = es.TryAcquire(ctx, ElectionKey, "replica"); err != nil {
		t.Fatalf("TryAcquire(election) = %v", err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = e.election.Release(cctx)
		_ = es.Close(cctx)
		_ = e.grants.Close(cctx)
	})
	return e
}

func (e *batchEnv) batcher(t *testing.T, guard func() clientv3.Cmp) *grantBatcher {
	t.Helper()
	b := newGrantBatcher(e.grants, guard)
	if b == nil {
		t.Fatal("newGrantBatcher(*lease.Session) = nil, want a batcher")
	}
	return b
}

// inFlight starts the grant of key and waits until its batch (of one) is stalled at the
// gate: the calls that follow queue behind it.
func (e *batchEnv) inFlight(ctx context.Context, t *testing.T, b *grantBatcher, key string) func() map[string]grantOutcome {
	t.Helper()
	before := e.gate.Count("Txn")
	wait := grantAll(ctx, b, []string{key}, nil)
	deadline := time.Now().Add(5 * time.Second)
	for e.gate.Count("Txn") == before {
		if time.Now().After(deadline) {
			t.Fatalf("the grant of %s never reached etcd", key)
		}
		time.Sleep(5 * time.Millisecond)
	}
	queued(t, b, 0)
	return wait
}

// queued waits until b has n calls waiting behind the batch in flight.
func queued(t *testing.T, b *grantBatcher, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		b.mu.Lock()
		got := len(b.queue)
		b.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued, want %d", got, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type grantOutcome struct {
	token int64
	err   error
}

// grantAll starts a grant of each key to "uid-<key>" and returns their outcomes once all
// returned.
func grantAll(ctx context.Context, b *grantBatcher, keys []string, started func()) func() map[string]grantOutcome {
	var wg sync.WaitGroup
	var mu sync.Mutex
	out := map[string]grantOutcome{}
	for _, k := range keys {
		wg.Go(func() {
			token, err := b.grant(ctx, k, "uid-"+k, nil)
			mu.Lock()
			out[k] = grantOutcome{token, err}
			mu.Unlock()
		})
		if started != nil {
			started()
		}
	}
	return func() map[string]grantOutcome { wg.Wait(); return out }
}

// Grants that arrive while a batch is in flight go out together in the next transaction,
// up to the batch limit; each lock gets its own answer and its own key.
func TestGrantBatcherBatchesConcurrentGrants(t *testing.T) {
	e := newBatchEnv(t)
	b := e.batcher(t, e.election.IsOwner)
	b.limit = 8
	ctx := t.Context()

	e.gate.Stall("Txn")
	before := e.gate.Count("Txn")
	first := e.inFlight(ctx, t, b, "ns/first")
	var keys []string
	for i := range 20 {
		keys = append(keys, fmt.Sprintf("ns/lock-%d", i))
	}
	n := 0
	rest := grantAll(ctx, b, keys, func() { n++; queued(t, b, n) })
	e.gate.Unstall("Txn")
	got := rest()
	got["ns/first"] = first()["ns/first"]

	// The first alone, then the 20 queued behind it, at most 8 a batch: 3 more transactions.
	if txns := e.gate.Count("Txn") - before; txns != 4 {
		t.Errorf("transactions for 1 grant and then 20 queued behind it = %d, want 4 (batches of at most 8)", txns)
	}
	tokens := map[int64]int{}
	for k, o := range got {
		if o.err != nil || o.token == 0 {
			t.Fatalf("grant(%s) = %d, %v, want a token", k, o.token, o.err)
		}
		h, err := e.engine.Inspect(ctx, k)
		if err != nil || h.Token != o.token || h.Holder != "uid-"+k || h.Lease != e.grants.ID() {
			t.Fatalf("Inspect(%s) = %+v, %v, want token %d holder uid-%s on the grant lease", k, h, err, o.token, k)
		}
		tokens[o.token]++
	}
	if len(tokens) != 4 {
		t.Errorf("distinct tokens = %d (%v), want 4: one revision per transaction", len(tokens), tokens)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sending || len(b.queue) != 0 {
		t.Errorf("after every grant returned: sending %v, %d queued, want idle", b.sending, len(b.queue))
	}
}

// A call whose context ends while it waits for a batch is withdrawn before anything is sent
// for it; the calls behind it still go out.
func TestGrantBatcherWithdrawsCancelledCall(t *testing.T) {
	e := newBatchEnv(t)
	b := e.batcher(t, e.election.IsOwner)
	ctx := t.Context()

	e.gate.Stall("Txn")
	first := e.inFlight(ctx, t, b, "ns/first")
	cctx, cancel := context.WithCancel(ctx)
	withdrawn := grantAll(cctx, b, []string{"ns/withdrawn"}, func() { queued(t, b, 1) })
	last := grantAll(ctx, b, []string{"ns/last"}, func() { queued(t, b, 2) })
	cancel()
	if o := withdrawn()["ns/withdrawn"]; !errors.Is(o.err, context.Canceled) {
		t.Fatalf("grant with a cancelled context = %d, %v, want context.Canceled", o.token, o.err)
	}
	queued(t, b, 1)
	e.gate.Unstall("Txn")
	for k, o := range map[string]grantOutcome{"ns/first": first()["ns/first"], "ns/last": last()["ns/last"]} {
		if o.err != nil || o.token == 0 {
			t.Fatalf("grant(%s) = %d, %v, want a token", k, o.token, o.err)
		}
	}
	if h, err := e.engine.Inspect(ctx, "ns/withdrawn"); err != nil || h.Token != 0 {
		t.Fatalf("Inspect(ns/withdrawn) = %+v, %v, want free: a withdrawn call is never sent", h, err)
	}
}

// A failed election guard refuses the whole batch: every call gets ErrGuardFailed and no key
// is written.
func TestGrantBatcherGuardRefusesBatch(t *testing.T) {
	e := newBatchEnv(t)
	failing := func() clientv3.Cmp { return clientv3.Compare(clientv3.CreateRevision("/batch/none"), "=", 7) }
	b := e.batcher(t, failing)
	ctx := t.Context()
	e.gate.Stall("Txn")
	first := e.inFlight(ctx, t, b, "ns/a")
	rest := grantAll(ctx, b, []string{"ns/b", "ns/c"}, nil)
	queued(t, b, 2)
	e.gate.Unstall("Txn")
	got := rest()
	got["ns/a"] = first()["ns/a"]
	for k, o := range got {
		if !errors.Is(o.err, lease.ErrGuardFailed) || o.token != 0 {
			t.Fatalf("grant(%s) under a failed guard = %d, %v, want ErrGuardFailed", k, o.token, o.err)
		}
		if h, err := e.engine.Inspect(ctx, k); err != nil || h.Token != 0 {
			t.Fatalf("Inspect(%s) = %+v, %v, want free", k, h, err)
		}
	}
}
