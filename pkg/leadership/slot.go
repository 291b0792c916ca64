package leadership

import (
	"context"

	"k8s.io/apimachinery/pkg/types"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// A lock with spec.slots N > 1 has N terms, one per slot (api/v1alpha1 slots.go): slot 0 is
// the status's own fields, slots 1 to N-1 are status.slots. A pod holds at most one slot, and
// this package leads the slot whose term names the pod: every rule a one-slot lock's term is
// judged by (phase, token, maxFencingToken, the holder's release) applies to that slot's view
// alone, so another slot's larger token does not end this pod's term. A pod that moves to
// another slot starts a new term: OnStartedLeading is called again, with the new slot's token.
// The callbacks keep their one-slot signatures; Slot and SlotOf tell which slot a term is of.

// termSlotKey is the context key of a term's slot index on OnStartedLeading's context.
type termSlotKey struct{}

// Slot returns the slot index of the term this pod leads now, while Valid() is true: 0 for a
// one-slot lock (and for slot 0 of any lock), i for status.slots' entry of index i. It returns
// -1 when not leading (no term, its deadline passed, or abandoned), exactly when Token() is 0.
func (e *Elector) Slot() int {
	v := e.led.Load()
	if v == nil || now() >= v.deadline || v.token <= e.abandoned.load(v.lin) {
		return -1
	}
	return v.slot
}

// SlotOf returns the slot index of the term whose OnStartedLeading received ctx (or a context
// derived from it): 0 for a one-slot lock, as for slot 0 of any lock. It returns -1 for any
// other context. Like WriterOf it never changes under a term's work when a later term starts.
func SlotOf(ctx context.Context) int {
	s, ok := ctx.Value(termSlotKey{}).(int)
	if !ok {
		return -1
	}
	return s
}

// withSlot is a term's context carrying its slot index.
func withSlot(ctx context.Context, slot int) context.Context {
	return context.WithValue(ctx, termSlotKey{}, slot)
}

// slotOf returns the slot whose term the elector judges an observation by for pod me: the
// slot whose term names me, a Held one before one in another phase, the lowest index first
// (the controller lets a pod hold one slot at a time); slot 0 when no slot names me, which
// is the whole status of a one-slot lock.
func slotOf(st *lockv1.DistributedLockStatus, me types.UID) int32 {
	if me == "" {
		return 0
	}
	named := int32(-1)
	for i := range st.SlotCount() {
		t, _ := termOf(st, i)
		if t.uid != me {
			continue
		}
		if t.phase == lockv1.PhaseHeld {
			return i
		}
		if named < 0 {
			named = i
		}
	}
	return max(named, 0)
}

// slotTerm is the part of a slot's term that orders and picks observations.
type slotTerm struct {
	uid             types.UID
	phase           lockv1.Phase
	token, maxToken int64
}

// termOf returns slot i's term without copying the slot's view, and whether st lists slot i
// (slot 0 always).
func termOf(st *lockv1.DistributedLockStatus, i int32) (slotTerm, bool) {
	if i == 0 {
		return slotTerm{uid: st.HolderUID, phase: st.Phase, token: st.FencingToken, maxToken: st.MaxFencingToken}, true
	}
	for k := range st.Slots {
		if e := &st.Slots[k]; e.Index == i {
			return slotTerm{uid: e.HolderUID, phase: e.Phase, token: e.FencingToken, maxToken: e.MaxFencingToken}, true
		}
	}
	return slotTerm{}, false
}

// slotTokens returns, for every slot st lists (slot 0 always), the higher of its
// maxFencingToken and its fencingToken, raised to seen's for that slot.
func slotTokens(st *lockv1.DistributedLockStatus, seen map[int32]int64) map[int32]int64 {
	m := make(map[int32]int64, len(st.Slots)+1)
	m[0] = max(st.MaxFencingToken, st.FencingToken, seen[0])
	for k := range st.Slots {
		e := &st.Slots[k]
		m[e.Index] = max(e.MaxFencingToken, e.FencingToken, seen[e.Index])
	}
	return m
}

// stale reports whether an observation of status st, on the incarnation of the lock whose
// highest token per slot so far is seen, is older than one already accepted: a slot's
// maxFencingToken below the highest token seen in that slot, or a slot Held under a token
// below it. Each slot is judged by its own tokens alone (another slot's are another key's
// revisions). Slot 0 is judged so always, as a one-slot lock is. A slot above 0 is judged
// only when it is listed and newer is false (the observation's resourceVersion does not order
// it after every accepted one): the API server lets a listed slot's maxFencingToken only grow,
// so a lower one at a newer resourceVersion is a slot removed and listed again, whose tokens
// start over.
func stale(st *lockv1.DistributedLockStatus, seen map[int32]int64, newer bool) bool {
	for i, top := range seen {
		if i > 0 && newer {
			continue
		}
		t, listed := termOf(st, i)
		if !listed {
			continue
		}
		if t.maxToken < top || (t.phase == lockv1.PhaseHeld && t.token < top) {
			return true
		}
	}
	return false
}
