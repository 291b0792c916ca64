package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockwarden/lockwarden/internal/etcdtest"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// The mutex's fault kinds, for the semaphore. A holder is cut off from etcd
// (its traffic held in a proxy) while contenders race for the slots: its
// slot ends by its own clock, goes to a contender only after that, and only
// after etcd expired its lease; never are more than n slots valid at once;
// its late Release, sent while cut off, does not touch the new grant.
func TestSemaphorePartitionedHolder(t *testing.T) {
	const (
		ttl   = 2 * time.Second
		slots = 2
	)
	e := newEnv(t)
	p := etcdtest.NewProxy(t, e.srv.Endpoint())
	engA := e.engine(etcdtest.NewClient(t, []string{p.Endpoint()}))
	eng := e.engine(e.cli)
	sA := e.session(engA, ttl)
	a, err := sA.AcquireSlot(ctx(t), "sem", "A", slots)
	if err != nil {
		t.Fatalf("A: AcquireSlot = %v, want nil", err)
	}
	vw := watchValid(t)
	vw.add(a)

	// Contenders take, hold briefly and release slots as fast as they can.
	type grant struct {
		slot  int
		token int64
		at    time.Time
	}
	var mu sync.Mutex
	var grants []grant
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var racing atomic.Int64
	for c := range 4 {
		s := e.session(eng, ttl)
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				actx, cancel := context.WithTimeout(context.Background(), 3*ttl)
				l, err := s.AcquireSlot(actx, "sem", fmt.Sprintf("c%d", c), slots)
				cancel()
				if err != nil {
					select {
					case <-stop:
						return // the wait ran into the end of the test
					default:
					}
					t.Errorf("c%d: AcquireSlot = %v, want nil", c, err)
					return
				}
				at := time.Now()
				if n := vw.add(l); n > slots {
					t.Errorf("c%d: %d slots valid at once, want at most %d", c, n, slots)
				}
				mu.Lock()
				grants = append(grants, grant{l.Index(), l.Token(), at})
				mu.Unlock()
				racing.Add(1)
				time.Sleep(5 * time.Millisecond)
				if err := l.Release(context.Background()); err != nil {
					t.Errorf("c%d: Release = %v, want nil", c, err)
				}
				vw.remove(l)
			}
		})
	}
	eventually(t, 5*time.Second, func() error {
		if racing.Load() < 20 {
			return errors.New("contenders have not cycled yet")
		}
		return nil
	})

	paused := time.Now()
	p.Pause()
	lateRelease := make(chan error, 1)
	aDone := waitClosed(t, a.Done(), 2*ttl, "A's Done")
	if limit := paused.Add(ttl - sA.Margin() + slack); aDone.After(limit) {
		t.Errorf("A's Done closed %v after the cut, want within TTL - margin (%v) + %v", aDone.Sub(paused), ttl-sA.Margin(), slack)
	}
	go func() { lateRelease <- a.Release(context.Background()) }()

	// A contender gets A's slot once etcd expired A's lease.
	eventually(t, 4*ttl, func() error {
		mu.Lock()
		defer mu.Unlock()
		for _, g := range grants {
			if g.slot == a.Index() && g.token > a.Token() {
				return nil
			}
		}
		return fmt.Errorf("no grant of A's slot %d after A", a.Index())
	})
	p.Unpause()
	select {
	case err := <-lateRelease:
		if err == nil {
			t.Errorf("A's late Release = nil, want an error (its key went with its lease)")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("A's late Release did not return")
	}
	time.Sleep(100 * time.Millisecond) // a few more rounds after the late traffic
	close(stop)
	wg.Wait()

	aUntil := a.ValidUntil()
	mu.Lock()
	defer mu.Unlock()
	for _, g := range grants {
		if g.slot == a.Index() && g.token > a.Token() && !g.at.After(aUntil) {
			t.Errorf("slot %d granted (token %d) %v before A's validity ended", g.slot, g.token, aUntil.Sub(g.at))
		}
	}
	if got := vw.mostValid(); got > slots {
		t.Errorf("most slots Valid() at once = %d, want at most %d", got, slots)
	}
}

