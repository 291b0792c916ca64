package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"

	"github.com/lockwarden/lockwarden/pkg/lease"
)

// txnCounter counts a client's Txn requests, telling apart those that carry
// a write (a raft proposal and an fsync, even when their compare fails) from
// read-only ones, and the watches it creates.
type txnCounter struct {
	mu                     sync.Mutex
	writes, reads, watches int
}

func (c *txnCounter) dialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithChainStreamInterceptor(
		func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			cs, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil {
				return nil, err
			}
			return &watchCounter{ClientStream: cs, c: c}, nil
		}), grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if r, ok := req.(*pb.TxnRequest); ok {
				c.mu.Lock()
				if txnWrites(r) {
					c.writes++
				} else {
					c.reads++
				}
				c.mu.Unlock()
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		})}
}

// watchCounter counts the watch create requests sent on a stream.
type watchCounter struct {
	grpc.ClientStream
	c *txnCounter
}

func (s *watchCounter) SendMsg(m any) error {
	if wr, ok := m.(*pb.WatchRequest); ok && wr.GetCreateRequest() != nil {
		s.c.mu.Lock()
		s.c.watches++
		s.c.mu.Unlock()
	}
	return s.ClientStream.SendMsg(m)
}

func (c *txnCounter) watchCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.watches
}

func txnWrites(r *pb.TxnRequest) bool {
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			switch {
			case op.GetRequestPut() != nil, op.GetRequestDeleteRange() != nil:
				return true
			case op.GetRequestTxn() != nil && txnWrites(op.GetRequestTxn()):
				return true
			}
		}
	}
	return false
}

func (c *txnCounter) get() (writes, reads int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writes, c.reads
}

// quiet waits until the counter stops moving (the waiter sits in a watch)
// and returns its write count.
func (c *txnCounter) quiet(t *testing.T) int {
	t.Helper()
	var w int
	eventually(t, 5*time.Second, func() error {
		w0, r0 := c.get()
		time.Sleep(200 * time.Millisecond)
		w1, r1 := c.get()
		if w0 != w1 || r0 != r1 {
			return fmt.Errorf("still sending: %d/%d writes/reads then %d/%d", w0, r0, w1, r1)
		}
		w = w1
		return nil
	})
	return w
}

// A handoff is one write, the holder's release (issue 24): a blocking Acquire
// writes once to queue (not a failed try, an enqueue and a failed grab), and
// nothing to take the lock, since its entry becomes the grant when the
// release deletes what was ahead of it; the waiter reads once to learn it.
// The waiter behind the new holder is not woken (its predecessor's entry,
// now the grant, stays); a releaser that queues again writes once more.
func TestHandoffWrites(t *testing.T) {
	e := newEnv(t)
	eng := e.engine(e.cli)
	first, err := e.session(eng, 3*time.Second).TryAcquire(ctx(t), "k", "first")
	if err != nil {
		t.Fatalf("TryAcquire = %v, want nil", err)
	}

	type waiter struct {
		c        *txnCounter
		s        *lease.Session
		acquired chan *lease.Lock
		errc     chan error
	}
	start := func(w *waiter, name string) {
		go func() {
			l, err := w.s.Acquire(context.Background(), "k", name)
			if err != nil {
				w.errc <- err
				return
			}
			w.acquired <- l
		}()
	}
	ws := make([]*waiter, 2)
	for i := range ws {
		c := &txnCounter{}
		ws[i] = &waiter{
			c: c, s: e.session(e.engine(e.srv.Client(t, c.dialOptions()...)), 3*time.Second),
			acquired: make(chan *lease.Lock, 1), errc: make(chan error, 1),
		}
		start(ws[i], fmt.Sprintf("w%d", i))
		waiters(t, eng, "k", int64(i+1))
		if got := ws[i].c.quiet(t); got != 1 {
			t.Errorf("waiter %d sent %d write transactions to queue behind a held lock, want 1", i, got)
		}
	}
	got := func(i int) *lease.Lock {
		t.Helper()
		select {
		case l := <-ws[i].acquired:
			return l
		case err := <-ws[i].errc:
			t.Fatalf("waiter %d: Acquire = %v, want nil", i, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("waiter %d did not get the lock", i)
		}
		return nil
	}

	before := [2]int{ws[0].c.quiet(t), ws[1].c.quiet(t)}
	if err := first.Release(ctx(t)); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	l0 := got(0)
	// Waiter 0's entry is the grant now: it read, and wrote nothing. Waiter 1
	// still waits for that entry (TestAcquireFIFO checks it is not woken).
	if w := ws[0].c.quiet(t) - before[0]; w != 0 {
		t.Errorf("waiter 0 sent %d write transactions to take a released lock, want 0 (the release hands over)", w)
	}
	if w := ws[1].c.quiet(t) - before[1]; w != 0 {
		t.Errorf("waiter 1 sent %d write transactions when its predecessor took the lock, want 0", w)
	}

	// Waiter 0 releases and queues again: one write each.
	before = [2]int{ws[0].c.quiet(t), ws[1].c.quiet(t)}
	if err := l0.Release(ctx(t)); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	l1 := got(1)
	start(ws[0], "w0 again")
	waiters(t, eng, "k", 1)
	if w := ws[0].c.quiet(t) - before[0]; w != 2 {
		t.Errorf("waiter 0 sent %d write transactions to release and queue again, want 2", w)
	}
	if w := ws[1].c.quiet(t) - before[1]; w != 0 {
		t.Errorf("waiter 1 sent %d write transactions to take the lock, want 0 (the release hands over)", w)
	}
	if err := l1.Release(ctx(t)); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	if err := got(0).Release(ctx(t)); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
}

// A lock released at once opens no watch (its monitor starts later), and a
// key deleted right after it was acquired is still noticed by the watch,
// which starts from the acquire's revision, long before the next ownership
// check.
func TestLockWatchStartsLate(t *testing.T) {
	const ttl = 30 * time.Second // ownership checks every 10 s
	e := newEnv(t)
	c := &txnCounter{}
	s := e.session(e.engine(e.srv.Client(t, c.dialOptions()...)), ttl)
	const cycles = 20
	for range cycles {
		l, err := s.TryAcquire(ctx(t), "short", "h")
		if err != nil {
			t.Fatalf("TryAcquire = %v, want nil", err)
		}
		if err := l.Release(ctx(t)); err != nil {
			t.Fatalf("Release = %v, want nil", err)
		}
	}
	// A pause longer than the monitor's delay between an acquire and its
	// release (a loaded machine, the race detector) may start one; a monitor
	// started with each lock would open one per lock.
	if got := c.watchCount(); got > cycles/4 {
		t.Errorf("%d watches created for %d locks released at once, want at most %d", got, cycles, cycles/4)
	}

	l, err := s.TryAcquire(ctx(t), "k", "h")
	if err != nil {
		t.Fatalf("TryAcquire = %v, want nil", err)
	}
	if _, err := e.cli.Delete(ctx(t), l.Path()); err != nil {
		t.Fatalf("Delete(%q) = %v, want nil", l.Path(), err)
	}
	waitClosed(t, l.Done(), ttl/6, "lock Done")
	if !errors.Is(l.Err(), lease.ErrNotHeld) {
		t.Errorf("Err() = %v, want %v", l.Err(), lease.ErrNotHeld)
	}
	if c.watchCount() == 0 {
		t.Errorf("no watch created, want the lock's watch to have seen the deletion")
	}
}
