package lease_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"sort"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockwarden/lockwarden/pkg/lease"
)

// slotGot is the outcome of an AcquireSlot run in the background.
type slotGot struct {
	l   *lease.SlotLock
	err error
}

// slotAsync starts s.AcquireSlot(name, holder, n) and returns its outcome channel.
func slotAsync(t *testing.T, s *lease.Session, name, holder string, n int) <-chan slotGot {
	c := make(chan slotGot, 1)
	go func() {
		l, err := s.AcquireSlot(ctx(t), name, holder, n)
		c <- slotGot{l, err}
	}()
	return c
}

// awaitSlot returns the outcome of a slotAsync, failing after timeout.
func awaitSlot(t *testing.T, c <-chan slotGot, timeout time.Duration, who string) slotGot {
	t.Helper()
	select {
	case g := <-c:
		return g
	case <-time.After(timeout):
		t.Fatalf("%s: no AcquireSlot result after %v", who, timeout)
		return slotGot{}
	}
}

// noSlotYet fails if c delivered within d.
func noSlotYet(t *testing.T, c <-chan slotGot, d time.Duration, who string) {
	t.Helper()
	time.Sleep(d)
	select {
	case g := <-c:
		t.Fatalf("%s: AcquireSlot returned (%v, %v), want it still waiting", who, g.l, g.err)
	default:
	}
}

// semQueued returns the number of queue entries of the semaphore name.
func semQueued(t *testing.T, cli *clientv3.Client, name string) int64 {
	t.Helper()
	resp, err := cli.Get(ctx(t), prefix(t)+"/semaphores/"+url.PathEscape(name)+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatalf("Get semaphore queue = %v, want nil", err)
	}
	return resp.Count
}

// semWaiters polls until the semaphore name has want queued waiters.
func semWaiters(t *testing.T, cli *clientv3.Client, name string, want int64) {
	t.Helper()
	eventually(t, 5*time.Second, func() error {
		if got := semQueued(t, cli, name); got != want {
			return fmt.Errorf("waiters of semaphore %q = %d, want %d", name, got, want)
		}
		return nil
	})
}

// slotKeys returns the slot keys of the semaphore name in etcd, by lock name.
func slotKeys(t *testing.T, cli *clientv3.Client, name string) map[string]int64 {
	t.Helper()
	root := prefix(t) + "/locks/"
	resp, err := cli.Txn(ctx(t)).Then(
		clientv3.OpGet(root+name, clientv3.WithKeysOnly()),
		clientv3.OpGet(root+name+"/slot/", clientv3.WithPrefix(), clientv3.WithKeysOnly()),
	).Commit()
	if err != nil {
		t.Fatalf("Get slot keys = %v, want nil", err)
	}
	got := make(map[string]int64)
	for _, r := range resp.Responses {
		for _, kv := range r.GetResponseRange().Kvs {
			got[string(kv.Key)[len(root):]] = kv.CreateRevision
		}
	}
	return got
}

// validWatch counts, as often as it can, how many of the slots it is shown
// are Valid at once, and remembers the most.
type validWatch struct {
	mu   sync.Mutex
	live map[*lease.SlotLock]bool
	most int
	stop chan struct{}
	done chan struct{}
}

func watchValid(t *testing.T) *validWatch {
	w := &validWatch{live: make(map[*lease.SlotLock]bool), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.stop:
				return
			default:
			}
			w.mu.Lock()
			n := 0
			for l := range w.live {
				if l.Valid() {
					n++
				}
			}
			w.most = max(w.most, n)
			w.mu.Unlock()
			time.Sleep(100 * time.Microsecond)
		}
	}()
	t.Cleanup(w.close)
	return w
}

// add shows the watch a slot; it also counts at once, so that no overlap
// escapes between two rounds.
func (w *validWatch) add(l *lease.SlotLock) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.live[l] = true
	n := 0
	for l := range w.live {
		if l.Valid() {
			n++
		}
	}
	w.most = max(w.most, n)
	return n
}

