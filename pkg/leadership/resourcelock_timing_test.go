package leadership_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/lockwarden/lockwarden/pkg/leadership"
)

// TestResourceLockLearnsTimings: once client-go renews (its "became leader" event), a
// renewal round's context that shows a longer RenewDeadline, or a round that starts longer
// after the last renewal than RetryPeriod, makes the lock judge renewals by the longer timing,
// and ReadyzCheck reports the mismatch; an Update whose record shows another LeaseDuration is
// refused from the first acquisition on. The calls are client-go's, made by hand in its order.
func TestResourceLockLearnsTimings(t *testing.T) {
	const lease = 4
	me := resourcelock.LeaderElectionRecord{HolderIdentity: "uid-a", LeaseDurationSeconds: lease}
	acquire := func(t *testing.T) *leadership.ResourceLock {
		h := newHarness(t, 8)
		setStatus(t, h.key, held("pod-a", "uid-a", 5, 8))
		l := newResourceLock(t, h, "pod-a", "uid-a", lease*time.Second, 3*time.Second, time.Second)
		if err := l.Update(t.Context(), me); err != nil {
			t.Fatalf("acquire: Update = %v", err)
		}
		l.RecordEvent("became leader")
		return l
	}
	t.Run("RenewDeadline", func(t *testing.T) {
		l := acquire(t)
		ctx, cancel := context.WithTimeout(t.Context(), 5500*time.Millisecond) // a round of RenewDeadline 5.5 s
		defer cancel()
		if err := l.Update(ctx, me); err == nil || l.Valid() {
			t.Fatalf("renewal under a 5.5 s RenewDeadline of a 6 s validity: Update = %v, Valid() = %v; want an error", err, l.Valid())
		}
		if err := l.ReadyzCheck(nil); !errors.Is(err, leadership.ErrTimingsMismatch) || !strings.Contains(err.Error(), "RenewDeadline is at least 5.5s") {
			t.Errorf("ReadyzCheck = %v, want ErrTimingsMismatch naming RenewDeadline", err)
		}
	})
	t.Run("RetryPeriod", func(t *testing.T) {
		l := acquire(t)
		time.Sleep(3500 * time.Millisecond) // the next round starts 3.5 s after the renewal
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		if err := l.Update(ctx, me); err == nil || l.Valid() {
			t.Fatalf("renewal with RetryPeriod about 3.5 s + RenewDeadline 3 s of a 6 s validity: Update = %v, Valid() = %v; want an error", err, l.Valid())
		}
		if err := l.ReadyzCheck(nil); !errors.Is(err, leadership.ErrTimingsMismatch) || !strings.Contains(err.Error(), "RetryPeriod is about") {
			t.Errorf("ReadyzCheck = %v, want ErrTimingsMismatch naming RetryPeriod", err)
		} else {
			t.Logf("ReadyzCheck: %v", err)
		}
	})
	t.Run("caller's deadline while acquiring", func(t *testing.T) {
		h := newHarness(t, 8)
		setStatus(t, h.key, held("pod-a", "uid-a", 5, 8))
		l := newResourceLock(t, h, "pod-a", "uid-a", lease*time.Second, 3*time.Second, time.Second)
		ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
		defer cancel()
		if _, _, err := l.Get(ctx); err != nil {
			t.Fatal(err)
		}
		if err := l.Update(ctx, me); err != nil || !l.Valid() {
			t.Fatalf("acquire under a caller's 1 h deadline: Update = %v, Valid() = %v; want nil, true", err, l.Valid())
		}
		if err := l.ReadyzCheck(nil); err != nil {
			t.Errorf("ReadyzCheck = %v, want nil", err)
		}
	})
	t.Run("LeaseDuration", func(t *testing.T) {
		h := newHarness(t, 8)
		setStatus(t, h.key, held("pod-a", "uid-a", 5, 8))
		l := newResourceLock(t, h, "pod-a", "uid-a", lease*time.Second, 3*time.Second, time.Second)
		err := l.Update(t.Context(), resourcelock.LeaderElectionRecord{HolderIdentity: "uid-a", LeaseDurationSeconds: 15})
		if !errors.Is(err, leadership.ErrTimingsMismatch) || l.Valid() {
			t.Fatalf("acquire by a manager with LeaseDuration 15 s: Update = %v, Valid() = %v; want ErrTimingsMismatch", err, l.Valid())
		}
		if err := l.ReadyzCheck(nil); !errors.Is(err, leadership.ErrTimingsMismatch) {
			t.Errorf("ReadyzCheck = %v, want ErrTimingsMismatch", err)
		}
	})
}
