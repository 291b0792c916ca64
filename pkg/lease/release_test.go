package lease_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lockwarden/lockwarden/internal/etcdtest"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// Failure 3 (etcd issue 22082): a release whose reply was lost is retried
// after the same session took the lock again; a delete by key name would
// remove the newer grant. Ours compares CreateRevision with the old token.
func TestReleaseRetryAfterLostReply(t *testing.T) {
	e := newEnv(t)
	p := etcdtest.NewProxy(t, e.srv.Endpoint())
	eng := e.engine(etcdtest.NewClient(t, []string{p.Endpoint()}))
	s := e.session(eng, 3*time.Second)

	first, err := s.TryAcquire(ctx(t), "job", "worker")
	if err != nil {
		t.Fatalf("TryAcquire = %v, want nil", err)
	}

	// The release reaches etcd, its reply does not reach us in time.
	p.PauseRx()
	rctx, cancel := context.WithTimeout(ctx(t), 300*time.Millisecond)
	err = first.Release(rctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Release with lost reply = %v, want DeadlineExceeded", err)
	}
	eventually(t, 2*time.Second, func() error {
		if got := holding(t, e.engine(e.cli), "job").Token; got != 0 {
			return fmt.Errorf("token after the first release = %d, want 0 (it reached etcd)", got)
		}
		return nil
	})
	p.UnpauseRx()

	// The same session, same holder, takes the lock again.
	second, err := s.TryAcquire(ctx(t), "job", "worker")
	if err != nil {
		t.Fatalf("TryAcquire again = %v, want nil", err)
	}
	if second.Token() <= first.Token() {
		t.Fatalf("second token = %d, want > %d", second.Token(), first.Token())
	}

	// The retry of the first release must not touch the second grant.
	if err := first.Release(ctx(t)); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("retried Release = %v, want ErrNotHeld", err)
	}
	if h := holding(t, e.engine(e.cli), "job"); h.Token != second.Token() || h.Lease != s.ID() {
		t.Fatalf("after retry: token %d lease %x, want token %d lease %x", h.Token, h.Lease, second.Token(), s.ID())
	}
	if !second.Valid() {
		t.Fatalf("second.Valid() = false, want true")
	}
	select {
	case <-second.Done():
		t.Fatalf("second lock lost: %v", second.Err())
	default:
	}
}
