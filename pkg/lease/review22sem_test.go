package lease_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockwarden/lockwarden/internal/etcdtest"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// Review 22 of the semaphore (6a11fea, 5ad99c9).

// TryAcquireSlot promises ErrLocked only "when every slot is held (or in a
// lock-delay) or a waiter queues". n callers that try at once on an empty
// semaphore of n slots, nobody queued, must all get a slot: there is always
// one free for each. Every caller picks the lowest free slot, so all of a
// round's callers but one fail their grant's compares; after maxSlotTries
// (4) rounds the rest give up with ErrLocked while slots are free.
func TestReview22SemTryAcquireSlotRefusedWhileFree(t *testing.T) {
	const n = 8
	e := newEnv(t)
	eng := e.engine(e.cli)
	sessions := make([]*lease.Session, n)
	for i := range sessions {
		sessions[i] = e.session(eng, 10*time.Second)
	}
	var refusals []string
	for round := range 5 {
		start := make(chan struct{})
		var wg sync.WaitGroup
		var mu sync.Mutex
		got := make([]*lease.SlotLock, 0, n)
		for i, s := range sessions {
			wg.Go(func() {
				<-start
				l, err := s.TryAcquireSlot(ctx(t), "sem", fmt.Sprintf("c%d", i), n)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					refusals = append(refusals, fmt.Sprintf("round %d c%d: %v", round, i, err))
					return
				}
				got = append(got, l)
			})
		}
		close(start)
		wg.Wait()
		if len(got) > n {
			t.Fatalf("round %d: %d slots taken, want at most %d", round, len(got), n)
		}
		for _, l := range got {
			if err := l.Release(ctx(t)); err != nil {
				t.Fatalf("Release = %v, want nil", err)
			}
		}
	}
	if len(refusals) > 0 {
		t.Errorf("%d TryAcquireSlot calls of %d refused on a semaphore with a free slot for each and nobody queued; first: %s",
			len(refusals), 5*n, refusals[0])
	}
}

// A holder that updates its record often (Lock.Update changes the slot key's
// ModRevision) must not keep the other slots from being granted: the grant's
// compare "ModRevision(slot keys) <= R" fails on every Update since the
// read, so the waiter reads and sends again, and with a busy enough holder
// never gets through, although a slot stays free all along. Only a slot key
// created since the read can matter to the rule (semaphore.go: "no slot key
// created or changed"); an Update creates none and changes no slot count.
func TestReview22SemUpdateStarvesFreeSlot(t *testing.T) {
	e := newEnv(t)
	eng := e.engine(e.cli)
	sA, sB := e.session(eng, 10*time.Second), e.session(eng, 10*time.Second)
	a, err := sA.AcquireSlot(ctx(t), "sem", "A", 2)
	if err != nil || a.Index() != 0 {
		t.Fatalf("A: AcquireSlot = %v, %v, want slot 0", a, err)
	}
	// A's holder reports progress in its record as fast as etcd takes it.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				rec, _ := json.Marshal(map[string]int{"g": g, "progress": k})
				if err := a.Update(context.Background(), rec); err != nil {
					t.Errorf("A: Update = %v, want nil", err)
					return
				}
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()
	time.Sleep(100 * time.Millisecond)

	tries, refused := 20, 0
	var first error
	for range tries {
		l, err := sB.TryAcquireSlot(ctx(t), "sem", "B", 2)
		if err != nil {
			refused++
			if first == nil {
				first = err
			}
			continue
		}
		if l.Index() != 1 {
			t.Errorf("B: TryAcquireSlot took slot %d, want 1", l.Index())
		}
		if err := l.Release(ctx(t)); err != nil {
			t.Fatalf("B: Release = %v, want nil", err)
		}
	}
	if refused > 0 {
		t.Errorf("B: TryAcquireSlot refused %d of %d times while slot 1 was free and nobody queued; first: %v", refused, tries, first)
	}

	actx, cancel := context.WithTimeout(ctx(t), 5*time.Second)
	defer cancel()
	start := time.Now()
	l, err := sB.AcquireSlot(actx, "sem", "B", 2)
	if err != nil {
		t.Fatalf("B: AcquireSlot with slot 1 free = %v after %v, want slot 1", err, time.Since(start).Round(time.Millisecond))
	}
	t.Logf("B: AcquireSlot took %v with slot 1 free", time.Since(start).Round(time.Millisecond))
	if err := l.Release(ctx(t)); err != nil {
		t.Fatalf("B: Release = %v, want nil", err)
	}
}

