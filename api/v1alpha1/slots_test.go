package v1alpha1_test

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

func TestSlotViewAndSetSlot(t *testing.T) {
	st := lockv1.DistributedLockStatus{
		Phase: lockv1.PhaseHeld, Holder: "a", HolderUID: "uid-a", FencingToken: 10, MaxFencingToken: 10,
		ControllerEpoch: 3, ObservedGeneration: 2, EligibleCandidates: 4,
	}
	if v := st.SlotView(1); v.HolderUID != "" || v.Phase != "" || v.ControllerEpoch != 3 || v.EligibleCandidates != 4 {
		t.Fatalf("SlotView(1) of a lock without slot 1 = %+v, want no term and the lock-wide fields", v)
	}
	v := st.SlotView(2)
	v.Phase, v.Holder, v.HolderUID, v.FencingToken, v.MaxFencingToken, v.ControllerEpoch = lockv1.PhaseHeld, "b", "uid-b", 12, 12, 5
	st.SetSlot(2, v, false)
	v1 := st.SlotView(1)
	v1.Phase, v1.Holder, v1.HolderUID, v1.FencingToken, v1.MaxFencingToken = lockv1.PhaseReleasing, "c", "uid-c", 11, 11
	st.SetSlot(1, v1, false)
	if len(st.Slots) != 2 || st.Slots[0].Index != 1 || st.Slots[1].Index != 2 {
		t.Fatalf("slots = %+v, want indexes 1, 2 in order", st.Slots)
	}
	if st.ControllerEpoch != 5 || st.HolderUID != "uid-a" || st.FencingToken != 10 {
		t.Errorf("after SetSlot: epoch %d, slot 0 %s/%d; want 5, uid-a/10", st.ControllerEpoch, st.HolderUID, st.FencingToken)
	}
	if got := st.SlotView(2); got.HolderUID != "uid-b" || got.FencingToken != 12 || got.Slots != nil {
		t.Errorf("SlotView(2) = %+v, want uid-b token 12 and no slots", got)
	}
	if got := st.SlotView(0); got.Slots != nil || got.HolderUID != "uid-a" {
		t.Errorf("SlotView(0) = %+v, want slot 0 without slots", got)
	}
	for uid, want := range map[types.UID]int32{"uid-a": 0, "uid-c": 1, "uid-b": 2, "uid-x": -1, "": -1} {
		if got := st.HeldSlot(uid); got != want {
			t.Errorf("HeldSlot(%q) = %d, want %d", uid, got, want)
		}
	}
	if h := st.Holders(1); len(h) != 2 || h["uid-a"] != 0 || h["uid-b"] != 2 {
		t.Errorf("Holders(1) = %v, want uid-a:0 uid-b:2", h)
	}
	if got := st.HeldSummary(3); got != "2/3" {
		t.Errorf("HeldSummary(3) = %q, want 2/3 (slot 1 is Releasing)", got)
	}
	if got := st.HeldSummary(2); got != "1/2" {
		t.Errorf("HeldSummary(2) = %q, want 1/2 (slot 2 is being removed)", got)
	}
	if n := st.SlotCount(); n != 3 {
		t.Errorf("SlotCount = %d, want 3", n)
	}
	s0 := st.SlotView(0)
	s0.Phase, s0.Holder, s0.HolderUID, s0.FencingToken = lockv1.PhasePending, "", "", 0
	st.SetSlot(0, s0, false)
	if len(st.Slots) != 2 || st.HolderUID != "" {
		t.Errorf("SetSlot(0) = %+v, want slot 0 ended and slots kept", st)
	}
	max1, max2 := st.SlotView(1).MaxFencingToken, st.SlotView(2).MaxFencingToken
	st.SetSlot(2, st.SlotView(2), true)
	st.SetSlot(1, st.SlotView(1), true)
	if st.Slots != nil || st.SlotCount() != 1 {
		t.Errorf("after dropping both slots: %+v, want none", st.Slots)
	}
	if want := max(max1, max2); st.RemovedSlotsMaxFencingToken != want || want == 0 {
		t.Errorf("removedSlotsMaxFencingToken = %d, want %d (the removed slots' highest)", st.RemovedSlotsMaxFencingToken, want)
	}
	if v := st.SlotView(2); v.MaxFencingToken != st.RemovedSlotsMaxFencingToken || v.HolderUID != "" {
		t.Errorf("slot 2 listed again: view max %d holder %q, want max %d and no term", v.MaxFencingToken, v.HolderUID, st.RemovedSlotsMaxFencingToken)
	}
	if v := st.SlotView(0); v.RemovedSlotsMaxFencingToken != 0 {
		t.Errorf("slot 0's view carries removedSlotsMaxFencingToken %d, want none", v.RemovedSlotsMaxFencingToken)
	}
	st.SetSlot(0, st.SlotView(0), false)
	if st.RemovedSlotsMaxFencingToken != max(max1, max2) {
		t.Errorf("SetSlot(0) changed removedSlotsMaxFencingToken to %d", st.RemovedSlotsMaxFencingToken)
	}
}