func (w *validWatch) remove(l *lease.SlotLock) {
	w.mu.Lock()
	delete(w.live, l)
	w.mu.Unlock()
}

func (w *validWatch) close() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// mostValid stops the watch and returns the most slots it saw Valid at once.
func (w *validWatch) mostValid() int {
	w.close()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.most
}

// span is one holder's time with a valid slot, by its own clock.
type span struct {
	from, to time.Time
	slot     int
	token    int64
}

// maxOverlap returns the most spans that overlap at one instant.
func maxOverlap(spans []span) int {
	type ev struct {
		at    time.Time
		delta int
	}
	var evs []ev
	for _, s := range spans {
		evs = append(evs, ev{s.from, 1}, ev{s.to, -1})
	}
	sort.Slice(evs, func(i, j int) bool {
		if evs[i].at.Equal(evs[j].at) {
			return evs[i].delta < evs[j].delta // an end before a start at the same instant
		}
		return evs[i].at.Before(evs[j].at)
	})
	n, most := 0, 0
	for _, e := range evs {
		n += e.delta
		most = max(most, n)
	}
	return most
}

// At most n holders under many concurrent contenders, checked three ways:
// the holders' own Valid() (a watcher that counts the valid slots while they
// come and go), their validity spans by the process's clock, and the slot
// keys in etcd; every slot's tokens strictly increase across its grants.
func TestSemaphoreAtMostN(t *testing.T) {
	const (
		slots       = 3
		contenders  = 12
		rounds      = 25
		ttl         = 5 * time.Second
		semaphore   = "pool"
		maxHoldTime = 3 * time.Millisecond
	)
	e := newEnv(t)
	eng := e.engine(e.cli)
	vw := watchValid(t)

	var mu sync.Mutex
	var spans []span
	tokens := make(map[int][]int64) // by slot, in grant order
	var holding int
	var mostHolding int

	stopKeys := make(chan struct{})
	keysDone := make(chan int)
	pctx := ctx(t)
	root := prefix(t) + "/locks/" + semaphore
	go func() { // the slot keys in etcd, read as often as possible
		most := 0
		for {
			select {
			case <-stopKeys:
				keysDone <- most
				return
			default:
			}
			resp, err := e.cli.Txn(pctx).Then(
				clientv3.OpGet(root, clientv3.WithCountOnly()),
				clientv3.OpGet(root+"/slot/", clientv3.WithPrefix(), clientv3.WithCountOnly()),
			).Commit()
			if err != nil {
				t.Errorf("read slot keys = %v, want nil", err)
				continue
			}
			most = max(most, int(resp.Responses[0].GetResponseRange().Count+resp.Responses[1].GetResponseRange().Count))
		}
	}()

	var wg sync.WaitGroup
	for c := range contenders {
		s := e.session(eng, ttl)
		wg.Go(func() {
			for r := range rounds {
				holder := fmt.Sprintf("c%d-r%d", c, r)
				l, err := s.AcquireSlot(ctx(t), semaphore, holder, slots)
				if err != nil {
					t.Errorf("%s: AcquireSlot = %v, want nil", holder, err)
					return
				}
				from := time.Now()
				if !l.Valid() {
					t.Errorf("%s: Valid() = false right after AcquireSlot", holder)
				}
				if n := vw.add(l); n > slots {
					t.Errorf("%s: %d slots valid at once, want at most %d", holder, n, slots)
				}
				if l.Index() < 0 || l.Index() >= slots || l.Key() != lease.SlotKey(semaphore, l.Index()) || l.Semaphore() != semaphore || l.Slots() != slots {
					t.Errorf("%s: slot %d key %q semaphore %q slots %d, want an index below %d with key SlotKey(%q, index)",
						holder, l.Index(), l.Key(), l.Semaphore(), l.Slots(), slots, semaphore)
				}
				mu.Lock()
				holding++
				mostHolding = max(mostHolding, holding)
				tokens[l.Index()] = append(tokens[l.Index()], l.Token())
				mu.Unlock()

				time.Sleep(time.Duration(rand.Int64N(int64(maxHoldTime))))

				valid := l.Valid()
				to := time.Now()
				mu.Lock()
				holding--
				if valid {
					spans = append(spans, span{from, to, l.Index(), l.Token()})
				} else {
					t.Errorf("%s: slot %d lost while held: %v", holder, l.Index(), l.Err())
				}
				mu.Unlock()
				if err := l.Release(ctx(t)); err != nil {
					t.Errorf("%s: Release = %v, want nil", holder, err)
				}
				vw.remove(l)
			}
		})
	}
	wg.Wait()
	close(stopKeys)
	keysMost := <-keysDone

	if got := vw.mostValid(); got > slots || got == 0 {
		t.Errorf("most slots Valid() at once = %d, want 1..%d", got, slots)
	}
	if mostHolding > slots {
		t.Errorf("most holders between AcquireSlot and Release = %d, want at most %d", mostHolding, slots)
	}
	if got := maxOverlap(spans); got > slots {
		t.Errorf("most validity spans overlapping = %d, want at most %d", got, slots)
	}
	if keysMost > slots {
		t.Errorf("most slot keys in etcd at once = %d, want at most %d", keysMost, slots)
	}
	if len(spans) != contenders*rounds {
		t.Errorf("grants = %d, want %d", len(spans), contenders*rounds)
	}
	// Contention spreads the grants over every slot.
	if len(tokens) != slots {
		t.Errorf("slots granted = %d, want %d", len(tokens), slots)
	}
	for i, ts := range tokens {
		for j := 1; j < len(ts); j++ {
			if ts[j] <= ts[j-1] {
				t.Errorf("slot %d: grant %d has token %d after %d, want strictly increasing", i, j, ts[j], ts[j-1])
			}
		}
	}
	if n := semQueued(t, e.cli, semaphore); n != 0 {
		t.Errorf("queue entries left = %d, want 0", n)
	}
	if k := slotKeys(t, e.cli, semaphore); len(k) != 0 {
		t.Errorf("slot keys left = %v, want none", k)
	}
}