// A 3-member etcd cluster loses its leader while slots are held and a waiter
// queues: the holders keep their slots across the leader change, the waiter
// keeps its place and gets the next free slot, with a larger token.
func TestSemaphoreLeaderKilled(t *testing.T) {
	const ttl = 6 * time.Second
	c := etcdtest.StartCluster(t, 3)
	cli := c.Client(t)
	eng := lease.NewEngine(cli, lease.WithPrefix(prefix(t)))
	session := func() *lease.Session {
		s, err := eng.NewSession(ctx(t), ttl)
		if err != nil {
			t.Fatalf("NewSession = %v, want nil", err)
		}
		t.Cleanup(func() { _ = s.Close(context.Background()) })
		return s
	}
	var held []*lease.SlotLock
	for i := range 2 {
		l, err := session().AcquireSlot(ctx(t), "sem", fmt.Sprintf("h%d", i), 2)
		if err != nil {
			t.Fatalf("AcquireSlot(h%d) = %v, want nil", i, err)
		}
		held = append(held, l)
	}
	wc := slotAsync(t, session(), "sem", "waiter", 2)
	semWaiters(t, cli, "sem", 1)

	old := c.Leader(t)
	killed := time.Now()
	c.Kill(old)
	if now := c.Leader(t); now == old {
		t.Fatalf("leader after kill = member %d, want another", now)
	}
	// Both holders renewed and checked through the new leader.
	eventually(t, ttl, func() error {
		for _, l := range held {
			if reach := l.ValidUntil().Sub(killed); reach <= ttl-l.Session().Margin() {
				return fmt.Errorf("slot %d valid until %v after the kill, want > TTL - margin", l.Index(), reach)
			}
		}
		return nil
	})
	for _, l := range held {
		select {
		case <-l.Done():
			t.Fatalf("slot %d lost across the leader change: %v", l.Index(), l.Err())
		default:
		}
	}
	noSlotYet(t, wc, 0, "waiter")
	if err := held[1].Release(ctx(t)); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	g := awaitSlot(t, wc, ttl, "waiter")
	if g.err != nil || g.l.Index() != 1 || g.l.Token() <= held[1].Token() {
		t.Fatalf("waiter: AcquireSlot = %v, %v, want slot 1 with a token above %d", g.l, g.err, held[1].Token())
	}
	c.Restart(t, old)
	c.Leader(t)
	if err := g.l.Release(ctx(t)); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	l, err := session().TryAcquireSlot(ctx(t), "sem", "after", 2)
	if err != nil || l.Index() != 1 || l.Token() <= g.l.Token() {
		t.Fatalf("TryAcquireSlot after the restart = %v, %v, want slot 1 with a token above %d", l, err, g.l.Token())
	}
}

// A waiter whose watches stall (etcd never confirms them) still notices a
// freed slot by re-reading at least every TTL/3, and the waiter behind it
// gets its turn too.
func TestSemaphoreStalledWatch(t *testing.T) {
	const ttl = 3 * time.Second
	e := newEnv(t)
	eng := e.engine(e.cli)
	h, err := e.session(eng, ttl).AcquireSlot(ctx(t), "sem", "holder", 1)
	if err != nil {
		t.Fatalf("AcquireSlot = %v, want nil", err)
	}
	gate := etcdtest.NewGate()
	gate.Stall("Watch")
	t.Cleanup(func() { gate.Unstall("Watch") })
	stalled := e.session(e.engine(e.srv.Client(t, gate.DialOptions()...)), ttl)
	first := slotAsync(t, stalled, "sem", "stalled", 1)
	semWaiters(t, e.cli, "sem", 1)
	second := slotAsync(t, e.session(eng, ttl), "sem", "behind", 1)
	semWaiters(t, e.cli, "sem", 2)
	if err := h.Release(ctx(t)); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	for _, w := range []struct {
		name string
		c    <-chan slotGot
	}{{"stalled waiter", first}, {"waiter behind it", second}} {
		g := awaitSlot(t, w.c, 2*ttl, w.name)
		if g.err != nil {
			t.Fatalf("%s: AcquireSlot = %v, want nil", w.name, g.err)
		}
		if err := g.l.Release(context.Background()); err != nil {
			t.Fatalf("%s: Release = %v, want nil", w.name, err)
		}
	}
}

// An older waiter that cannot reach etcd for a while (its transactions held
// back) keeps its place: a younger waiter that re-reads, and sees a slot
// free, does not take it; the older gets it once it gets through.
func TestSemaphoreOlderWaiterStalled(t *testing.T) {
	const ttl = 2 * time.Second
	e := newEnv(t)
	eng := e.engine(e.cli)
	var held []*lease.SlotLock
	for i := range 2 {
		l, err := e.session(eng, 10*time.Second).AcquireSlot(ctx(t), "sem", fmt.Sprintf("h%d", i), 2)
		if err != nil {
			t.Fatalf("AcquireSlot(h%d) = %v, want nil", i, err)
		}
		held = append(held, l)
	}
	gate := etcdtest.NewGate()
	older := e.session(e.engine(e.srv.Client(t, gate.DialOptions()...)), 10*time.Second)
	oc := slotAsync(t, older, "sem", "older", 2)
	semWaiters(t, e.cli, "sem", 1)
	yc := slotAsync(t, e.session(eng, ttl), "sem", "younger", 2)
	semWaiters(t, e.cli, "sem", 2)

	gate.Stall("Txn", "Watch")
	t.Cleanup(func() { gate.Unstall("Txn", "Watch") })
	if err := held[0].Release(ctx(t)); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	// The younger waiter re-reads every TTL/3 and sees slot 0 free.
	noSlotYet(t, yc, 2*ttl, "younger waiter")
	noSlotYet(t, oc, 0, "stalled older waiter")
	gate.Unstall("Txn", "Watch")
	g := awaitSlot(t, oc, 10*time.Second, "older waiter")
	if g.err != nil || g.l.Index() != 0 {
		t.Fatalf("older waiter: AcquireSlot = %v, %v, want slot 0", g.l, g.err)
	}
	noSlotYet(t, yc, 100*time.Millisecond, "younger waiter")
	if err := held[1].Release(ctx(t)); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	if g := awaitSlot(t, yc, 5*time.Second, "younger waiter"); g.err != nil || g.l.Index() != 1 {
		t.Fatalf("younger waiter: AcquireSlot = %v, %v, want slot 1", g.l, g.err)
	}
}
