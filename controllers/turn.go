package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/log"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/pkg/eligibility"
)

// turn is one reconcile of one lock: what was read, and the status to publish.
type turn struct {
	r       *Reconciler
	lock    *lockv1.DistributedLock // as read; its status is the published one (of its slot, for a slot turn)
	key     string                  // the engine key of the lock, or of its slot
	objKey  string                  // the lock's own key (lockKey), for what is per object
	slot    *slotTurn               // a turn of one slot of a lock with several (slots.go); nil otherwise
	trigger time.Time
	fresh   bool // lock was read uncached (APIReader), not from the cache

	gatherErr error // why gather failed (etcd unreachable): the turn only publishes that

	in      input        // what the turn decides on (gather)
	selErr  error        // why the selector could not be used, if it could not
	allPods []corev1.Pod // every candidate, those holding other slots included: the count

	st            lockv1.DistributedLockStatus // status to publish
	regressed     string                       // why the lock is in TokenRegression, if it is
	restarted     bool                         // a Releasing wait starts again: the write must happen
	requeue       time.Duration                // the soonest this turn wants to run again
	onAck         []func()                     // run once the status write is acknowledged
	events        []func()                     // emitted once the status write is acknowledged
	dropFinalizer bool
	cachedGrant   int64 // the token of this turn's grant decided on the cached lock (firstGrant), 0 if none
}

// after asks for another turn within d.
func (t *turn) after(d time.Duration) {
	if d <= 0 {
		return
	}
	if t.requeue == 0 || d < t.requeue {
		t.requeue = d
	}
}

// event queues an Event for after the status write.
func (t *turn) event(related *corev1.Pod, typ, reason, action, format string, args ...any) {
	if t.slot != nil {
		format, args = "slot %d: "+format, append([]any{t.slot.index}, args...)
	}
	t.events = append(t.events, func() {
		if related == nil {
			t.r.Recorder.Eventf(t.lock, nil, typ, reason, action, format, args...)
			return
		}
		t.r.Recorder.Eventf(t.lock, related, typ, reason, action, format, args...)
	})
}

// recordEpoch writes this replica's epoch into the lock's status before its first etcd write
// for the lock in this epoch, so that a status write a deposed replica still has in flight
// fails its precondition (or the rule that the epoch never decreases) instead of landing
// after this replica's etcd write. The write changes nothing else.
//
// A lock whose status no controller has written yet (controllerEpoch 0, which every status
// write sets and the API server never lets go back) is spared that write: a deposed
// replica can have a status write of its own in flight for it only after a grant it
// committed in etcd before this epoch began, and this replica's linearizable read shows that
// grant, which it adopts without an etcd write. This keeps a new lock at one status write.
func (t *turn) recordEpoch(ctx context.Context) error {
	if t.lock.Status.ControllerEpoch >= t.in.epoch || t.lock.Status.ControllerEpoch == 0 {
		return nil
	}
	if !t.r.Election.Valid() {
		return ErrElectionLost
	}
	lock := t.lock.DeepCopy()
	lock.Status.ControllerEpoch = t.in.epoch
	if err := t.updateStatus(ctx, lock); err != nil {
		return fmt.Errorf("record controller epoch %d: %w", t.in.epoch, err)
	}
	t.r.mem.wrote(t.objKey, lock.UID, lock.ResourceVersion)
	t.lock.ResourceVersion, t.lock.Status.ControllerEpoch = lock.ResourceVersion, lock.Status.ControllerEpoch
	return nil
}

// etcdDown publishes EtcdAvailable=False and leaves the phase alone.
func (t *turn) etcdDown(ctx context.Context, cause error) error {
	setCondition(&t.st, t.lock.Generation, lockv1.ConditionEtcdAvailable, false, lockv1.ReasonEtcdUnreachable, cause.Error())
	if err := t.write(ctx, false); err != nil {
		return fmt.Errorf("%w (and publish EtcdAvailable=False: %w)", cause, err)
	}
	return cause // the workqueue retries with exponential backoff
}