// TestSlotsAdmission shows the API server's rules for spec.slots and status.slots.
func TestSlotsAdmission(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	specs := []struct {
		name   string
		mutate func(*lockv1.DistributedLockSpec)
		reject string
	}{
		{"slots 3", func(s *lockv1.DistributedLockSpec) { s.Slots = 3 }, ""},
		{"slots 16", func(s *lockv1.DistributedLockSpec) { s.Slots = 16 }, ""},
		{"slots 17", func(s *lockv1.DistributedLockSpec) { s.Slots = 17 }, "spec.slots"},
		{"slots -1", func(s *lockv1.DistributedLockSpec) { s.Slots = -1 }, "spec.slots"},
		{"routing with slots 2", func(s *lockv1.DistributedLockSpec) {
			s.Slots, s.Routing = 2, &lockv1.Routing{Service: "svc"}
		}, "routing may be set only on a lock with one slot"},
		{"routing with slots 1", func(s *lockv1.DistributedLockSpec) {
			s.Slots, s.Routing = 1, &lockv1.Routing{Service: "svc"}
		}, ""},
	}
	for i, tt := range specs {
		t.Run(tt.name, func(t *testing.T) {
			lock := &lockv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Name: "slots-" + string(rune('a'+i)), Namespace: ns}, Spec: validSpec()}
			tt.mutate(&lock.Spec)
			err := k8s.Create(ctx, lock)
			switch {
			case tt.reject == "" && err != nil:
				t.Fatalf("create: %v, want accepted", err)
			case tt.reject != "" && err == nil:
				t.Fatalf("create accepted, want rejected naming %q", tt.reject)
			case tt.reject != "" && !strings.Contains(err.Error(), tt.reject):
				t.Fatalf("create error = %q, want it to name %q", err, tt.reject)
			}
		})
	}

	t.Run("default is 1", func(t *testing.T) {
		lock := &lockv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Name: "slots-default", Namespace: ns}, Spec: validSpec()}
		if err := k8s.Create(ctx, lock); err != nil {
			t.Fatal(err)
		}
		if lock.Spec.Slots != 1 {
			t.Errorf("spec.slots = %d after create, want the default 1", lock.Spec.Slots)
		}
	})

	t.Run("a slot's max token never decreases", func(t *testing.T) {
		lock := &lockv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Name: "slots-status", Namespace: ns}, Spec: validSpec()}
		lock.Spec.Slots = 3
		if err := k8s.Create(ctx, lock); err != nil {
			t.Fatal(err)
		}
		lock.Status = lockv1.DistributedLockStatus{MaxFencingToken: 5, ControllerEpoch: 1, Slots: []lockv1.SlotStatus{
			{Index: 1, Phase: lockv1.PhaseHeld, Holder: "p", HolderUID: "u", FencingToken: 7, MaxFencingToken: 7},
		}}
		if err := k8s.Status().Update(ctx, lock); err != nil {
			t.Fatalf("status update: %v, want accepted (a slot's token may exceed slot 0's max)", err)
		}
		lower := lock.DeepCopy()
		lower.Status.Slots[0].MaxFencingToken, lower.Status.Slots[0].FencingToken = 6, 6
		if err := k8s.Status().Update(ctx, lower); err == nil || !strings.Contains(err.Error(), "maxFencingToken may not decrease") {
			t.Errorf("lowering slot 1's maxFencingToken: %v, want refused", err)
		}
		above := lock.DeepCopy()
		above.Status.Slots[0].FencingToken = 8
		if err := k8s.Status().Update(ctx, above); err == nil || !strings.Contains(err.Error(), "fencingToken may not exceed") {
			t.Errorf("slot 1's token above its max: %v, want refused", err)
		}
		removed := lock.DeepCopy()
		removed.Status.Slots, removed.Status.RemovedSlotsMaxFencingToken = nil, 7
		if err := k8s.Status().Update(ctx, removed); err != nil {
			t.Fatalf("removing a slot (spec.slots lowered, its term ended): %v, want accepted", err)
		}
		floor := removed.DeepCopy()
		floor.Status.RemovedSlotsMaxFencingToken = 6
		if err := k8s.Status().Update(ctx, floor); err == nil || !strings.Contains(err.Error(), "removedSlotsMaxFencingToken may not decrease") {
			t.Errorf("lowering removedSlotsMaxFencingToken: %v, want refused", err)
		}
	})
}
