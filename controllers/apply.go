package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// errStaleLock asks Reconcile to read the lock uncached and run the turn again.
var errStaleLock = errors.New("decision needs the lock read uncached")

// writesEtcd reports whether applying d writes etcd.
func writesEtcd(d decision) bool {
	switch d.verb {
	case actDropStale, actDiscard, actGrant, actRegrant, actRelease, actKeep, actEnd, actRepublish:
		return true
	}
	return false
}

// firstGrant reports whether d grants a lock whose status, as read, no controller has ever
// written (status.controllerEpoch 0: every controller status write sets it, and the API
// server never lets it go back). Such a grant may be decided on the cache, without reading
// the lock uncached first: a lock created with its finalizer (config/policy) is then granted
// with one write and no extra read. The cached copy may be stale (deleted, created again,
// suspended, or with a status written since), so such a grant stands only once its status
// write, which carries the resourceVersion read, is acknowledged: that proves the lock was
// exactly the copy decided on. The grant creates an absent key (guarded by the election)
// that no pod leads by before that write; when the write fails, the same turn deletes the
// grant again (discardCachedGrant), and a grant left by a crash in between is marked in its
// record (CachedAt) and adopted only if the lock read uncached is still that copy
// (cachedGrantStands), deleted otherwise.
func firstGrant(d decision, lock *lockv1.DistributedLock) bool {
	return d.verb == actGrant && lock.Status.ControllerEpoch == 0
}

// maxSteps bounds the decisions of one turn: a discard or a stale-grant clean-up is followed
// by one more decision, never by a loop.
const maxSteps = 3

// run decides and applies until a decision needs no further step; the status to publish is
// left in t.st.
func (t *turn) run(ctx context.Context) error {
	t.noteReleases(ctx)
	for range maxSteps {
		d := decide(&t.in)
		if !t.fresh && writesEtcd(d) && !firstGrant(d, t.lock) {
			// A decision that writes etcd is taken on the lock as the API server has it now,
			// never on a cache that may not show this replica's last status write yet (a
			// stale Held of the previous holder would make a just-published grant look
			// unpublished and be discarded).
			return errStaleLock
		}
		again, err := t.apply(ctx, d)
		if err != nil || !again {
			return err
		}
	}
	return fmt.Errorf("%s: no decision after %d steps", t.key, maxSteps)
}

// apply performs one decision: the guarded etcd writes, then the status it stages. again
// asks for one more decision on the updated input.
func (t *turn) apply(ctx context.Context, d decision) (again bool, err error) {
	st := &t.st
	switch d.verb {
	case actWait:
		if st.HolderUID == "" {
			st.Phase = lockv1.PhasePending
		}
		t.after(d.requeue)
	case actRegress:
		t.regressed = d.why
		t.r.regression(ctx, t.lock, t.key, d.why)
		t.after(d.requeue)
	case actDropStale:
		// A grant older than the published term, in an etcd whose history up to every
		// published token is compacted away and whose revision is above them: it was never
		// published after the term status names, so no pod leads by it.
		stale := t.in.g.token
		if err := t.releaseKey(ctx); err != nil {
			return false, err
		}
		t.event(nil, corev1.EventTypeNormal, lockv1.ReasonKeyVanished, "Cleanup",
			"deleted a stale etcd grant (token %d) left by a restore with --bump-revision; etcd revision %d is above every published token", stale, t.in.rev)
		return true, nil
	case actDiscard:
		// No pod leads by an unpublished grant: deleting it ends nothing.
		if err := t.releaseKey(ctx); err != nil {
			return false, err
		}
		return true, nil
	case actAdopt:
		t.adopt()
	case actRepublish:
		// The pod the edit named may have led the token by it: the term goes through
		// Releasing and the full lock delay, which nothing shortens (decideReleasing).
		st.Holder, st.HolderUID = t.in.g.rec.Name, t.in.g.holderUID
		t.event(nil, corev1.EventTypeWarning, lockv1.ReasonStatusCorrupt, "Republish",
			"%s; republished the holder from etcd as Releasing: the full lock delay before anyone leads again (only the manager may write distributedlocks/status)", d.why)
		return false, t.startReleasing(ctx, lockv1.ReasonStatusCorrupt, false)
	case actSuspend:
		st.Phase = lockv1.PhaseSuspended
	case actDropFinalizer:
		t.dropFinalizer = true
	case actGrant:
		st.Phase = lockv1.PhasePending
		return false, t.grantTo(ctx, d.next, d.reason, nil)
	case actRegrant:
		// The term's end has an Event of its own, outside the grant Event budget
		// (grantevents.go): when the grant lease expired, every key vanished at once.
		t.event(d.next, corev1.EventTypeNormal, lockv1.ReasonKeyVanished, "End", "term of %s (token %d) ended: its etcd key vanished; %s is still eligible and gets a new term",
			st.Holder, st.FencingToken, d.next.Name)
		publishEnd(st, lockv1.ReasonKeyVanished, metav1.Now())
		return false, t.grantTo(ctx, d.next, d.reason, nil)
	case actRelease:
		return false, t.startReleasing(ctx, d.reason, d.restart)
	case actPublishReleasing:
		publishReleasing(st, d.reason)
		t.ackReleasing()
	case actKeep:
		return false, t.keep(ctx)
	case actEnd:
		return false, t.end(ctx, d)
	default:
		return false, fmt.Errorf("%s: unknown decision %d", t.key, d.verb)
	}
	return false, nil
}

