package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockwarden/lockwarden/internal/etcdtest"
	"github.com/lockwarden/lockwarden/pkg/clock"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// proxied returns a Global of e's prefix whose client reaches etcd through a proxy and a gate.
func (e *genv) proxied(t *testing.T) (*lease.Global, *etcdtest.Proxy, *etcdtest.Gate) {
	t.Helper()
	p := etcdtest.NewProxy(t, e.srv.Endpoint())
	gate := etcdtest.NewGate()
	g, err := lease.NewGlobal(etcdtest.NewClient(t, []string{p.Endpoint()}, gate.DialOptions()...), e.g.Prefix())
	if err != nil {
		t.Fatalf("NewGlobal = %v", err)
	}
	if _, err := g.Observe(ctx(t), "warm-up"); err != nil { // the connection, before any delay
		t.Fatalf("Observe = %v", err)
	}
	return g, p, gate
}

// ReceivedAt is read after the answer arrived: with every answer delayed by 300 ms, it is
// at least 300 ms after the call began (L5: the reception, never the send).
func TestGlobalObserveReceivedAfterAnswer(t *testing.T) {
	e := newGlobalEnv(t)
	g, p, _ := e.proxied(t)
	const delay = 300 * time.Millisecond
	p.DelayRx(delay)
	defer p.UndelayRx()
	sent := clock.Now()
	v, err := g.Observe(ctx(t), "x")
	if err != nil {
		t.Fatalf("Observe = %v", err)
	}
	if got := v.ReceivedAt.Sub(sent); got < delay {
		t.Fatalf("ReceivedAt - send = %v, want at least the answer's delay %v", got, delay)
	}
}

// A grant whose answer is lost is not ErrGlobalChanged: it may have landed (here it did),
// and the caller finds it by observing, on the lease Grant returned, which is left alive.
func TestGlobalGrantLostAnswer(t *testing.T) {
	e := newGlobalEnv(t)
	g, p, gate := e.proxied(t)
	gate.Stall("Txn") // past the lease grant, before the transaction
	type result struct {
		token int64
		id    clientv3.LeaseID
		err   error
	}
	res := make(chan result, 1)
	rec := record("east", "p", 30)
	go func() {
		c, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		token, id, err := g.Grant(c, "lost", lease.GlobalGrantRequest{Basis: lease.GrantFirst, Record: rec, TTL: 5 * time.Second}, e.guard)
		res <- result{token, id, err}
	}()
	eventually(t, 5*time.Second, func() error {
		if gate.Count("Txn") < 2 { // the warm-up's and the grant's
			return errors.New("grant transaction not started")
		}
		return nil
	})
	p.PauseRx()
	gate.Unstall("Txn")
	r := <-res
	p.UnpauseRx()
	if !errors.Is(r.err, lease.ErrUnknownOutcome) || errors.Is(r.err, lease.ErrGlobalChanged) || r.token != 0 || r.id == 0 {
		t.Fatalf("Grant with a lost answer = %d, %x, %v, want 0, its lease, ErrUnknownOutcome (not ErrGlobalChanged)", r.token, r.id, r.err)
	}
	v := e.observe(t, "lost")
	rec.Kind = lease.RecordGrant
	if !v.Held || v.Lease != r.id || v.Grant != rec || v.TMod != v.Token {
		t.Fatalf("Observe after the lost answer = %+v, want K on lease %x with %+v, T at its token", v, r.id, rec)
	}
	if ttl := e.ttlOf(t, r.id); ttl <= 0 {
		t.Fatalf("lease of the landed grant TTL %d, want alive", ttl)
	}
}

// A Wait or Delete whose answer is lost says so (ErrUnknownOutcome): no w, no acknowledged
// delete.
func TestGlobalLostAnswers(t *testing.T) {
	e := newGlobalEnv(t)
	g, p, _ := e.proxied(t)
	token, id := e.first(t, "d", record("east", "p", 30), 5*time.Second)
	basis := e.observe(t, "w")
	lost := func(call func(c context.Context) error) error {
		p.PauseRx()
		defer p.UnpauseRx()
		c, cancel := context.WithTimeout(ctx(t), 300*time.Millisecond)
		defer cancel()
		return call(c)
	}
	err := lost(func(c context.Context) error {
		w, err := g.Wait(c, "w", basis, waiting("east", 30), e.guard)
		if w != 0 {
			t.Errorf("Wait with a lost answer = %d, want 0", w)
		}
		return err
	})
	if !errors.Is(err, lease.ErrUnknownOutcome) || errors.Is(err, lease.ErrGlobalChanged) {
		t.Fatalf("Wait with a lost answer = %v, want ErrUnknownOutcome", err)
	}
	err = lost(func(c context.Context) error {
		deleted, err := g.Delete(c, "d", token, id, e.guard)
		if deleted {
			t.Errorf("Delete with a lost answer reported deleted")
		}
		return err
	})
	if !errors.Is(err, lease.ErrUnknownOutcome) {
		t.Fatalf("Delete with a lost answer = %v, want ErrUnknownOutcome", err)
	}
}
