package controllers

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// A lock with spec.slots N > 1 is N terms (fenced slots, a semaphore whose every holder has
// its own token). Each slot is judged by the one-slot rules unchanged: a turn of slot i sees
// the lock with slot i's term as its status (lockv1.SlotView) and slot i's own etcd key, and
// its status write stores that view back as slot i (lockv1.SetSlot) on the lock as last
// written, with the resourceVersion as precondition. So attestation, Releasing and the lock
// delay, the holder's own release (its annotation names its slot's token; tokens are etcd
// revisions, so no two slots ever have the same one), restarts, history and the epoch all
// hold per slot. What is across slots is decided here, by pure functions:
//
//   - slotCandidates: a pod holds at most one slot, so a slot's candidates are the lock's
//     candidates less the pods another slot's published term names (in any phase). Slot turns
//     run one after another in a reconcile, each on the status the previous one wrote, so two
//     slots freed in one reconcile go to two pods.
//   - retired: a slot at or above spec.slots (spec.slots lowered) is judged as a suspended
//     lock: its term ends through Releasing and the lock delay (reason SlotRemoved, or sooner
//     on proof), nothing is granted, and once it has no term and no key it leaves
//     status.slots.
//
// Across the lock no more than N pods hold valid terms: each slot has one key, a slot's
// term is granted only by its own key's create (guarded), and slot keys exist only for
// indexes below spec.slots or listed slots ending through the delay.

// slotKey is the engine lock name of slot i of the lock named key: the lock's own key for
// slot 0, so that a lock grown from one slot keeps its term, and "<key>/slot/<i>" otherwise
// (Kubernetes names contain no "/", so no lock's key is another's slot key).
func slotKey(key string, i int32) string {
	if i == 0 {
		return key
	}
	return key + slotInfix + strconv.Itoa(int(i))
}

const slotInfix = "/slot/"

// fullRecheck is how soon a reconcile that found a slot full, and left fewer open terms
// than spec.slots, judges the lock again.
const fullRecheck = 100 * time.Millisecond

// keyLock returns the namespace and name of the lock an engine lock name belongs to (its
// own key or one of its slot keys).
func keyLock(key string) (ns, name string, ok bool) {
	ns, rest, ok := strings.Cut(key, "/")
	if !ok || ns == "" || rest == "" {
		return "", "", false
	}
	name, slot, hasSlot := strings.Cut(rest, "/")
	if hasSlot && !strings.HasPrefix("/"+slot, slotInfix) {
		return "", "", false
	}
	return ns, name, name != ""
}

// slotIndex returns the slot of a slot key of the lock named key, or -1.
func slotIndex(key, slot string) int32 {
	rest, ok := strings.CutPrefix(slot, key+slotInfix)
	if !ok {
		return -1
	}
	i, err := strconv.Atoi(rest)
	if err != nil || i < 1 || i >= lockv1.MaxSlots || strconv.Itoa(i) != rest {
		return -1
	}
	return int32(i)
}

// isSlotLock reports whether a lock is judged slot by slot: more than one slot declared, or
// slots still listed (spec.slots lowered to 1 while they end).
func isSlotLock(l *lockv1.DistributedLock) bool {
	return l.Spec.EffectiveSlots() > 1 || len(l.Status.Slots) > 0
}

// slotTurn is what a turn of one slot of a lock with several slots adds to a turn.
type slotTurn struct {
	index int32
	// retired: the slot is at or above spec.slots: its term ends, nothing is granted.
	retired bool
	// real is the lock, every slot's status, as last read or written by this reconcile.
	real *lockv1.DistributedLock
	// others are the pods another slot's published term names.
	others map[types.UID]int32
	// openSlot: another slot below spec.slots has no term or is Releasing, so a pod
	// waiting for a slot gets that one: Preferred preempts no further slot for it.
	openSlot bool
	// full: the other slots' terms (removed slots ending included) are already spec.slots
	// many: this slot grants no pod until one ends.
	full bool
	// unlisted: slot i > 0 is not in status.slots, so its view's maxFencingToken is the
	// removed slots' highest token: a grant at or below it is a leftover of a removed slot
	// (an etcd restore), never this slot's.
	unlisted bool
	// dropped: this turn's status write removed the slot from status.slots.
	dropped bool
}

