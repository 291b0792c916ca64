package controllers_test

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// TestReview22dShrinkFullSlotGrantedAfter: review 22d of 67cebaa, liveness. spec.slots
// lowered from 3 to 2 while slot 0's holder is Releasing (NotReady): slot 0's delay ends first,
// while the removed slot 2 still ends, so slot 0 is full and its term ends with no grant
// (67cebaa). Once slot 2 has gone, slot 0 must be granted to the free candidate without a
// further wait: nothing but the etcd watch of slot 2's key wakes the lock (the status writes
// are this replica's own, filtered), and slot 0 was judged before slot 2 in that reconcile.
func TestReview22dShrinkFullSlotGrantedAfter(t *testing.T) {
	f := newFixture(t)
	pods := map[string]*corev1.Pod{}
	for i := range 4 {
		n := fmt.Sprintf("a-%d", i)
		pods[n] = f.pod(n, "a")
		secondApart()
	}
	f.lock("lock", "a", func(s *lockv1.DistributedLockSpec) { s.LockDelaySeconds = ptrTo[int32](3); s.Slots = 3 })
	held := f.waitFor("lock", 30*time.Second, "3 slots held", slotsHeld(3))
	zero := held.Status.SlotView(0)
	free := ""
	for n := range pods {
		taken := false
		for i := range int32(3) {
			taken = taken || held.Status.SlotView(i).Holder == n
		}
		if !taken {
			free = n
		}
	}
	if free == "" {
		t.Fatalf("no free candidate: %s", describeSlots(held))
	}

	f.setReady(pods[zero.Holder], false)
	f.waitFor("lock", 10*time.Second, "slot 0 Releasing", func(l *lockv1.DistributedLock) bool {
		return l.Status.SlotView(0).Phase == lockv1.PhaseReleasing
	})
	time.Sleep(time.Second)
	f.editLock("lock", func(l *lockv1.DistributedLock) { l.Spec.Slots = 2 })
	ended := f.waitFor("lock", 20*time.Second, "slot 0's term ended", func(l *lockv1.DistributedLock) bool {
		v := l.Status.SlotView(0)
		return v.FencingToken != zero.FencingToken || v.HolderUID == ""
	})
	t.Logf("slot 0 after its delay: %s", describeSlots(ended))
	gone := f.waitFor("lock", 20*time.Second, "slot 2 removed", func(l *lockv1.DistributedLock) bool { return l.Status.SlotCount() == 2 })
	removed := time.Now()
	t.Logf("slot 2 removed: %s", describeSlots(gone))
	got := f.waitFor("lock", 20*time.Second, "slot 0 Held again", func(l *lockv1.DistributedLock) bool {
		return l.Status.SlotView(0).Phase == lockv1.PhaseHeld && l.Status.SlotView(0).FencingToken > zero.FencingToken
	})
	if d := time.Since(removed); d > 2*time.Second {
		t.Errorf("slot 0 granted %v after slot 2 was removed (full cleared), want at once: %s", d, describeSlots(got))
	}
	t.Logf("slot 0 granted %v after slot 2's removal: %s (free candidate was %s)", time.Since(removed), describeSlots(got), free)
}