// adopt publishes the grant that etcd has and status does not, as recorded.
func (t *turn) adopt() {
	g, st := t.in.g, &t.st
	if e := g.rec.Ends; e != nil && st.HolderUID == g.holderUID && st.FencingToken == e.Token {
		// The restart fast path's grant, whose status write was lost: its old term ended for
		// the reason the grant recorded.
		t.event(nil, corev1.EventTypeNormal, e.Reason, "End", "term of %s (token %d) ended: %s", st.Holder, st.FencingToken, e.Reason)
		t.countTransition(e.Reason)
		publishEnd(st, e.Reason, metav1.Now())
	}
	if st.HolderUID != "" && st.HolderUID != g.holderUID {
		// The published term ended in a turn whose status write was lost: attested, or after
		// its Releasing, whose reason is on the open term.
		reason := lockv1.ReasonHolderTerminated
		switch {
		case endsPublished(&t.in):
			reason = g.rec.Ends.Reason
		case holderReleased(&t.in):
			reason = lockv1.ReasonHolderReleased
		case st.Phase == lockv1.PhaseReleasing:
			reason = releasingReason(st)
		}
		// The ending turn's Event and transition went with its status write (they follow
		// its acknowledgement): this turn reports the end instead (review 20f).
		t.event(nil, corev1.EventTypeNormal, reason, "End", "term of %s (token %d) ended: %s", st.Holder, st.FencingToken, reason)
		t.countTransition(reason)
		publishEnd(st, reason, metav1.Now())
	}
	publishGrant(st, g.rec.Name, g, g.lease, lockv1.ReasonGranted, metav1.Now())
	if g.rec.Phase == lockv1.PhaseReleasing {
		publishReleasing(st, g.rec.Reason)
		t.ackReleasing()
	}
}

// startReleasing records Releasing in etcd (guarded), then publishes it; the lock delay
// counts from the acknowledgement of that status write. With restart the status already
// says Releasing: the write that restarts the wait changes the Held condition's message.
func (t *turn) startReleasing(ctx context.Context, reason string, restart bool) error {
	if t.in.g.present() {
		rec := t.in.g.rec
		rec.Phase, rec.Reason, rec.Epoch = lockv1.PhaseReleasing, reason, t.in.epoch
		if err := t.updateRecord(ctx, rec); err != nil {
			return err
		}
	}
	publishReleasing(&t.st, reason)
	t.restarted = restart
	t.ackReleasing()
	switch {
	case reason == lockv1.ReasonOperatorRelease && !restart:
		if open := openTerm(&t.st); open != nil {
			open.Message = t.in.release.reason
		}
		t.event(nil, corev1.EventTypeNormal, reason, "Release", "%s; the next holder waits the full lock delay (%v) unless %s confirms its release first%s",
			releaseMessage(t.st.Holder, t.st.FencingToken, t.in.release.reason), releaseWait(&t.lock.Spec, &t.st), t.st.Holder, preferredReturns(&t.lock.Spec, t.st.Holder))
	case restart:
		t.event(nil, corev1.EventTypeWarning, reason, "Release", "term of %s (token %d): etcd recorded it Held again while status said Releasing; the lock delay starts again", t.st.Holder, t.st.FencingToken)
	case reason == lockv1.ReasonDeleted:
		t.event(nil, corev1.EventTypeNormal, reason, "Release", "deletion waits up to %v for the term of %s (token %d) to end (less if %s confirms its release or the kubelet reports every container of it stopped); then the lock is deleted and no one is granted",
			releaseWait(&t.lock.Spec, &t.st), t.st.Holder, t.st.FencingToken, t.st.Holder)
	case reason == lockv1.ReasonSuspended:
		t.event(nil, corev1.EventTypeNormal, reason, "Release", "term of %s (token %d) is ending: spec.suspend is true; no one is granted until it is false again (the wait is up to %v)",
			t.st.Holder, t.st.FencingToken, releaseWait(&t.lock.Spec, &t.st))
	default:
		t.event(nil, corev1.EventTypeNormal, reason, "Release", "term of %s (token %d) is ending: %s; the next holder waits the lock delay (%v) unless %s confirms its release or the kubelet reports every container of it stopped first",
			t.st.Holder, t.st.FencingToken, reason, releaseWait(&t.lock.Spec, &t.st), t.st.Holder)
	}
	return nil
}

