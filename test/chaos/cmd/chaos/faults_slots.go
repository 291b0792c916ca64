package main

import (
	"context"
	"fmt"
	"time"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/test/chaos"
)

// slots-stall-before-write puts every slot's fence under test: the run's lock has
// chaos.SlotLockSlots slots over chaos.SlotLockPods pods and a ledger per slot. For each slot
// in turn, its holder's next write is stalled right after its Valid() check (the stall hook,
// faults_stall.go), the holder's readiness fails, so that the controller ends that slot's term
// (Releasing, the lock delay) and grants the slot to a spare pod; once that slot's ledger has
// accepted a write with a higher token, the stalled write is sent with its old token, and the
// holder's readiness passes again (it becomes a spare for the next slot). Each slot's ledger
// must refuse its stalled write: chaos.CheckSlotStalls fails the run if one refused none.
// (The pod a stalled holder's slot goes to is any spare, so terms move across pods and, over
// the fault, a pod may hold one slot and later another: chaos.CheckOneSlotPerPod.)

// slotsStall injects slots-stall-before-write.
func (r *run) slotsStall(ctx context.Context, f chaos.Fault) (healFunc, error) {
	for i := range r.sched.Slots() {
		s, token := r.slotHolder(ctx, int32(i), r.h.livenessBound())
		if s == nil {
			r.note("%s: slot %d has no holder within %v: its ledger will refuse nothing", f.Kind, i, r.h.livenessBound())
			continue
		}
		w := s.worker()
		stalled, err := stallHold(ctx, w, 5*time.Second)
		if err != nil {
			r.note("%s: slot %d: %v", f.Kind, i, err)
			continue
		}
		r.note("%s: slot %d: a write of %s with token %d (the slot's published token %d) waits after its Valid() check", f.Kind, i, w.p.name, stalled, token)
		s.setUnready(true)
		next, err := r.waitHigherWriteAt(ctx, i, stalled, r.h.livenessBound())
		if err != nil {
			r.violate("liveness", "%s: slot %d's holder %s (token %d) turned NotReady, but %v", f.Kind, i, s.name, stalled, err)
		}
		res := stallRelease(ctx, w, 5*time.Second)
		s.setUnready(false)
		r.note("%s: slot %d: the next holder wrote with token %d; the stalled write with token %d was sent: %s", f.Kind, i, next, stalled, res)
	}
	return nothing, nil
}

// slotHolder waits up to limit for slot i of the lock to be Held by one of the run's pods
// with a running worker, and returns that pod's place and the slot's published token.
func (r *run) slotHolder(ctx context.Context, i int32, limit time.Duration) (*slot, int64) {
	deadline := time.Now().Add(limit)
	for ctx.Err() == nil {
		if l, err := r.getLock(ctx); err == nil {
			v := l.Status.SlotView(i)
			if v.Phase == lockv1.PhaseHeld && v.HolderUID != "" {
				for _, s := range r.slots {
					s.mu.Lock()
					match := s.pod != nil && s.pod.UID == v.HolderUID && s.w != nil && s.w.p.running()
					s.mu.Unlock()
					if match {
						return s, v.FencingToken
					}
				}
			}
		}
		if time.Now().After(deadline) {
			break
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
	return nil, 0
}

// waitHigherWriteAt waits until slot i's ledger accepts a write with a token above token, and
// returns that token.
func (r *run) waitHigherWriteAt(ctx context.Context, i int, token int64, limit time.Duration) (int64, error) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if outs, err := r.outcomesOf(ctx, i); err == nil {
			for _, o := range outs {
				if o.Accepted && o.Token > token {
					return o.Token, nil
				}
			}
		}
		sleepCtx(ctx, 50*time.Millisecond)
	}
	return 0, fmt.Errorf("slot %d's ledger accepted no write with a token above %d within %v", i, token, limit)
}