// Waiters get slots in the order they queued, whichever slot frees up, and a
// free slot never goes to a younger waiter while an older one waits.
func TestSemaphoreFIFO(t *testing.T) {
	const slots, waiting = 2, 5
	e := newEnv(t)
	eng := e.engine(e.cli)
	var held []*lease.SlotLock
	for i := range slots {
		l, err := e.session(eng, 30*time.Second).AcquireSlot(ctx(t), "sem", fmt.Sprintf("first-%d", i), slots)
		if err != nil {
			t.Fatalf("AcquireSlot(first-%d) = %v, want nil", i, err)
		}
		if l.Index() != i {
			t.Fatalf("first-%d got slot %d, want %d (the lowest free)", i, l.Index(), i)
		}
		held = append(held, l)
	}
	var cs []<-chan slotGot
	for i := range waiting {
		cs = append(cs, slotAsync(t, e.session(eng, 30*time.Second), "sem", fmt.Sprintf("w%d", i), slots))
		semWaiters(t, e.cli, "sem", int64(i+1))
	}
	// Free slot 1, then slot 0, then whichever the newest holder has: each
	// goes to the oldest waiter, and its token is above every earlier grant.
	last := held[1].Token()
	for i := range waiting {
		free := held[len(held)-1]
		if i%2 == 1 {
			free = held[0]
		}
		if err := free.Release(ctx(t)); err != nil {
			t.Fatalf("Release slot %d = %v, want nil", free.Index(), err)
		}
		g := awaitSlot(t, cs[i], 10*time.Second, fmt.Sprintf("w%d", i))
		if g.err != nil {
			t.Fatalf("w%d: AcquireSlot = %v, want nil", i, g.err)
		}
		if g.l.Index() != free.Index() {
			t.Errorf("w%d got slot %d, want the freed slot %d", i, g.l.Index(), free.Index())
		}
		if g.l.Token() <= last {
			t.Errorf("w%d's token %d, want above the previous grant's %d", i, g.l.Token(), last)
		}
		last = g.l.Token()
		for j := i + 1; j < waiting; j++ {
			noSlotYet(t, cs[j], 0, fmt.Sprintf("w%d", j))
		}
		semWaiters(t, e.cli, "sem", int64(waiting-i-1))
		// The new holder replaces the freed one.
		if free == held[0] {
			held[0] = g.l
		} else {
			held[len(held)-1] = g.l
		}
	}

	// Both slots free at once: the two oldest waiters take them, the third
	// keeps waiting.
	cs = cs[:0]
	for i := range 3 {
		cs = append(cs, slotAsync(t, e.session(eng, 30*time.Second), "sem", fmt.Sprintf("v%d", i), slots))
		semWaiters(t, e.cli, "sem", int64(i+1))
	}
	var wg sync.WaitGroup
	for _, l := range held {
		wg.Go(func() {
			if err := l.Release(ctx(t)); err != nil {
				t.Errorf("Release slot %d = %v, want nil", l.Index(), err)
			}
		})
	}
	wg.Wait()
	v0, v1 := awaitSlot(t, cs[0], 10*time.Second, "v0"), awaitSlot(t, cs[1], 10*time.Second, "v1")
	if v0.err != nil || v1.err != nil {
		t.Fatalf("v0, v1: AcquireSlot = %v, %v, want nil", v0.err, v1.err)
	}
	if v0.l.Index() == v1.l.Index() || v0.l.Token() >= v1.l.Token() {
		t.Errorf("v0 slot %d token %d, v1 slot %d token %d: want two slots, v0 granted first", v0.l.Index(), v0.l.Token(), v1.l.Index(), v1.l.Token())
	}
	noSlotYet(t, cs[2], 200*time.Millisecond, "v2")
	semWaiters(t, e.cli, "sem", 1)
}