// ackReleasing starts the lock delay of the published term once its Releasing status write
// is acknowledged, and asks for the turn that ends the wait (nothing else may wake the lock:
// its own write's event is filtered, and a NotReady holder sends no more events).
func (t *turn) ackReleasing() {
	key, uid, token := t.key, t.lock.UID, t.st.FencingToken
	t.onAck = append(t.onAck, func() { t.r.mem.releasingAcknowledged(key, uid, token) })
	t.after(releaseWait(&t.lock.Spec, &t.st))
}

// keep gives a Releasing term's holder, eligible again, a new term at once: a return never
// keeps the token. The pod stopped leading the old token when it saw Releasing, and leading
// it again would make that process another writer of it (pkg/leadership draws a writer per
// term), which a fenced resource refuses; a new token is a new term for the same pod, like a
// regrant, so no lock delay. The bounce limits (mayReturn) count it as a return.
func (t *turn) keep(ctx context.Context) error {
	pod, reason, old := t.in.holder.pod, releasingReason(&t.st), t.st.FencingToken
	if err := t.releaseKey(ctx); err != nil {
		return err
	}
	t.event(pod, corev1.EventTypeNormal, reason, "End", "term of %s (token %d) ended: %s; %s is eligible again and gets a new term", t.st.Holder, old, reason, pod.Name)
	t.countTransition(reason)
	publishEnd(&t.st, reason, metav1.Now())
	if err := t.grantTo(ctx, pod, lockv1.ReasonGranted, nil); err != nil {
		return err
	}
	key, uid := t.key, t.lock.UID
	t.onAck = append(t.onAck, func() { t.r.mem.returned(key, uid) })
	return nil
}

// end ends the published term (deleting its key, guarded) and grants the next candidate at
// once, if the decision names one.
func (t *turn) end(ctx context.Context, d decision) error {
	ended, endedHolder := t.st.FencingToken, t.st.HolderUID
	if t.in.g.present() {
		if err := t.releaseKey(ctx); err != nil {
			return err
		}
	}
	t.event(nil, corev1.EventTypeNormal, d.reason, "End", "term of %s (token %d) ended: %s", t.st.Holder, t.st.FencingToken, d.reason)
	t.countTransition(d.reason)
	publishEnd(&t.st, d.reason, metav1.Now())
	key, uid := t.key, t.lock.UID
	t.onAck = append(t.onAck, func() { t.r.mem.termEnded(key, uid) })
	switch {
	case t.in.deleting:
		t.dropFinalizer = true
	case t.lock.Spec.Suspend:
		t.st.Phase = lockv1.PhaseSuspended
	case d.next != nil:
		// The grant records the term it ends, so that a turn finding it unpublished (this
		// turn's status write lost) publishes this end instead of judging the old holder's
		// evidence again, which may be gone by then (review 20e).
		return t.grantTo(ctx, d.next, lockv1.ReasonGranted, &endedTerm{Token: ended, Reason: d.reason, HolderUID: endedHolder})
	}
	return nil
}