// lossy is a client interceptor that lets an armed number of grant
// transactions (a Txn whose success branch puts a key under put) through to
// etcd and then drops their answer, as a connection lost in mid-reply would:
// the grant applied, the caller sees Unavailable. after runs once the
// answer is dropped.
type lossy struct {
	mu    sync.Mutex
	put   string
	armed int
	lost  int
	after func()
}

func (q *lossy) arm(put string, n int, after func()) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.put, q.armed, q.after = put, n, after
}

func (q *lossy) losses() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.lost
}

func (q *lossy) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	tr, ok := req.(*etcdserverpb.TxnRequest)
	if !ok || err != nil {
		return err
	}
	q.mu.Lock()
	hit := false
	if q.armed > 0 {
		for _, op := range tr.Success {
			if p := op.GetRequestPut(); p != nil && strings.HasPrefix(string(p.Key), q.put) {
				hit = true
			}
		}
	}
	var after func()
	if hit && reply.(*etcdserverpb.TxnResponse).Succeeded {
		q.armed--
		q.lost++
		after = q.after
	} else {
		hit = false
	}
	q.mu.Unlock()
	if !hit {
		return err
	}
	if after != nil {
		after()
	}
	return status.Error(codes.Unavailable, "review: answer lost")
}

// withoutTombstones splits lease keys into the calls' tombstones (under
// P/gone/, kept for the session's life after a lost answer) and the rest.
// freeAfterLanding checks, once a held-back write of a call on ws has
// landed, that the keys on ws's lease (where names them in the messages)
// are call tombstones only, and that a session of its own takes key at once:
// the late write created nothing that holds the lock for nobody.
func freeAfterLanding(t *testing.T, e *env, ws *lease.Session, key, where string) {
	t.Helper()
	if ks, _ := withoutTombstones(t, leaseKeys(t, e.cli, ws.ID())); len(ks) != 0 {
		t.Errorf("keys on %s: %q, want none", where, ks)
	}
	if _, err := e.session(e.engine(e.cli), 10*time.Second).TryAcquire(ctx(t), key, "next"); err != nil {
		t.Errorf("TryAcquire with no live holder or waiter = %v, want the lock", err)
	}
}

func withoutTombstones(t *testing.T, ks []string) (rest []string, gone int) {
	t.Helper()
	for _, k := range ks {
		if strings.HasPrefix(k, prefix(t)+"/gone/") {
			gone++
			continue
		}
		rest = append(rest, k)
	}
	return rest, gone
}

// leaseKeys returns the keys attached to id.
func leaseKeys(t *testing.T, cli *clientv3.Client, id clientv3.LeaseID) []string {
	t.Helper()
	resp, err := cli.TimeToLive(ctx(t), id, clientv3.WithAttachedKeys())
	if err != nil {
		t.Fatalf("TimeToLive = %v, want nil", err)
	}
	var ks []string
	for _, k := range resp.Keys {
		ks = append(ks, string(k))
	}
	return ks
}