// slotView returns the one-slot lock that a turn of slot i judges, and the slot's state.
func slotView(real *lockv1.DistributedLock, i int32) (*lockv1.DistributedLock, *slotTurn) {
	v := real.DeepCopy()
	v.Status = real.Status.SlotView(i)
	s := &slotTurn{index: i, retired: i >= real.Spec.EffectiveSlots(), real: real, others: real.Status.Holders(i), openSlot: openSlot(&real.Status, i, real.Spec.EffectiveSlots()),
		full: openTerms(&real.Status, i) >= real.Spec.EffectiveSlots(), unlisted: i > 0 && !real.Status.Listed(i)}
	if s.retired {
		v.Spec.Suspend = true // grants nothing; a retired slot's term ends as a suspended lock's does
	}
	return v, s
}

// into gives a turn's input what the slot adds to it.
func (s *slotTurn) into(in *input) {
	in.retired, in.others, in.openSlot, in.full = s.retired, s.others, s.openSlot, s.full
	in.unlistedSlot = s.unlisted && in.status.MaxFencingToken > 0
}

// openTerms counts the terms of the slots other than except, removed slots ending
// included: while spec.slots is lowered, a removed slot's holder may still act until its
// term has gone through Releasing and the delay, so it counts against spec.slots (review 22).
func openTerms(st *lockv1.DistributedLockStatus, except int32) int32 {
	var n int32
	for j := range st.SlotCount() {
		if j != except && st.SlotView(j).HolderUID != "" {
			n++
		}
	}
	return n
}

// openSlot reports whether a slot of the n declared, other than except, has no term or is
// Releasing (its term ends, and the slot goes to the next candidate).
func openSlot(st *lockv1.DistributedLockStatus, except, n int32) bool {
	for j := range n {
		if j == except {
			continue
		}
		if v := st.SlotView(j); v.HolderUID == "" || v.Phase == lockv1.PhaseReleasing {
			return true
		}
	}
	return false
}

// slotCandidates returns the candidates of a slot: pods, less those another slot's term
// names.
func slotCandidates(pods []corev1.Pod, others map[types.UID]int32) []corev1.Pod {
	if len(others) == 0 {
		return pods
	}
	out := make([]corev1.Pod, 0, len(pods))
	for i := range pods {
		if _, held := others[pods[i].UID]; !held {
			out = append(out, pods[i])
		}
	}
	return out
}

// storeSlot returns the lock with slot s's view st stored as that slot: a retired slot
// without a term or key leaves the list (reported by the bool); slotsHeld is recomputed.
func storeSlot(s *slotTurn, st *lockv1.DistributedLockStatus, keyPresent bool) (*lockv1.DistributedLock, bool) {
	real := s.real.DeepCopy()
	drop := s.retired && s.index > 0 && st.HolderUID == "" && !keyPresent
	real.Status.SetSlot(s.index, *st, drop)
	real.Status.SlotsHeld = ""
	if n := real.Spec.EffectiveSlots(); n > 1 || len(real.Status.Slots) > 0 {
		real.Status.SlotsHeld = real.Status.HeldSummary(n)
	}
	return real, drop
}

// slotCount is how many slots a reconcile of the lock judges: those declared, those listed,
// and any whose etcd key exists (a grant whose status write was lost before spec.slots was
// lowered).
func slotCount(l *lockv1.DistributedLock, key string, keys []string) int32 {
	n := max(l.Spec.EffectiveSlots(), l.Status.SlotCount())
	for _, k := range keys {
		n = max(n, slotIndex(key, k)+1)
	}
	return n
}

