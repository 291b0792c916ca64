package chaos

import (
	"fmt"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// A lock with spec.slots N > 1 has N terms, one per slot, each with its own etcd key, its
// own tokens and, in the harness, its own ledger. Every one-slot property then holds per
// slot: no two pods act under one slot at once beyond the margin, and a slot's tokens only
// grow. So the one-slot checkers run unchanged on each slot's part of the histories (BySlot),
// of the status (ObserveSlots) and of the ledgers' decisions; only what holds across the lock
// (at most N holders at once, a pod in one slot at a time: holders.go) is new. Tokens of two
// slots are not comparable: slot 1 may grant token 40 after slot 2 granted token 50.

// InSlot prefixes the details of vs with the slot they concern.
func InSlot(slot int, vs []Violation) []Violation {
	out := make([]Violation, 0, len(vs))
	for _, v := range vs {
		v.Detail = fmt.Sprintf("slot %d: %s", slot, v.Detail)
		out = append(out, v)
	}
	return out
}

// BySlot splits every history into one per lock slot, for a lock of n slots: out[i][k] holds
// the events of hs[k]'s terms in slot i (Event.Slot), with its EvWriter events, so that out[i]
// is what the one-slot checkers read for slot i, with the client numbering of hs
// (LedgerOps). A history whose events name a slot outside 0..n-1 is a violation: the worker
// acted under a slot the lock does not have, and those events are left out.
func BySlot(hs []WorkerHistory, n int) ([][]WorkerHistory, []Violation) {
	out := make([][]WorkerHistory, n)
	for i := range out {
		out[i] = make([]WorkerHistory, len(hs))
		for k, h := range hs {
			out[i][k] = WorkerHistory{Pod: h.Pod, UID: h.UID, Exited: h.Exited}
		}
	}
	var vs []Violation
	for k, h := range hs {
		reported := map[int32]bool{}
		for _, e := range h.Events {
			if e.Kind == EvWriter {
				for i := range out {
					out[i][k].Events = append(out[i][k].Events, e)
				}
				continue
			}
			if e.Slot < 0 || int(e.Slot) >= n {
				if !reported[e.Slot] {
					reported[e.Slot] = true
					vs = append(vs, Violation{Checker: "slots", Detail: fmt.Sprintf(
						"%s (%s, history %d) recorded a %s event with token %d in slot %d of a lock of %d slots", h.Pod, h.UID, k, e.Kind, e.Token, e.Slot, n)})
				}
				continue
			}
			out[e.Slot][k].Events = append(out[e.Slot][k].Events, e)
		}
	}
	return out, vs
}

// ObserveSlots splits one observed version of a lock's status into its slots' one-slot
// observations (lockv1 SlotView): slot 0 always, as a one-slot lock's status; slot i > 0 only
// while status.slots lists it, so that a slot not yet (or no longer) listed is no token going
// back to 0.
func ObserveSlots(rv uint64, mono int64, st *lockv1.DistributedLockStatus) map[int32]StatusObs {
	out := map[int32]StatusObs{}
	view := func(i int32) {
		v := st.SlotView(i)
		out[i] = StatusObs{RV: rv, Phase: string(v.Phase), Holder: v.Holder, HolderUID: string(v.HolderUID),
			Token: v.FencingToken, MaxToken: v.MaxFencingToken, Epoch: v.ControllerEpoch, Mono: mono}
	}
	view(0)
	for _, e := range st.Slots {
		if e.Index > 0 {
			view(e.Index)
		}
	}
	return out
}

// CheckSlotTokens runs CheckTokens on each slot's observations (obs[i]: slot i's, in
// resourceVersion order): each slot's grants carry increasing tokens, and its token and max
// token never decrease. Two slots' tokens are never compared.
func CheckSlotTokens(obs [][]StatusObs) []Violation {
	var vs []Violation
	for i, o := range obs {
		vs = append(vs, InSlot(i, CheckTokens(o))...)
	}
	return vs
}

// CheckSlotLedgers runs CheckLedger on each slot's ledger (outs[i]: the decisions of slot i's
// ledger): no token accepted below one accepted before, none from two writers.
func CheckSlotLedgers(outs [][]Outcome) []Violation {
	var vs []Violation
	for i, o := range outs {
		vs = append(vs, InSlot(i, CheckLedger(o))...)
	}
	return vs
}

// SlotStalls counts, per slot, the stalled writes of bySlot (BySlot's split) and how that
// slot's ledger answered them.
func SlotStalls(bySlot [][]WorkerHistory) []StallOutcome {
	out := make([]StallOutcome, len(bySlot))
	for i, hs := range bySlot {
		out[i] = Stalls(hs)
	}
	return out
}

// CheckSlotStalls fails a run of the slot stall kind in which some slot's ledger refused no
// stalled write: that slot's fence was not exercised. st is SlotStalls' count.
func CheckSlotStalls(st []StallOutcome) []Violation {
	var vs []Violation
	for i, s := range st {
		if s.Refused > 0 {
			continue
		}
		vs = append(vs, Violation{Checker: "stall", Detail: fmt.Sprintf(
			"slot %d: %d writes stalled between Valid() and the send, none refused by the slot's ledger (%d accepted, %d without an answer): the slot's fence was not exercised",
			i, s.Stalled, s.Accepted, s.Lost)})
	}
	return vs
}

// Refusals counts, per ledger, the writes it refused.
func Refusals(outs [][]Outcome) []int {
	out := make([]int, len(outs))
	for i, os := range outs {
		for _, o := range os {
			if !o.Accepted {
				out[i]++
			}
		}
	}
	return out
}