// A grant whose answer is lost after it applied: the slot is neither leaked
// nor held twice, whichever way the call goes on (front waiter, fast path,
// TryAcquireSlot, a cancel right after the loss).
func TestReview22SemLostGrantAnswer(t *testing.T) {
	e := newEnv(t)
	eng := e.engine(e.cli)
	q := &lossy{}
	lcli := e.srv.Client(t, grpc.WithChainUnaryInterceptor(q.unary))
	leng := e.engine(lcli)
	locks := prefix(t) + "/locks/sem"
	free := func(who string) {
		t.Helper()
		l, err := e.session(eng, 10*time.Second).TryAcquireSlot(ctx(t), "sem", "probe", 1)
		if err != nil {
			t.Fatalf("%s: the slot is not free afterwards: TryAcquireSlot = %v", who, err)
		}
		if err := l.Release(ctx(t)); err != nil {
			t.Fatalf("Release(probe) = %v", err)
		}
	}

	{ // front waiter
		h, err := e.session(eng, 10*time.Second).AcquireSlot(ctx(t), "sem", "h", 1)
		if err != nil {
			t.Fatalf("AcquireSlot(h) = %v", err)
		}
		ws := e.session(leng, 10*time.Second)
		wc := slotAsync(t, ws, "sem", "w", 1)
		semWaiters(t, e.cli, "sem", 1)
		q.arm(locks, 1, nil)
		if err := h.Release(ctx(t)); err != nil {
			t.Fatalf("Release(h) = %v", err)
		}
		g := awaitSlot(t, wc, 5*time.Second, "w")
		if g.err != nil {
			t.Fatalf("w: AcquireSlot after a lost grant answer = %v, want the slot", g.err)
		}
		if q.losses() != 1 {
			t.Fatalf("answers dropped = %d, want 1 (the premise)", q.losses())
		}
		if ks := leaseKeys(t, e.cli, ws.ID()); len(ks) != 1 || ks[0] != locks {
			t.Fatalf("keys on w's lease = %q, want only %s", ks, locks)
		}
		if sk := slotKeys(t, e.cli, "sem"); sk["sem"] != g.l.Token() {
			t.Fatalf("slot key token = %d, w's token %d", sk["sem"], g.l.Token())
		}
		if !g.l.Valid() {
			t.Fatal("w: Valid() = false")
		}
		if err := g.l.Release(ctx(t)); err != nil {
			t.Fatalf("Release(w) = %v", err)
		}
		free("front waiter")
	}

	{ // front waiter cancelled after the loss
		h, err := e.session(eng, 10*time.Second).AcquireSlot(ctx(t), "sem", "h", 1)
		if err != nil {
			t.Fatalf("AcquireSlot(h) = %v", err)
		}
		ws := e.session(leng, 10*time.Second)
		wctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		res := make(chan error, 1)
		go func() {
			l, err := ws.AcquireSlot(wctx, "sem", "w", 1)
			if err == nil {
				_ = l.Release(context.Background())
				err = errors.New("got the slot")
			}
			res <- err
		}()
		semWaiters(t, e.cli, "sem", 1)
		q.arm(locks, 1, cancel)
		if err := h.Release(ctx(t)); err != nil {
			t.Fatalf("Release(h) = %v", err)
		}
		select {
		case err := <-res:
			t.Logf("w: AcquireSlot = %v", err)
		case <-time.After(5 * time.Second):
			t.Fatal("w still waiting 5s after the cancel")
		}
		if q.losses() != 2 {
			t.Fatalf("answers dropped = %d, want 2 (the premise)", q.losses())
		}
		if ks, gone := withoutTombstones(t, leaseKeys(t, e.cli, ws.ID())); len(ks) != 0 || gone != 1 {
			t.Fatalf("keys left on the cancelled w's lease = %q and %d call tombstones, want none and the call's 1", ks, gone)
		}
		free("cancelled front waiter")
	}

	{ // fast path and TryAcquireSlot
		s := e.session(leng, 10*time.Second)
		q.arm(locks, 1, nil)
		l, err := s.AcquireSlot(ctx(t), "sem", "fast", 1)
		if err != nil {
			t.Fatalf("AcquireSlot (fast path) after a lost answer = %v, want the slot", err)
		}
		if ks := leaseKeys(t, e.cli, s.ID()); len(ks) != 1 {
			t.Fatalf("keys on the lease = %q, want the slot key only", ks)
		}
		if err := l.Release(ctx(t)); err != nil {
			t.Fatalf("Release = %v", err)
		}
		q.arm(locks, 1, nil)
		_, err = s.TryAcquireSlot(ctx(t), "sem", "try", 1)
		if !errors.Is(err, lease.ErrUnknownOutcome) {
			t.Fatalf("TryAcquireSlot after a lost answer = %v, want ErrUnknownOutcome", err)
		}
		if ks, gone := withoutTombstones(t, leaseKeys(t, e.cli, s.ID())); len(ks) != 0 || gone != 1 {
			t.Fatalf("keys left on the lease after TryAcquireSlot's lost answer = %q and %d call tombstones, want none and the call's 1", ks, gone)
		}
		free("TryAcquireSlot")
	}
}

// delayer is a client interceptor that holds back, while armed, every Txn
// whose success branch puts a key under put: the caller gets its context's
// error when its deadline passes, as for a request stuck in the network,
// and the request itself reaches etcd only at release, after the caller
// gave up and cleaned up.
type delayer struct {
	mu      sync.Mutex
	put     string
	held    []func()
	sent    sync.WaitGroup
	delayed int
}

func (d *delayer) arm(put string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.put = put
}

// release disarms and sends every held request, waiting for their answers.
func (d *delayer) release() {
	d.mu.Lock()
	held := d.held
	d.held, d.put = nil, ""
	d.mu.Unlock()
	for _, send := range held {
		send()
	}
	d.sent.Wait()
}

func (d *delayer) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.delayed
}

