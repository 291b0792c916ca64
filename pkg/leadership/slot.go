package leadership

import (
	"context"
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
	if v == nil || now() >= v.deadline || v.token <= e.abandoned.Load() {
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
