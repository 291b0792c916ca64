package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockwarden/lockwarden/internal/etcdtest"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// Issue 10, item 10: a waiter whose watches stall (etcd never confirms them,
// nothing arrives) still notices that the lock is free, by re-reading at least
// every TTL/3, and the waiter queued behind it gets its turn too.
func TestStalledWaiterWatch(t *testing.T) {
	const ttl = 3 * time.Second
	e := newEnv(t)
	direct := e.engine(e.cli)
	holder, err := e.session(direct, ttl).TryAcquire(ctx(t), "k", "holder")
	if err != nil {
		t.Fatalf("TryAcquire = %v, want nil", err)
	}
	gate := etcdtest.NewGate()
	gate.Stall("Watch")
	t.Cleanup(func() { gate.Unstall("Watch") })
	stalled := e.session(e.engine(e.srv.Client(t, gate.DialOptions()...)), ttl)
	type got struct {
		l   *lease.Lock
		err error
	}
	first, second := make(chan got, 1), make(chan got, 1)
	go func() { l, err := stalled.Acquire(ctx(t), "k", "stalled"); first <- got{l, err} }()
	waiters(t, direct, "k", 1)
	behind := e.session(direct, ttl)
	go func() { l, err := behind.Acquire(ctx(t), "k", "behind"); second <- got{l, err} }()
	waiters(t, direct, "k", 2)

	if err := holder.Release(ctx(t)); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	for _, w := range []struct {
		name string
		c    chan got
	}{{"stalled waiter", first}, {"waiter behind it", second}} {
		select {
		case g := <-w.c:
			if g.err != nil {
				t.Fatalf("%s: Acquire = %v, want nil", w.name, g.err)
			}
			if err := g.l.Release(context.Background()); err != nil {
				t.Fatalf("%s: Release = %v, want nil", w.name, err)
			}
		case <-time.After(2 * ttl):
			t.Fatalf("%s: no lock %v after the release (a stalled watch blocks the queue)", w.name, 2*ttl)
		}
	}
}