func (d *delayer) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	tr, ok := req.(*etcdserverpb.TxnRequest)
	d.mu.Lock()
	hit := false
	if ok && d.put != "" {
		for _, op := range tr.Success {
			if p := op.GetRequestPut(); p != nil && strings.HasPrefix(string(p.Key), d.put) {
				hit = true
			}
		}
	}
	if !hit {
		d.mu.Unlock()
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	d.delayed++
	d.sent.Add(1)
	d.held = append(d.held, func() {
		defer d.sent.Done()
		_ = invoker(context.Background(), method, req, new(etcdserverpb.TxnResponse), cc, opts...)
	})
	d.mu.Unlock()
	<-ctx.Done()
	return status.FromContextError(ctx.Err()).Err()
}

// An AcquireSlot whose enqueue is delayed in the network gives up (its ctx
// ends) and cleans up: nothing of it is in etcd then but its tombstone
// (semaphore.go: the clean-up of a call whose write's answer was lost puts
// it, and every write of the call compares it absent). When the delayed
// enqueue lands afterwards, its "If(entry absent) Then(Put(entry))" applies:
// an entry of a call that ended, on a session that lives on, heads the
// semaphore's queue. Nobody deletes it (the session's clean-up settled the
// entry as gone), so once the slot is free every later AcquireSlot queues
// behind it and TryAcquireSlot refuses with ErrLocked, until that session
// ends, however long it lives. (redislock refuses such a late request by
// the tombstone its clean-up leaves, docs/redis.md.)
func TestReview22SemDelayedEnqueueBlocksQueue(t *testing.T) {
	e := newEnv(t)
	eng := e.engine(e.cli)
	d := &delayer{}
	dcli := e.srv.Client(t, grpc.WithChainUnaryInterceptor(d.unary))
	ws := e.session(e.engine(dcli), 4*time.Second)

	h, err := e.session(eng, 10*time.Second).AcquireSlot(ctx(t), "sem", "h", 1)
	if err != nil {
		t.Fatalf("AcquireSlot(h) = %v", err)
	}
	d.arm(prefix(t) + "/semaphores/")
	wctx, cancel := context.WithTimeout(ctx(t), 2*time.Second)
	_, err = ws.AcquireSlot(wctx, "sem", "gave-up", 1)
	cancel()
	if err == nil || d.count() == 0 {
		t.Fatalf("AcquireSlot with its enqueue held back = %v after %d held enqueues, want the ctx's error (the premise)", err, d.count())
	}
	if ks, gone := withoutTombstones(t, leaseKeys(t, e.cli, ws.ID())); len(ks) != 0 || gone != 1 {
		t.Fatalf("keys on the lease right after the call = %q and %d call tombstones, want none and the call's 1 (the premise)", ks, gone)
	}
	d.release() // the held enqueue lands now
	if ks, _ := withoutTombstones(t, leaseKeys(t, e.cli, ws.ID())); len(ks) != 0 {
		t.Errorf("keys on the lease of the call that gave up, after its delayed enqueue landed: %q, want none", ks)
	}
	if err := h.Release(ctx(t)); err != nil {
		t.Fatalf("Release(h) = %v", err)
	}
	// The slot is free, and no live call waits for it.
	if l, err := e.session(eng, 10*time.Second).TryAcquireSlot(ctx(t), "sem", "try", 1); err != nil {
		t.Errorf("TryAcquireSlot with the slot free and no call waiting = %v, want the slot", err)
	} else if err := l.Release(ctx(t)); err != nil {
		t.Fatalf("Release(try) = %v", err)
	}
	actx, cancel := context.WithTimeout(ctx(t), 3*time.Second)
	defer cancel()
	if l, err := e.session(eng, 10*time.Second).AcquireSlot(actx, "sem", "next", 1); err != nil {
		t.Errorf("AcquireSlot with the slot free and no call waiting = %v, want the slot", err)
	} else {
		_ = l.Release(ctx(t))
	}
}