// TryAcquireSlot fails at once with ErrLocked when every slot is held and
// when a waiter queues (no barging), and takes the lowest free slot
// otherwise.
func TestTryAcquireSlot(t *testing.T) {
	e := newEnv(t)
	eng := e.engine(e.cli)
	s1, s2, s3 := e.session(eng, 10*time.Second), e.session(eng, 10*time.Second), e.session(eng, 10*time.Second)
	a, err := s1.TryAcquireSlot(ctx(t), "sem", "a", 2)
	if err != nil || a.Index() != 0 || a.Key() != "sem" {
		t.Fatalf("TryAcquireSlot(a) = %v, %v, want slot 0 (key sem)", a, err)
	}
	b, err := s2.TryAcquireSlot(ctx(t), "sem", "b", 2)
	if err != nil || b.Index() != 1 || b.Key() != "sem/slot/1" {
		t.Fatalf("TryAcquireSlot(b) = %v, %v, want slot 1 (key sem/slot/1)", b, err)
	}
	if h := holding(t, eng, "sem/slot/1"); h.Holder != "b" || h.Token != b.Token() {
		t.Errorf("Inspect(sem/slot/1) = holder %q token %d, want b with %d", h.Holder, h.Token, b.Token())
	}
	start := time.Now()
	_, err = s3.TryAcquireSlot(ctx(t), "sem", "c", 2)
	if !errors.Is(err, lease.ErrLocked) {
		t.Fatalf("TryAcquireSlot when full = %v, want ErrLocked", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("TryAcquireSlot when full took %v, want at once", d)
	}
	// A waiter queues; a slot frees and goes to it, not to a TryAcquireSlot.
	wc := slotAsync(t, s3, "sem", "w", 2)
	semWaiters(t, e.cli, "sem", 1)
	if _, err := e.session(eng, 10*time.Second).TryAcquireSlot(ctx(t), "sem", "barger", 2); !errors.Is(err, lease.ErrLocked) {
		t.Fatalf("TryAcquireSlot with a waiter queued = %v, want ErrLocked", err)
	}
	if err := a.Release(ctx(t)); err != nil {
		t.Fatalf("Release(a) = %v, want nil", err)
	}
	g := awaitSlot(t, wc, 5*time.Second, "waiter")
	if g.err != nil || g.l.Index() != 0 || g.l.Token() <= a.Token() {
		t.Fatalf("waiter: AcquireSlot = %v, %v, want slot 0 with a token above %d", g.l, g.err, a.Token())
	}
	if err := b.Release(ctx(t)); err != nil {
		t.Fatalf("Release(b) = %v, want nil", err)
	}
	c, err := s1.TryAcquireSlot(ctx(t), "sem", "c", 2)
	if err != nil || c.Index() != 1 || c.Token() <= b.Token() {
		t.Fatalf("TryAcquireSlot after b's release = %v, %v, want slot 1 with a token above %d", c, err, b.Token())
	}
}

// Bad arguments are refused before anything is sent, and so are callers that
// disagree on the slot count, once one sees the other's keys.
func TestSemaphoreRefusals(t *testing.T) {
	e := newEnv(t)
	eng := e.engine(e.cli)
	s := e.session(eng, 10*time.Second)
	for _, tc := range []struct {
		name, sem, holder string
		n                 int
	}{
		{"no slots", "sem", "h", 0},
		{"too many slots", "sem", "h", lease.MaxSlots + 1},
		{"negative slots", "sem", "h", -1},
		{"empty name", "", "h", 1},
		{"a slot key as name", "sem/slot/2", "h", 1},
		{"escaping name", "../x", "h", 1},
		{"empty holder", "sem", "", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := s.TryAcquireSlot(ctx(t), tc.sem, tc.holder, tc.n); !errors.Is(err, lease.ErrInvalid) {
				t.Errorf("TryAcquireSlot(%q, %q, %d) = %v, want ErrInvalid", tc.sem, tc.holder, tc.n, err)
			}
			if _, err := s.AcquireSlot(ctx(t), tc.sem, tc.holder, tc.n); !errors.Is(err, lease.ErrInvalid) {
				t.Errorf("AcquireSlot(%q, %q, %d) = %v, want ErrInvalid", tc.sem, tc.holder, tc.n, err)
			}
		})
	}
	// An engine whose transactions are too small for the read of n slots.
	small := e.session(lease.NewEngine(e.cli, lease.WithPrefix(prefix(t)), lease.WithMaxTxnOps(8)), 10*time.Second)
	if _, err := small.TryAcquireSlot(ctx(t), "sem", "h", 3); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("TryAcquireSlot(n=3) with 8 ops per transaction = %v, want ErrInvalid", err)
	}
	if ks := keys(t, e.cli); len(ks) != 0 {
		t.Fatalf("keys after refused calls = %v, want none", ks)
	}

	// Three slots in use; a caller that says two is refused, whether it
	// sees the slot beyond two or a slot that records three.
	var three []*lease.SlotLock
	for i := range 3 {
		l, err := e.session(eng, 10*time.Second).TryAcquireSlot(ctx(t), "sem", fmt.Sprintf("h%d", i), 3)
		if err != nil {
			t.Fatalf("TryAcquireSlot(h%d, 3) = %v, want nil", i, err)
		}
		three = append(three, l)
	}
	if _, err := s.TryAcquireSlot(ctx(t), "sem", "two", 2); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("TryAcquireSlot(n=2) beside n=3 holders = %v, want ErrInvalid", err)
	}
	if err := three[2].Release(ctx(t)); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	if _, err := s.AcquireSlot(ctx(t), "sem", "two", 2); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("AcquireSlot(n=2) beside n=3 holders of slots 0 and 1 = %v, want ErrInvalid", err)
	}
	// A caller of another count is refused while callers of three queue and hold.
	wc := slotAsync(t, e.session(eng, 10*time.Second), "sem", "w3", 3)
	if g := awaitSlot(t, wc, 5*time.Second, "w3"); g.err != nil || g.l.Index() != 2 {
		t.Fatalf("AcquireSlot(w3) = %v, %v, want slot 2", g.l, g.err)
	}
	wq := slotAsync(t, e.session(eng, 10*time.Second), "sem", "q3", 3)
	semWaiters(t, e.cli, "sem", 1)
	if _, err := s.AcquireSlot(ctx(t), "sem", "q4", 4); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("AcquireSlot(n=4) beside n=3 holders and a waiter = %v, want ErrInvalid", err)
	}
	semWaiters(t, e.cli, "sem", 1) // the refused call left nothing
	if err := three[0].Release(ctx(t)); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	if g := awaitSlot(t, wq, 5*time.Second, "q3"); g.err != nil || g.l.Index() != 0 {
		t.Fatalf("AcquireSlot(q3) = %v, %v, want slot 0", g.l, g.err)
	}

	// One AcquireSlot per semaphore and session at a time.
	full := e.session(eng, 10*time.Second)
	c1 := slotAsync(t, full, "sem", "x", 3)
	semWaiters(t, e.cli, "sem", 1)
	if _, err := full.AcquireSlot(ctx(t), "sem", "y", 3); !errors.Is(err, lease.ErrBusy) {
		t.Errorf("second AcquireSlot of one session = %v, want ErrBusy", err)
	}
	if err := three[1].Release(ctx(t)); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	if g := awaitSlot(t, c1, 5*time.Second, "x"); g.err != nil {
		t.Fatalf("AcquireSlot(x) = %v, want nil", g.err)
	}
}

