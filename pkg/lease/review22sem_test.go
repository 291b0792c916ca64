package lease_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

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
