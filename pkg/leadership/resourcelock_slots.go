package leadership

import (
	"errors"
	"fmt"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// A ResourceLock serves one controller-runtime manager, whose leader election has one leader:
// it leads a one-slot lock only. A lock with spec.slots above 1 has several holders at once,
// and client-go's election record (one holder identity) cannot say which slot a manager leads,
// nor can a manager's controllers tell their writes apart by slot. Such a lock is refused,
// with ErrSlotsUnsupported, by every read; an Elector (Slot, SlotOf) leads any slot.

// ErrSlotsUnsupported is wrapped by the error ResourceLock's Get, Create and Update return,
// and ReadyzCheck reports, when the lock declares spec.slots above 1.
var ErrSlotsUnsupported = errors.New("leadership: a ResourceLock leads a lock of one slot only")

// slotsRefused is the error for a lock a ResourceLock may not lead, nil for a one-slot lock
// (or none).
func slotsRefused(lock *lockv1.DistributedLock, describe string) error {
	if lock == nil || lock.Spec.EffectiveSlots() <= 1 {
		return nil
	}
	return fmt.Errorf("%w: %s declares spec.slots %d; lead a slot with an Elector (leadership.New: Slot, SlotOf), or set spec.slots to 1",
		ErrSlotsUnsupported, describe, lock.Spec.EffectiveSlots())
}

// refuseSlots records a read of a lock the ResourceLock may not lead: no term is confirmed,
// and readiness reports err, so that the pod is not a candidate for a slot it cannot lead.
func (l *ResourceLock) refuseSlots(lock *lockv1.DistributedLock, sent instant, err error) {
	l.readOK.Store(false)
	l.led.Store(nil)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.readSucceeded(lock, sent)
	if l.refused == nil || !errors.Is(l.refused, ErrSlotsUnsupported) {
		l.e.log().Info("lock refused", "error", err.Error())
	}
	l.refused = err
}