// A TryAcquireSlot whose grant is delayed in the network returns
// ErrUnknownOutcome after its clean-up read found no slot key ("the session
// deletes a slot key it may have created"). The grant lands afterwards: its
// compares (slot key, tombstone, mutex queue and semaphore queue absent, no
// slot key changed since the read) still hold, so it creates the slot key on
// the session's lease, tracked by no Lock and by no clean-up: the slot is
// held by nobody until the session ends. A semaphore of 2 then has 1.
func TestReview22SemDelayedTryGrantLeaksSlot(t *testing.T) {
	e := newEnv(t)
	eng := e.engine(e.cli)
	d := &delayer{}
	dcli := e.srv.Client(t, grpc.WithChainUnaryInterceptor(d.unary))
	ws := e.session(e.engine(dcli), 4*time.Second)

	d.arm(prefix(t) + "/locks/")
	_, err := ws.TryAcquireSlot(ctx(t), "sem", "gave-up", 2)
	if !errors.Is(err, lease.ErrUnknownOutcome) || d.count() != 1 {
		t.Fatalf("TryAcquireSlot with its grant held back = %v after %d held grants, want ErrUnknownOutcome after 1 (the premise)", err, d.count())
	}
	d.release() // the held grant lands now
	if ks, gone := withoutTombstones(t, leaseKeys(t, e.cli, ws.ID())); len(ks) != 0 || gone != 1 {
		t.Errorf("keys on the lease of the TryAcquireSlot that returned ErrUnknownOutcome, after its delayed grant landed: %q and %d call tombstones, want none and the call's 1", ks, gone)
	}
	var got []*lease.SlotLock
	for i := range 2 {
		l, err := e.session(eng, 10*time.Second).TryAcquireSlot(ctx(t), "sem", fmt.Sprintf("c%d", i), 2)
		if err != nil {
			t.Errorf("c%d: TryAcquireSlot with %d of 2 slots held by live callers = %v, want a slot", i, len(got), err)
			continue
		}
		got = append(got, l)
	}
	for _, l := range got {
		_ = l.Release(ctx(t))
	}
}

// TryAcquireSlot "fails at once: with an error wrapping ErrLocked when every
// slot is held ... or a waiter queues". In a session whose own AcquireSlot
// of the semaphore is queued, it fails with ErrBusy instead (both calls take
// the semaphore's one busy mark per session), which a caller that tells
// ErrLocked from real failures takes for a failure.
func TestReview22SemTryAcquireSlotBesideOwnWaiter(t *testing.T) {
	e := newEnv(t)
	eng := e.engine(e.cli)
	if _, err := e.session(eng, 10*time.Second).AcquireSlot(ctx(t), "sem", "h", 1); err != nil {
		t.Fatalf("AcquireSlot(h) = %v", err)
	}
	s := e.session(eng, 10*time.Second)
	_ = slotAsync(t, s, "sem", "w", 1)
	semWaiters(t, e.cli, "sem", 1)
	_, err := s.TryAcquireSlot(ctx(t), "sem", "t", 1)
	if !errors.Is(err, lease.ErrLocked) {
		t.Errorf("TryAcquireSlot with every slot held and a waiter queued = %v, want ErrLocked", err)
	}
}

// The session's leftovers are kept by etcd key, and a semaphore's queue
// entry has one key per lease: a second AcquireSlot's leftover replaces the
// first's in the clean-up's map. Here the first call's entry stays in etcd
// (its clean-up could not reach etcd: reads fail, writes pass); the second
// call finds it, cannot delete it either and gives up; its own leftover (an
// entry it never wrote) replaces the first's; once reads pass again the
// clean-up finds the first's entry, "not ours", and forgets it. The entry of
// a call that ended then heads the queue on a live session, for its life.
func TestReview22SemSecondLeftoverHidesFirst(t *testing.T) {
	const ttl = 4 * time.Second
	e := newEnv(t)
	eng := e.engine(e.cli)
	gate := etcdtest.NewGate()
	ws := e.session(e.engine(e.srv.Client(t, gate.DialOptions()...)), ttl)
	h, err := e.session(eng, 10*time.Second).AcquireSlot(ctx(t), "sem", "h", 1)
	if err != nil {
		t.Fatalf("AcquireSlot(h) = %v", err)
	}
	c1, cancel1 := context.WithCancel(ctx(t))
	r1 := make(chan error, 1)
	go func() { _, err := ws.AcquireSlot(c1, "sem", "first", 1); r1 <- err }()
	semWaiters(t, e.cli, "sem", 1)

	gate.Stall("Range")
	t.Cleanup(func() { gate.Unstall("Range") })
	cancel1()
	if err := <-r1; !errors.Is(err, context.Canceled) {
		t.Fatalf("first: AcquireSlot = %v, want context.Canceled", err)
	}
	if n := semQueued(t, e.cli, "sem"); n != 1 {
		t.Fatalf("entries after the first call = %d, want 1 (its clean-up could not read: the premise)", n)
	}
	c2, cancel2 := context.WithTimeout(ctx(t), 3*time.Second)
	_, err = ws.AcquireSlot(c2, "sem", "second", 1)
	cancel2()
	if err == nil {
		t.Fatal("second: AcquireSlot = nil, want an error (the premise)")
	}
	gate.Unstall("Range")
	// The clean-up retries every TTL/20; give it many rounds.
	time.Sleep(ttl / 2)
	if ks := leaseKeys(t, e.cli, ws.ID()); len(ks) != 0 {
		t.Errorf("keys on the lease %v after both calls ended and reads pass again: %q, want none", ttl/2, ks)
	}
	if err := h.Release(ctx(t)); err != nil {
		t.Fatalf("Release(h) = %v", err)
	}
	if _, err := e.session(eng, 10*time.Second).TryAcquireSlot(ctx(t), "sem", "try", 1); err != nil {
		t.Errorf("TryAcquireSlot with the slot free and no call waiting = %v, want the slot", err)
	}
}

