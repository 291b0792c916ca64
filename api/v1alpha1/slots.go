package v1alpha1

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/types"
)

// A lock with spec.slots N > 1 has N terms, one per slot. Slot 0 is the status's own fields,
// exactly as for a one-slot lock, so that a lock grown from one slot keeps its holder and
// everything that reads a one-slot lock reads slot 0 unchanged; slots 1 to N-1 are
// status.slots. SlotView and SetSlot convert between a slot and the shape of a one-slot
// lock's status, which is what the controller's term rules and the pod side's validity
// rules read: every rule applies per slot unchanged.

// SlotView returns slot i as a one-slot lock's status: its term, history and conditions,
// and the lock-wide fields (controllerEpoch, observedGeneration, eligibleCandidates). A slot
// not listed has no term, and the highest token of the removed slots as its maxFencingToken.
// The view carries no slots.
func (s *DistributedLockStatus) SlotView(i int32) DistributedLockStatus {
	if i == 0 {
		v := *s.DeepCopy()
		v.Slots, v.SlotsHeld, v.RemovedSlotsMaxFencingToken = nil, "", 0
		return v
	}
	v := DistributedLockStatus{
		ControllerEpoch: s.ControllerEpoch, ObservedGeneration: s.ObservedGeneration, EligibleCandidates: s.EligibleCandidates,
	}
	v.MaxFencingToken = s.RemovedSlotsMaxFencingToken // a slot not listed: above every removed slot's token
	if e := s.slot(i); e != nil {
		e = e.DeepCopy()
		v.Phase, v.Holder, v.HolderUID, v.FencingToken, v.MaxFencingToken = e.Phase, e.Holder, e.HolderUID, e.FencingToken, e.MaxFencingToken
		v.TermLeaseSeconds, v.LeaseID, v.AcquireTime, v.Transitions = e.TermLeaseSeconds, e.LeaseID, e.AcquireTime, e.Transitions
		v.Conditions, v.History = e.Conditions, e.History
	}
	return v
}

// SetSlot stores v, a one-slot lock's status, as slot i, and keeps the lock-wide fields of v
// (the highest controllerEpoch). With drop, slot i (i > 0) is removed from the list instead,
// and its highest token kept in removedSlotsMaxFencingToken.
func (s *DistributedLockStatus) SetSlot(i int32, v DistributedLockStatus, drop bool) {
	v = *v.DeepCopy()
	epoch := max(s.ControllerEpoch, v.ControllerEpoch)
	if i == 0 {
		slots, held, removed := s.Slots, s.SlotsHeld, s.RemovedSlotsMaxFencingToken
		*s = v
		s.Slots, s.SlotsHeld, s.RemovedSlotsMaxFencingToken = slots, held, removed
	} else {
		s.ObservedGeneration, s.EligibleCandidates = v.ObservedGeneration, v.EligibleCandidates
		if drop {
			s.RemovedSlotsMaxFencingToken = max(s.RemovedSlotsMaxFencingToken, v.MaxFencingToken)
			if e := s.slot(i); e != nil {
				s.RemovedSlotsMaxFencingToken = max(s.RemovedSlotsMaxFencingToken, e.MaxFencingToken)
			}
		}
		s.Slots = slices.DeleteFunc(s.Slots, func(e SlotStatus) bool { return e.Index == i })
		if !drop {
			s.Slots = append(s.Slots, SlotStatus{
				Index: i, Phase: v.Phase, Holder: v.Holder, HolderUID: v.HolderUID, FencingToken: v.FencingToken,
				MaxFencingToken: v.MaxFencingToken, TermLeaseSeconds: v.TermLeaseSeconds, LeaseID: v.LeaseID,
				AcquireTime: v.AcquireTime, Transitions: v.Transitions, Conditions: v.Conditions, History: v.History,
			})
			slices.SortFunc(s.Slots, func(a, b SlotStatus) int { return int(a.Index - b.Index) })
		}
		if len(s.Slots) == 0 {
			s.Slots = nil
		}
	}
	s.ControllerEpoch = epoch
}

// SlotCount is how many slots the status lists: slot 0 and every listed slot up to the
// highest index (slots above spec.slots - 1 stay listed until their terms end).
func (s *DistributedLockStatus) SlotCount() int32 {
	n := int32(1)
	for _, e := range s.Slots {
		n = max(n, e.Index+1)
	}
	return n
}

// HeldSlot returns the slot whose term names the pod uid (in any phase), or -1.
func (s *DistributedLockStatus) HeldSlot(uid types.UID) int32 {
	if uid == "" {
		return -1
	}
	if s.HolderUID == uid {
		return 0
	}
	for _, e := range s.Slots {
		if e.HolderUID == uid {
			return e.Index
		}
	}
	return -1
}

// Holders returns the UIDs of the pods named by a slot's term other than slot except.
func (s *DistributedLockStatus) Holders(except int32) map[types.UID]int32 {
	m := map[types.UID]int32{}
	if s.HolderUID != "" && except != 0 {
		m[s.HolderUID] = 0
	}
	for _, e := range s.Slots {
		if e.HolderUID != "" && e.Index != except {
			m[e.HolderUID] = e.Index
		}
	}
	return m
}

// HeldSummary is status.slotsHeld for a lock of n slots: the slots in phase Held, over n.
func (s *DistributedLockStatus) HeldSummary(n int32) string {
	held := 0
	if s.Phase == PhaseHeld {
		held++
	}
	for _, e := range s.Slots {
		if e.Phase == PhaseHeld && e.Index < n {
			held++
		}
	}
	return fmt.Sprintf("%d/%d", held, n)
}

// Listed reports whether slot i (i > 0) is in status.slots.
func (s *DistributedLockStatus) Listed(i int32) bool { return s.slot(i) != nil }

func (s *DistributedLockStatus) slot(i int32) *SlotStatus {
	for k := range s.Slots {
		if s.Slots[k].Index == i {
			return &s.Slots[k]
		}
	}
	return nil
}