// A waiter whose ctx ends while queued leaves no entry behind, and the waiter
// behind it moves up.
func TestAcquireSlotCancelledWhileQueued(t *testing.T) {
	e := newEnv(t)
	eng := e.engine(e.cli)
	h, err := e.session(eng, 10*time.Second).AcquireSlot(ctx(t), "sem", "holder", 1)
	if err != nil {
		t.Fatalf("AcquireSlot = %v, want nil", err)
	}
	ws := e.session(eng, 10*time.Second)
	wctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() {
		_, err := ws.AcquireSlot(wctx, "sem", "cancelled", 1)
		res <- err
	}()
	semWaiters(t, e.cli, "sem", 1)
	bc := slotAsync(t, e.session(eng, 10*time.Second), "sem", "behind", 1)
	semWaiters(t, e.cli, "sem", 2)
	cancel()
	select {
	case err := <-res:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("AcquireSlot after cancel = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("AcquireSlot still waiting 5s after its ctx was cancelled")
	}
	// Gone when the call returned: nothing of it is on its lease.
	ttlResp, err := e.cli.TimeToLive(ctx(t), ws.ID(), clientv3.WithAttachedKeys())
	if err != nil || len(ttlResp.Keys) != 0 {
		t.Fatalf("keys on the cancelled waiter's lease = %q (err %v), want none", ttlResp.Keys, err)
	}
	if n := semQueued(t, e.cli, "sem"); n != 1 {
		t.Fatalf("waiters after the cancel = %d, want 1", n)
	}
	if err := h.Release(ctx(t)); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	if g := awaitSlot(t, bc, 5*time.Second, "behind"); g.err != nil || g.l.Holder() != "behind" {
		t.Fatalf("behind: AcquireSlot = %v, %v, want the slot", g.l, g.err)
	}
}

// A holder's session ends (its lease revoked): its slot goes to the next
// waiter; a waiter's session ends: it returns its session's error and the
// waiter behind it gets the slot.
func TestSemaphoreSessionEnds(t *testing.T) {
	const ttl = 2 * time.Second
	e := newEnv(t)
	eng := e.engine(e.cli)
	hs := e.session(eng, ttl)
	h0, err := hs.AcquireSlot(ctx(t), "sem", "h0", 2)
	if err != nil {
		t.Fatalf("AcquireSlot(h0) = %v, want nil", err)
	}
	h1, err := e.session(eng, ttl).AcquireSlot(ctx(t), "sem", "h1", 2)
	if err != nil {
		t.Fatalf("AcquireSlot(h1) = %v, want nil", err)
	}
	ws := e.session(eng, ttl)
	wc := slotAsync(t, ws, "sem", "doomed", 2)
	semWaiters(t, e.cli, "sem", 1)
	nc := slotAsync(t, e.session(eng, ttl), "sem", "next", 2)
	semWaiters(t, e.cli, "sem", 2)

	// The first waiter's lease goes: it leaves the line.
	if _, err := e.cli.Revoke(ctx(t), ws.ID()); err != nil {
		t.Fatalf("Revoke(waiter) = %v, want nil", err)
	}
	if g := awaitSlot(t, wc, ttl+slack, "doomed"); !errors.Is(g.err, lease.ErrSessionExpired) {
		t.Fatalf("doomed waiter: AcquireSlot = %v, %v, want ErrSessionExpired", g.l, g.err)
	}
	semWaiters(t, e.cli, "sem", 1)
	noSlotYet(t, nc, 100*time.Millisecond, "next")

	// A holder's lease goes: its slot goes to the next waiter.
	if _, err := e.cli.Revoke(ctx(t), hs.ID()); err != nil {
		t.Fatalf("Revoke(holder) = %v, want nil", err)
	}
	g := awaitSlot(t, nc, 5*time.Second, "next")
	if g.err != nil || g.l.Index() != h0.Index() || g.l.Token() <= h0.Token() {
		t.Fatalf("next: AcquireSlot = %v, %v, want slot %d with a token above %d", g.l, g.err, h0.Index(), h0.Token())
	}
	waitClosed(t, h0.Done(), ttl+slack, "revoked holder's Done")
	if h0.Valid() {
		t.Error("revoked holder's Valid() = true, want false")
	}
	if !h1.Valid() {
		t.Errorf("other holder's Valid() = false (%v), want true", h1.Err())
	}
}

// A semaphore waiter that died with its process (its session orphaned) would
// block the line until its lease expires; resuming the lease deletes its
// entry at once.
func TestResumeDropsSemaphoreEntry(t *testing.T) {
	e := newEnv(t)
	eng := e.engine(e.cli)
	h, err := e.session(eng, 10*time.Second).AcquireSlot(ctx(t), "sem", "holder", 1)
	if err != nil {
		t.Fatalf("AcquireSlot = %v, want nil", err)
	}
	dead, err := eng.NewSession(ctx(t), 10*time.Second)
	if err != nil {
		t.Fatalf("NewSession = %v, want nil", err)
	}
	dc := slotAsync(t, dead, "sem", "dead", 1)
	semWaiters(t, e.cli, "sem", 1)
	nc := slotAsync(t, e.session(eng, 10*time.Second), "sem", "next", 1)
	semWaiters(t, e.cli, "sem", 2)
	dead.Orphan() // the process dies; its lease and entry stay
	if g := awaitSlot(t, dc, 5*time.Second, "dead"); !errors.Is(g.err, lease.ErrSessionClosed) {
		t.Fatalf("orphaned waiter: AcquireSlot = %v, %v, want ErrSessionClosed", g.l, g.err)
	}
	if n := semQueued(t, e.cli, "sem"); n != 2 {
		t.Fatalf("waiters after the orphan = %d, want 2 (the premise)", n)
	}
	resumed, err := eng.ResumeSession(ctx(t), dead.ID())
	if err != nil {
		t.Fatalf("ResumeSession = %v, want nil", err)
	}
	t.Cleanup(func() { _ = resumed.Close(context.Background()) })
	semWaiters(t, e.cli, "sem", 1)
	if err := h.Release(ctx(t)); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	if g := awaitSlot(t, nc, 5*time.Second, "next"); g.err != nil {
		t.Fatalf("next: AcquireSlot = %v, want nil", g.err)
	}
}