// The mutex's TryAcquire shared the delayed-grant defect: a TryAcquire
// whose grant is delayed in the network returns ErrUnknownOutcome after its
// clean-up found no key; the grant landed afterwards and held the lock for
// nobody until the session ended. Its clean-up now puts the call's tombstone
// first, and the grant compares it absent.
func TestReview22MutexDelayedTryGrantHoldsLock(t *testing.T) {
	e := newEnv(t)
	d := &delayer{}
	ws := e.session(e.engine(e.srv.Client(t, grpc.WithChainUnaryInterceptor(d.unary))), 4*time.Second)
	d.arm(prefix(t) + "/locks/")
	_, err := ws.TryAcquire(ctx(t), "mx", "gave-up")
	if !errors.Is(err, lease.ErrUnknownOutcome) || d.count() != 1 {
		t.Fatalf("TryAcquire with its grant held back = %v after %d held grants, want ErrUnknownOutcome after 1 (the premise)", err, d.count())
	}
	d.release() // the held grant lands now
	if ks, gone := withoutTombstones(t, leaseKeys(t, e.cli, ws.ID())); len(ks) != 0 || gone != 1 {
		t.Errorf("keys on the lease of the TryAcquire that returned ErrUnknownOutcome, after its delayed grant landed: %q and %d call tombstones, want none and the call's 1", ks, gone)
	}
	if _, err := e.session(e.engine(e.cli), 10*time.Second).TryAcquire(ctx(t), "mx", "next"); err != nil {
		t.Errorf("TryAcquire with no live holder = %v, want the lock", err)
	}
}

// A blocking Acquire whose join (take the free lock, or queue) is delayed in
// the network past its call's clean-up creates nothing when it lands: the
// clean-up puts the call's tombstone first, which join and enqueue compare
// absent. Before the fix its entry queued on a live session and became the
// lock's grant, for no caller, once the holder released ("TryAcquire with no
// live holder or waiter = ... ErrLocked"): the lock was held by nobody until
// that session ended.
func TestReview22MutexDelayedJoinHoldsLock(t *testing.T) {
	e := newEnv(t)
	eng := e.engine(e.cli)
	d := &delayer{}
	ws := e.session(e.engine(e.srv.Client(t, grpc.WithChainUnaryInterceptor(d.unary))), 4*time.Second)
	h, err := e.session(eng, 10*time.Second).Acquire(ctx(t), "mx", "h")
	if err != nil {
		t.Fatalf("Acquire(h) = %v", err)
	}
	d.arm(prefix(t) + "/locks/")
	wctx, cancel := context.WithTimeout(ctx(t), 2*time.Second)
	_, err = ws.Acquire(wctx, "mx", "gave-up")
	cancel()
	if err == nil || d.count() == 0 {
		t.Fatalf("Acquire with its join held back = %v after %d held transactions, want the ctx's error (the premise)", err, d.count())
	}
	d.release() // the held join lands now: the lock is held, so it queues
	if ks, _ := withoutTombstones(t, leaseKeys(t, e.cli, ws.ID())); len(ks) != 0 {
		t.Errorf("keys on the lease of the Acquire that gave up, after its delayed join landed: %q, want none", ks)
	}
	if err := h.Release(ctx(t)); err != nil {
		t.Fatalf("Release(h) = %v", err)
	}
	if _, err := e.session(eng, 10*time.Second).TryAcquire(ctx(t), "mx", "next"); err != nil {
		t.Errorf("TryAcquire with no live holder or waiter = %v, want the lock", err)
	}
}
