package lease_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lockwarden/lockwarden/internal/etcdtest"
)

// Issue 24, item 2: an Acquire of a key this session last found free sends
// TryAcquire's lean transaction (no queue entry, no reads in its Else). When
// the key is taken after all, that try costs one write, then the call queues
// as any other (one more write), keeps its FIFO place and gets the lock; the
// next Acquire of the key, remembered as contended, queues in one write.
func TestLeanAcquireOfATakenKey(t *testing.T) {
	const ttl = 3 * time.Second
	e := newEnv(t)
	eng := e.engine(e.cli)
	c := &txnCounter{}
	s := e.session(e.engine(e.srv.Client(t, c.dialOptions()...)), ttl)
	l, err := s.Acquire(ctx(t), "k", "s")
	if err != nil {
		t.Fatalf("Acquire of the free key = %v, want nil", err)
	}
	if err := l.Release(ctx(t)); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	other := e.session(eng, ttl)
	for round, want := range []int{2, 1} {
		held, err := other.TryAcquire(ctx(t), "k", "other")
		if err != nil {
			t.Fatalf("round %d: TryAcquire = %v, want nil", round, err)
		}
		before := c.quiet(t)
		got := acquireAsync(t, s, "k", "s")
		waiters(t, eng, "k", 1)
		if w := c.quiet(t) - before; w != want {
			t.Errorf("round %d: Acquire of a taken key sent %d write transactions before it waited, want %d", round, w, want)
		}
		if err := held.Release(ctx(t)); err != nil {
			t.Fatalf("round %d: Release = %v, want nil", round, err)
		}
		a := await(t, got, 5*time.Second, fmt.Sprintf("round %d", round))
		if a.err != nil {
			t.Fatalf("round %d: Acquire = %v, want nil", round, a.err)
		}
		if a.l.Token() <= held.Token() {
			t.Fatalf("round %d: token %d, want above %d", round, a.l.Token(), held.Token())
		}
		if err := a.l.Release(ctx(t)); err != nil {
			t.Fatalf("round %d: Release = %v, want nil", round, err)
		}
	}
}

// A lean try whose answer is lost may have created the lock key: the call
// finds it on its own lease with its own value and takes it as its grant
// (or, if its ctx ends first, leaves it to the clean-up).
func TestLeanAcquireLostAnswer(t *testing.T) {
	const ttl = 3 * time.Second
	e := newEnv(t)
	eng := e.engine(e.cli)
	p := etcdtest.NewProxy(t, e.srv.Endpoint())
	s := e.session(e.engine(etcdtest.NewClient(t, []string{p.Endpoint()})), ttl)
	l, err := s.Acquire(ctx(t), "k", "s")
	if err != nil {
		t.Fatalf("Acquire = %v, want nil", err)
	}
	if err := l.Release(ctx(t)); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	p.PauseRx() // the lean try applies; its answer is held
	go func() {
		time.Sleep(ttl / 4)
		p.UnpauseRx()
	}()
	c, cancel := context.WithTimeout(ctx(t), 2*ttl)
	defer cancel()
	l, err = s.Acquire(c, "k", "s")
	if err != nil {
		t.Fatalf("Acquire with its first answer lost = %v, want nil", err)
	}
	if h := holding(t, eng, "k"); h.Token != l.Token() || h.Lease != s.ID() || h.Waiters != 0 {
		t.Fatalf("Inspect = token %d lease %x waiters %d, want %d %x 0", h.Token, h.Lease, h.Waiters, l.Token(), s.ID())
	}
	if err := l.Release(ctx(t)); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
}

// A join whose answer is lost queues the waiter all the same; when the holder
// releases meanwhile, that entry is the grant before the waiter knows it
// queued. The waiter finds its own entry (its value), keeps its place and
// takes the grant; a waiter that gives up instead has its entry deleted, and
// the lock goes on to the next.
func TestLostJoinAnswerBecomesGrant(t *testing.T) {
	const ttl = 3 * time.Second
	for _, giveUp := range []bool{false, true} {
		t.Run(fmt.Sprintf("give up %v", giveUp), func(t *testing.T) {
			e := newEnv(t)
			eng := e.engine(e.cli)
			h, err := e.session(eng, ttl).TryAcquire(ctx(t), "k", "holder")
			if err != nil {
				t.Fatalf("TryAcquire = %v, want nil", err)
			}
			p := etcdtest.NewProxy(t, e.srv.Endpoint())
			s := e.session(e.engine(etcdtest.NewClient(t, []string{p.Endpoint()})), ttl)
			p.PauseRx() // the join applies; its answer (and the next ones) are held
			c, cancel := context.WithTimeout(ctx(t), 2*ttl)
			if giveUp {
				c, cancel = context.WithTimeout(ctx(t), ttl/2)
			}
			defer cancel()
			got := make(chan acquired, 1)
			go func() { l, err := s.Acquire(c, "k", "w"); got <- acquired{l, err} }()
			waiters(t, eng, "k", 1)
			nc := acquireAsync(t, e.session(eng, ttl), "k", "next")
			waiters(t, eng, "k", 2)
			if err := h.Release(ctx(t)); err != nil {
				t.Fatalf("Release = %v, want nil", err)
			}
			if hd := holding(t, eng, "k"); hd.Holder != "w" || hd.Lease != s.ID() {
				t.Fatalf("Inspect after the release = holder %q lease %x, want w's entry on %x", hd.Holder, hd.Lease, s.ID())
			}
			token := holding(t, eng, "k").Token
			if giveUp {
				a := await(t, got, ttl, "w")
				p.UnpauseRx()
				if a.err == nil {
					t.Fatalf("Acquire with its answers held past its ctx = lock %d, want an error", a.l.Token())
				}
				n := await(t, nc, 3*ttl, "next")
				if n.err != nil {
					t.Fatalf("next: Acquire = %v, want nil (the given-up entry is deleted)", n.err)
				}
				return
			}
			time.Sleep(ttl / 3)
			p.UnpauseRx()
			a := await(t, got, 2*ttl, "w")
			if a.err != nil {
				t.Fatalf("Acquire with its join's answer lost = %v, want nil", a.err)
			}
			if a.l.Token() != token {
				t.Fatalf("w's token = %d, want its entry's %d", a.l.Token(), token)
			}
			if err := a.l.Release(ctx(t)); err != nil {
				t.Fatalf("Release = %v, want nil", err)
			}
			if n := await(t, nc, ttl, "next"); n.err != nil {
				t.Fatalf("next: Acquire = %v, want nil", n.err)
			}
		})
	}
}