// publish completes the status and writes it if anything but the epoch changed.
func (t *turn) publish(ctx context.Context) error {
	gen := t.lock.Generation
	t.st.ObservedGeneration = gen
	setHeldCondition(&t.st, gen, &t.lock.Spec, t.selErr, t.in.pods)
	if t.slot != nil && t.st.Phase == lockv1.PhasePending && t.selErr == nil && len(t.in.pods) == 0 && len(t.allPods) > 0 {
		setCondition(&t.st, gen, lockv1.ConditionHeld, false, lockv1.ReasonNoHolder,
			eligibility.AllHoldOtherSlots)
	}
	if t.restarted {
		setCondition(&t.st, gen, lockv1.ConditionHeld, false, releasingReason(&t.st),
			fmt.Sprintf("term of %s (token %d) is ending; the lock delay started again (etcd had recorded it Held)", t.st.Holder, t.st.FencingToken))
	}
	setCondition(&t.st, gen, lockv1.ConditionEtcdAvailable, true, lockv1.ReasonEtcdReachable, "etcd answered the last linearizable read")
	if t.regressed != "" {
		setCondition(&t.st, gen, lockv1.ConditionValid, false, lockv1.ReasonTokenRegression, t.regressed)
	} else {
		v := judge(&t.lock.Spec, t.selErr, t.allPods)
		setCondition(&t.st, gen, lockv1.ConditionValid, v.ok, v.reason, v.message)
		if old := meta.FindStatusCondition(t.lock.Status.Conditions, lockv1.ConditionValid); !v.ok && (old == nil || old.Reason != v.reason) {
			t.event(nil, corev1.EventTypeWarning, v.reason, "Judge", "%s", v.message)
		}
	}
	return t.write(ctx, true)
}

// write writes t.st with the lock's resourceVersion as precondition, unless nothing but the
// epoch or a not-yet-due candidate count changed.
func (t *turn) write(ctx context.Context, withCount bool) error {
	old := &t.lock.Status
	count := old.EligibleCandidates
	if withCount && t.selErr == nil {
		count = eligibility.Count(t.allPods)
	}
	t.st.EligibleCandidates = old.EligibleCandidates
	t.st.ControllerEpoch = old.ControllerEpoch
	changed := !equality.Semantic.DeepEqual(old, &t.st)
	countChanged := count != old.EligibleCandidates
	if countChanged {
		if due, wait := t.r.mem.countWriteDue(t.objKey, t.lock.UID, t.r.CountDebounce); due || changed {
			t.st.EligibleCandidates = count
		} else {
			t.after(wait)
			countChanged = false
		}
	}
	if !changed && !countChanged {
		t.acknowledged()
		t.routeAfter(ctx)
		return nil
	}
	if !t.r.Election.Valid() {
		return ErrElectionLost
	}
	t.routeBefore(ctx) // spec.routing: no endpoint outlives the Held status it was listed for
	t.st.ControllerEpoch = max(old.ControllerEpoch, t.r.Election.Token())
	t.lock.Status = t.st
	if err := t.updateStatus(ctx, t.lock); err != nil {
		return fmt.Errorf("update status: %w", err)
	}
	defer t.routeAfter(ctx)
	log.FromContext(ctx).V(1).Info("status written", "lock", t.key, "phase", t.st.Phase, "holder", t.st.Holder, "token", t.st.FencingToken,
		"resourceVersion", t.lock.ResourceVersion, "sinceTurn", time.Since(t.trigger))
	t.r.mem.wrote(t.objKey, t.lock.UID, t.lock.ResourceVersion)
	if countChanged {
		t.r.mem.countWrittenNow(t.objKey, t.lock.UID)
	}
	t.acknowledged()
	return nil
}

// updateStatus writes lock's status (with its resourceVersion as precondition) and leaves
// the answer's resourceVersion in lock. A slot turn's lock is a view of its slot: the write
// stores the view as that slot on the lock as this reconcile last read or wrote it.
func (t *turn) updateStatus(ctx context.Context, lock *lockv1.DistributedLock) error {
	if t.slot == nil {
		return t.r.Client.Status().Update(ctx, lock)
	}
	real, dropped := storeSlot(t.slot, &lock.Status, t.in.g.present())
	if err := t.r.Client.Status().Update(ctx, real); err != nil {
		return err
	}
	t.slot.dropped = dropped
	lock.ResourceVersion, t.slot.real = real.ResourceVersion, real
	return nil
}

// acknowledged runs what waited for the status write, and records the phase.
func (t *turn) acknowledged() {
	for _, f := range t.onAck {
		f()
	}
	for _, e := range t.events {
		e()
	}
	t.onAck, t.events = nil, nil
	if t.regressed == "" {
		t.r.clearRegression(t.key)
	}
	if t.slot != nil && t.slot.dropped {
		t.r.forgetKey(t.key) // a removed slot: nothing of its key is needed again
	}
	if t.slot != nil && t.slot.index > 0 {
		return // lockwarden_locks counts locks, by slot 0's phase
	}
	t.r.mu.Lock()
	t.r.Metrics.setPhases(t.r.setPhase(t.key, t.st.Phase)) // under r.mu, as in forget
	t.r.mu.Unlock()
}
