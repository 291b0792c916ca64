package lease_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lockwarden/lockwarden/internal/etcdtest"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// Failure 4 (etcd issue 19597): a queued waiter must notice that its own
// session ended, whether etcd dropped the lease or the waiter lost etcd.
func TestQueuedWaiterNoticesOwnSessionExpiry(t *testing.T) {
	const ttl = 2 * time.Second
	cases := []struct {
		name string
		// kill ends the waiter's session; within is how soon Acquire must
		// return after it.
		kill   func(t *testing.T, e *env, p *etcdtest.Proxy, w *lease.Session)
		within time.Duration
	}{
		{"lease revoked", func(t *testing.T, e *env, p *etcdtest.Proxy, w *lease.Session) {
			if _, err := e.cli.Revoke(ctx(t), w.ID()); err != nil {
				t.Fatalf("Revoke = %v, want nil", err)
			}
		}, ttl/3 + ttl/4 + slack}, // next renewal, plus its deadline
		{"cut off from etcd", func(t *testing.T, e *env, p *etcdtest.Proxy, w *lease.Session) {
			p.Pause()
		}, ttl + slack}, // at most TTL - margin after the last renewal
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			p := etcdtest.NewProxy(t, e.srv.Endpoint())
			eng := e.engine(e.cli)
			holder, err := e.session(eng, ttl).TryAcquire(ctx(t), "k", "holder")
			if err != nil {
				t.Fatalf("TryAcquire = %v, want nil", err)
			}
			ws := e.session(e.engine(etcdtest.NewClient(t, []string{p.Endpoint()})), ttl)
			res := make(chan error, 1)
			go func() {
				_, err := ws.Acquire(context.Background(), "k", "waiter")
				res <- err
			}()
			waiters(t, eng, "k", 1)

			killed := time.Now()
			tc.kill(t, e, p, ws)
			select {
			case err := <-res:
				if !errors.Is(err, lease.ErrSessionExpired) {
					t.Errorf("Acquire = %v, want ErrSessionExpired", err)
				}
				if d := time.Since(killed); d > tc.within {
					t.Errorf("Acquire returned %v after the session's end, want within %v", d, tc.within)
				}
			case <-time.After(3 * ttl):
				t.Fatalf("Acquire still waiting %v after its session ended", 3*ttl)
			}
			// Its queue entry goes with its lease; the holder is unaffected.
			waiters(t, eng, "k", 0) // gone with the lease
			if !holder.Valid() {
				t.Errorf("holder.Valid() = false, want true")
			}
		})
	}
}

// Blocking waiters get the lock in the order they queued, and a release
// wakes only the next waiter: the ones behind it send nothing to etcd.
func TestAcquireFIFO(t *testing.T) {
	const n = 4
	e := newEnv(t)
	eng := e.engine(e.cli)
	first, err := e.session(eng, 30*time.Second).TryAcquire(ctx(t), "k", "first")
	if err != nil {
		t.Fatalf("TryAcquire = %v, want nil", err)
	}

	type waiter struct {
		gate     *etcdtest.Gate
		acquired chan *lease.Lock
		errc     chan error
	}
	ws := make([]waiter, n)
	for i := range ws {
		w := waiter{gate: etcdtest.NewGate(), acquired: make(chan *lease.Lock, 1), errc: make(chan error, 1)}
		ws[i] = w
		s := e.session(e.engine(e.srv.Client(t, w.gate.DialOptions()...)), 30*time.Second)
		go func() {
			l, err := s.Acquire(context.Background(), "k", fmt.Sprintf("w%d", i))
			if err != nil {
				w.errc <- err
				return
			}
			w.acquired <- l
		}()
		// Queue them one after another, so that the order is known.
		waiters(t, eng, "k", int64(i+1))
	}
	calls := func(i int) int { return ws[i].gate.Count("Txn") + ws[i].gate.Count("Range") }
	snapshot := func() []int {
		c := make([]int, n)
		for i := range c {
			c[i] = calls(i)
		}
		return c
	}
	// Queued is not yet waiting: let every waiter finish its reads first.
	var before []int
	eventually(t, 5*time.Second, func() error {
		before = snapshot()
		time.Sleep(200 * time.Millisecond)
		if now := snapshot(); !slices.Equal(now, before) {
			return fmt.Errorf("waiters still sending requests: %v then %v", before, now)
		}
		return nil
	})

	if err := first.Release(ctx(t)); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	var order []int
	for k := range n {
		var got *lease.Lock
		select {
		case got = <-ws[k].acquired:
		case err := <-ws[k].errc:
			t.Fatalf("waiter %d: Acquire = %v, want nil", k, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("waiter %d did not get the lock; order so far %v", k, order)
		}
		for j := k + 1; j < n; j++ {
			select {
			case <-ws[j].acquired:
				t.Fatalf("waiter %d acquired while waiter %d held the lock", j, k)
			default:
			}
		}
		order = append(order, k)
		if k == 0 {
			// The release woke waiter 0, whose entry is the grant now;
			// waiter 1 wakes when that entry goes, at 0's release. Waiters
			// 1 to 3 must not have sent anything.
			time.Sleep(200 * time.Millisecond) // give a thundering herd time to show
			for j := 1; j < n; j++ {
				if got, want := calls(j), before[j]; got != want {
					t.Errorf("waiter %d sent %d KV requests after the release, want 0", j, got-want)
				}
			}
		}
		if err := got.Release(ctx(t)); err != nil {
			t.Fatalf("waiter %d: Release = %v, want nil", k, err)
		}
	}
	if fmt.Sprint(order) != "[0 1 2 3]" {
		t.Fatalf("order = %v, want [0 1 2 3]", order)
	}
}
