package lease_test

// Tests from the adversarial review of issue 23's GrantBatch (batch.go). They fail on main
// at 0de24ae.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockwarden/lockwarden/pkg/lease"
)

// TestReviewScaleGrantBatchRefusalAsGrant: GrantBatch's doc says each lock "is refused with
// its own answer (*HeldError, ErrLocked)" exactly when Grant would refuse it, and
// docs/scale.md says "each lock is granted exactly when Grant would have granted it alone,
// and refused with its own answer". For a lock whose grant is a blocking Acquire's queue
// entry (owner.go rule 3: no lock key, the oldest waiter holds it), Grant's Else reads the
// oldest entry (stateReads) and answers *HeldError naming that holder and its token; the
// batch's nested transaction reads only the key, the tombstone and the queue's count, and
// answers a bare ErrLocked ("1 waiters queued") that names nobody. The controller's grantTo
// treats the two differently: a HeldError waits 100 ms for the next read, anything else is
// counted as an etcd error and returned (workqueue backoff).
func TestReviewScaleGrantBatchRefusalAsGrant(t *testing.T) {
	const ttl = 2 * time.Second
	e := newEnv(t)
	eng := e.engine(e.cli)
	s := e.session(eng, ttl)

	owner, err := e.session(e.engine(e.cli), ttl).TryAcquire(ctx(t), "ns/queued", "owner")
	if err != nil {
		t.Fatalf("TryAcquire(ns/queued) = %v, want nil", err)
	}
	waiter := e.session(e.engine(e.cli), ttl)
	acquired := make(chan *lease.Lock, 1)
	go func() {
		l, err := waiter.Acquire(ctx(t), "ns/queued", "waiter")
		if err != nil {
			t.Errorf("waiter's Acquire = %v, want nil", err)
		}
		acquired <- l
	}()
	waiters(t, eng, "ns/queued", 1)
	if err := owner.Release(ctx(t)); err != nil {
		t.Fatalf("Release(ns/queued) = %v, want nil", err)
	}
	wl := <-acquired
	if wl == nil {
		t.FailNow()
	}
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = wl.Release(c)
	})

	_, gerr := s.Grant(ctx(t), "ns/queued", "uid-q")
	he := asHeld(t, gerr) // control: Grant names the waiter
	if he.Holder != "waiter" || he.Token != wl.Token() {
		t.Fatalf("control: Grant(ns/queued) = %v, want the waiter's HeldError with token %d", gerr, wl.Token())
	}
	results, err := s.GrantBatch(ctx(t), []lease.GrantRequest{{Key: "ns/queued", Holder: "uid-q"}})
	if err != nil {
		t.Fatalf("GrantBatch = %v, want nil", err)
	}
	var bhe *lease.HeldError
	if !errors.As(results[0].Err, &bhe) || bhe.Holder != "waiter" || bhe.Token != wl.Token() {
		t.Fatalf("GrantBatch result for ns/queued = %v, want Grant's answer %v (a HeldError naming the waiter, token %d)", results[0].Err, gerr, wl.Token())
	}
}