// reconcileSlots runs one turn per slot, in index order, each on the lock as the previous
// one left it; the finalizer goes once every slot's term has ended.
func (r *Reconciler) reconcileSlots(ctx context.Context, lock *lockv1.DistributedLock, fresh bool) (ctrl.Result, error) {
	key := lockKey(lock.Namespace, lock.Name)
	if !fresh && r.mem.behindOwnWrite(key, lock.UID, lock.ResourceVersion) {
		// A slot turn that only waits writes no etcd and so never asks for the uncached
		// read; judged on a cache behind this replica's last write, a slot left full by a
		// removed slot that has since ended would wait for the next event, or a removed
		// slot's stale Releasing restart its delay (review 22d). Slot locks are read
		// uncached after this replica's own writes until the cache shows them.
		var live lockv1.DistributedLock
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(lock), &live); err != nil {
			if apierrors.IsNotFound(err) {
				return ctrl.Result{}, nil // deleted meanwhile; its event brings the next turn
			}
			return ctrl.Result{}, fmt.Errorf("get lock uncached: %w", err)
		}
		lock, fresh = &live, true
		r.mem.confirm(key, lock.UID, lock.ResourceVersion)
	}
	var keys []string
	real, drop, full := lock, true, false
	var requeue time.Duration
	for i := int32(0); i < slotCount(real, key, keys); i++ {
		r.noteSlot(key, i)
		t, res, err := r.runTurn(ctx, real, fresh, i)
		if err != nil || t == nil {
			return res, err
		}
		if t.slot.real != real {
			real, fresh = t.slot.real, true // this turn's write: the lock as the API server has it
		}
		drop = drop && t.dropFinalizer
		full = full || t.slot.full
		requeue = minPositive(requeue, t.requeue)
		if i == 0 {
			// After slot 0's turn, which with etcd down publishes EtcdAvailable=False as a
			// one-slot lock's turn does (review 22). When the list fails, etcd has just
			// become unreachable: the other slots' reads would each wait out their timeout
			// before the next reconcile's slot 0 turn publishes the outage, so the
			// reconcile ends here (nothing found only by its key is judged; the finalizer
			// stays).
			var err error
			if keys, err = r.slotKeys(ctx, key); err != nil {
				return ctrl.Result{}, err
			}
		}
	}
	if full && openTerms(&real.Status, -1) < real.Spec.EffectiveSlots() {
		// A slot judged full earlier in this reconcile is full no more (a later, removed
		// slot's term ended): judge it again soon, on the lock as written, rather than when
		// the next event comes; the cache may still show the removed slot (review 22d).
		requeue = minPositive(requeue, fullRecheck)
	}
	if !isSlotLock(real) && len(keys) == 0 {
		r.mu.Lock()
		delete(r.hadSlots, key) // back to one slot, no slot key left: judged as one again
		r.mu.Unlock()
	}
	if drop && real.DeletionTimestamp != nil {
		return ctrl.Result{}, r.dropFinalizer(ctx, real)
	}
	return ctrl.Result{RequeueAfter: requeue}, nil
}

// slotKeys lists the etcd keys of the slots of the lock named key, with an error that says
// so.
func (r *Reconciler) slotKeys(ctx context.Context, key string) ([]string, error) {
	ictx, cancel := context.WithTimeout(ctx, etcdTimeout)
	defer cancel()
	keys, err := r.Engine.LockKeys(ictx, key+slotInfix)
	if err != nil {
		r.Metrics.etcdError("inspect")
		return nil, fmt.Errorf("list the slot keys of %s: %w", key, err)
	}
	return keys, nil
}

// noteSlot remembers that the lock named key has a slot i, so that forget drops the slot's
// memory too.
func (r *Reconciler) noteSlot(key string, i int32) {
	if i == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.slots[key] = max(r.slots[key], i+1)
	r.hadSlots[key] = true
}

// judgedBySlots reports whether a lock is judged slot by slot: isSlotLock, or this replica
// judged it by slots and has not seen every slot key gone since (a grant of a slot whose
// status write was lost while spec.slots was lowered to 1 leaves a key that only a slot
// turn finds and discards).
func (r *Reconciler) judgedBySlots(l *lockv1.DistributedLock) bool {
	if isSlotLock(l) {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hadSlots[lockKey(l.Namespace, l.Name)]
}