// grantTo grants the lock to pod in one guarded etcd transaction, then stages the status.
func (t *turn) grantTo(ctx context.Context, pod *corev1.Pod, reason string, ends *endedTerm) error {
	if err := t.recordEpoch(ctx); err != nil {
		return err
	}
	rec := record{
		Name: pod.Name, Phase: lockv1.PhaseHeld, Strategy: t.lock.Spec.Strategy,
		LeaseSeconds: t.lock.Spec.LeaseDurationSeconds, Epoch: t.in.epoch, Containers: containerMarks(pod), Ends: ends,
		Lock: t.lock.UID,
	}
	if !t.fresh {
		rec.CachedAt = t.lock.ResourceVersion // firstGrant: decided on the cached lock
	}
	token, err := t.r.grant(ctx, t.key, string(pod.UID), rec.encode())
	if err != nil {
		var held *lease.HeldError
		if errors.As(err, &held) {
			t.after(100 * time.Millisecond) // someone else's grant: read it next turn
			return nil
		}
		t.r.Metrics.etcdError("grant")
		return fmt.Errorf("grant %s to %s: %w", t.key, pod.Name, err) // an ambiguous outcome is settled by the next read
	}
	g := grant{holderUID: pod.UID, token: token, lease: t.r.Grants.ID(), rec: rec}
	if rec.CachedAt != "" {
		t.cachedGrant = token
	}
	if token <= t.st.MaxFencingToken {
		t.in.g = g
		why := fmt.Sprintf("etcd granted token %d, at or below status.maxFencingToken %d", token, t.st.MaxFencingToken)
		t.regressed = why
		t.r.regression(ctx, t.lock, t.key, why)
		t.after(regressionRecheck)
		return nil
	}
	t.in.g = g
	log.FromContext(ctx).V(1).Info("etcd grant committed", "lock", t.key, "pod", pod.Name, "token", token, "sinceTurn", time.Since(t.trigger))
	if failpoint("drop-status-after-grant") {
		return errors.New("failpoint drop-status-after-grant: grant committed, status write dropped")
	}
	publishGrant(&t.st, pod.Name, g, g.lease, reason, metav1.Now())
	latency := time.Since(t.trigger)
	t.onAck = append(t.onAck, func() { t.r.Metrics.granted(reason, latency) })
	key, uid := t.key, t.lock.UID
	t.onAck = append(t.onAck, func() {
		if d, ok := t.r.mem.granted(key, uid); ok {
			t.r.Metrics.unheld(d)
		}
		if ends != nil && ends.Reason == lockv1.ReasonHolderRestarted && ends.HolderUID == pod.UID {
			t.r.mem.restartGranted(key, uid, token)
		}
	})
	t.grantEvent(pod, reason, token)
	return nil
}

// countTransition counts a term's end in lockwarden_transitions_total once the status write
// that publishes it is acknowledged, as its Event is sent: a turn whose write is lost, and the
// turn that then adopts its grant and reports the end, count it once.
func (t *turn) countTransition(reason string) {
	t.onAck = append(t.onAck, func() { t.r.Metrics.transition(reason) })
}

// updateRecord replaces the record on the current grant (guarded by token and election).
func (t *turn) updateRecord(ctx context.Context, rec record) error {
	if err := t.recordEpoch(ctx); err != nil {
		return err
	}
	if err := t.r.Engine.UpdateRecord(ctx, t.key, t.in.g.token, rec.encode(), lease.WithGuard(t.r.Election.IsOwner())); err != nil {
		t.r.Metrics.etcdError("update")
		return fmt.Errorf("record %s on %s: %w", rec.Phase, t.key, err)
	}
	t.in.g.rec = rec
	return nil
}

// releaseKey deletes the current grant's key (guarded by token and election).
func (t *turn) releaseKey(ctx context.Context) error {
	if err := t.recordEpoch(ctx); err != nil {
		return err
	}
	err := t.r.Engine.Release(ctx, t.key, t.in.g.token, lease.WithGuard(t.r.Election.IsOwner()))
	if err != nil && !errors.Is(err, lease.ErrNotHeld) {
		t.r.Metrics.etcdError("release")
		return fmt.Errorf("end term on %s: %w", t.key, err)
	}
	log.FromContext(ctx).V(1).Info("etcd term ended", "lock", t.key, "token", t.in.g.token, "sinceTurn", time.Since(t.trigger))
	t.in.g = grant{}
	if failpoint("lose-release-reply") {
		return errors.New("failpoint lose-release-reply: release committed, reply reported lost")
	}
	return nil
}

// discardCachedGrant deletes the grant this turn decided on the cached lock (firstGrant),
// whose status write failed: the cache may have been stale, and no pod leads by a grant whose
// status was not acknowledged as written. The delete is guarded by the grant's token and the
// election. If the failed write did land after all (an ambiguous error), the next turn finds
// the published term's key gone, as after the grant lease's expiry (decideHeld: a new term
// for its holder, or Releasing).
func (t *turn) discardCachedGrant(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), etcdTimeout)
	defer cancel()
	err := t.r.Engine.Release(ctx, t.key, t.cachedGrant, lease.WithGuard(t.r.Election.IsOwner()))
	if err != nil && !errors.Is(err, lease.ErrNotHeld) {
		t.r.Metrics.etcdError("release")
		return fmt.Errorf("discard the unpublished grant of %s (token %d): %w", t.key, t.cachedGrant, err)
	}
	log.FromContext(ctx).V(1).Info("cache-based grant discarded after its status write failed", "lock", t.key, "token", t.cachedGrant)
	t.cachedGrant = 0
	return nil
}
