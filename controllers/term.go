package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/pkg/lease"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// run decides this turn from (etcd, published status) and performs the etcd writes; the
// status to publish is left in t.st.
func (t *turn) run(ctx context.Context) error {
	st := &t.st
	if t.g.present() && t.g.token <= st.MaxFencingToken && t.g.token != st.FencingToken && t.rev > st.MaxFencingToken {
		bumped, err := t.r.historyCompacted(ctx, t.key, st.MaxFencingToken)
		if err != nil {
			return err
		}
		if bumped {
			// A grant older than the published term, in an etcd whose history up to every
			// published token is compacted away and whose revision is above them: the
			// leftover of the documented restore (etcdutl snapshot restore --bump-revision
			// --mark-compacted). It was never published after the term status names, so no
			// pod leads by it; delete it (guarded by its token) and go on as for a vanished
			// key: every new grant gets a token above status.maxFencingToken.
			stale := t.g.token
			if err := t.release(ctx); err != nil {
				return err
			}
			t.event(nil, corev1.EventTypeNormal, lockv1.ReasonKeyVanished, "Cleanup",
				"deleted a stale etcd grant (token %d) left by a restore with --bump-revision; etcd revision %d is above every published token", stale, t.rev)
		}
	}
	switch {
	case t.g.present() && t.g.token <= st.MaxFencingToken && t.g.token != st.FencingToken:
		return t.regress(fmt.Sprintf("etcd holds token %d for %s, at or below status.maxFencingToken %d and not the published token %d",
			t.g.token, t.key, st.MaxFencingToken, st.FencingToken))
	case !t.g.present() && t.rev < st.MaxFencingToken:
		return t.regress(fmt.Sprintf("etcd is at revision %d, below status.maxFencingToken %d", t.rev, st.MaxFencingToken))
	case t.g.present() && t.g.token > st.MaxFencingToken:
		return t.adoptUnpublished()
	case st.HolderUID == "":
		return t.noHolder(ctx)
	case st.Phase == lockv1.PhaseReleasing:
		return t.releasing(ctx)
	default:
		return t.held(ctx)
	}
}

// regress reports a token regression: grant nothing for this lock.
func (t *turn) regress(why string) error {
	t.regressed = why
	t.r.regression(context.Background(), t.lock, t.key, why)
	t.after(regressionRecheck)
	return nil
}

// adoptUnpublished publishes a grant that etcd has and status does not: a grant whose
// status write failed or whose outcome was ambiguous. Its preconditions held when it was
// made, so it is published as recorded.
func (t *turn) adoptUnpublished() error {
	g := t.g
	if t.st.HolderUID != "" && t.st.HolderUID != g.holderUID {
		// The published term ended in a turn whose status write was lost: attested (no
		// Releasing) or after its Releasing, whose reason is on the open term.
		reason := lockv1.ReasonHolderTerminated
		if open := openTerm(&t.st); open != nil && t.st.Phase == lockv1.PhaseReleasing && open.Reason != "" {
			reason = open.Reason
		}
		publishEnd(&t.st, reason, metav1.Now())
	}
	publishGrant(&t.st, g.rec.Name, g, g.lease, lockv1.ReasonGranted, metav1.Now())
	if g.rec.Phase == lockv1.PhaseReleasing {
		publishReleasing(&t.st, g.rec.Reason)
		t.onAck = append(t.onAck, func() { t.r.mem.releasingAcknowledged(t.lock.UID, g.token) })
	}
	t.after(0)
	return nil
}

// noHolder grants the lock when a candidate is eligible.
func (t *turn) noHolder(ctx context.Context) error {
	switch {
	case t.lock.DeletionTimestamp != nil:
		t.dropFinalizer = true
		return nil
	case t.lock.Spec.Suspend:
		t.st.Phase = lockv1.PhaseSuspended
		return nil
	}
	t.st.Phase = lockv1.PhasePending
	if next := choose(&t.lock.Spec, t.pods, ""); next != nil {
		return t.grantTo(ctx, next, lockv1.ReasonGranted)
	}
	return nil
}

// held handles a published Held term.
func (t *turn) held(ctx context.Context) error {
	end := t.endReason(ctx)
	if !t.g.present() {
		if end.attested { // e.g. our own release whose reply was lost
			return t.endAndNext(ctx, end.reason)
		}
		if end.reason == "" {
			// The key vanished (controller down past the grant lease, operator action) but the
			// holder is still eligible: a new term for it, with a new token.
			holder := end.pod
			publishEnd(&t.st, lockv1.ReasonKeyVanished, metav1.Now())
			return t.grantTo(ctx, holder, lockv1.ReasonRegranted)
		}
		return t.startReleasing(ctx, lockv1.ReasonKeyVanished)
	}
	if t.g.rec.Phase == lockv1.PhaseReleasing {
		// etcd recorded Releasing but status did not publish it: publish now.
		publishReleasing(&t.st, t.g.rec.Reason)
		token := t.g.token
		t.onAck = append(t.onAck, func() { t.r.mem.releasingAcknowledged(t.lock.UID, token) })
		return nil
	}
	switch {
	case end.attested:
		return t.endAndNext(ctx, end.reason)
	case end.reason != "":
		return t.startReleasing(ctx, end.reason)
	}
	// Steady: hold a handle (adopted after a takeover) so that a vanished key wakes the lock.
	if _, err := t.r.handle(ctx, t.key, t.g.token); errors.Is(err, lease.ErrGuardFailed) {
		return err
	}
	if end.recheck > 0 { // only a timed rule (Preferred preemption, a failed GET) asks again
		t.after(end.recheck)
	}
	return nil
}

// startReleasing records Releasing in etcd (guarded), then publishes it; the lock delay
// counts from the acknowledgement of that status write.
func (t *turn) startReleasing(ctx context.Context, reason string) error {
	if t.g.present() {
		rec := t.g.rec
		rec.Phase, rec.Reason, rec.Epoch = lockv1.PhaseReleasing, reason, t.r.Election.Token()
		if err := t.update(ctx, rec); err != nil {
			return err
		}
	}
	publishReleasing(&t.st, reason)
	token := t.st.FencingToken
	t.onAck = append(t.onAck, func() { t.r.mem.releasingAcknowledged(t.lock.UID, token) })
	t.event(nil, corev1.EventTypeNormal, reason, "Release", "term of %s (token %d) is ending: %s; next grant after the lock delay", t.st.Holder, token, reason)
	t.after(t.releaseWait())
	return nil
}

// releaseWait is max(lockDelaySeconds, termLeaseSeconds).
func (t *turn) releaseWait() time.Duration {
	d := t.lock.Spec.EffectiveLockDelaySeconds()
	return time.Duration(max(d, t.st.TermLeaseSeconds)) * time.Second
}

// releasing handles a published Releasing term: back to Held, on to the next, or wait.
func (t *turn) releasing(ctx context.Context) error {
	uid, token := t.lock.UID, t.st.FencingToken
	waited := t.r.mem.releasingFor(uid, token)
	end := t.endReason(ctx)
	reason := lockv1.ReasonHolderNotReady
	if open := openTerm(&t.st); open != nil && open.Reason != "" {
		reason = open.Reason
	}
	if end.attested {
		return t.endAndNext(ctx, end.reason)
	}
	if end.reason == "" && t.g.present() && t.g.token == token {
		need := max(time.Duration(t.st.TermLeaseSeconds)*time.Second/3, 2*time.Second)
		lockDelay := time.Duration(t.lock.Spec.EffectiveLockDelaySeconds()) * time.Second
		if ok := t.r.mem.holderEligibleFor(uid, true); ok >= need && t.r.mem.mayReturn(uid, lockDelay) {
			rec := t.g.rec
			rec.Phase, rec.Reason, rec.Epoch = lockv1.PhaseHeld, "", t.r.Election.Token()
			if err := t.update(ctx, rec); err != nil {
				return err
			}
			publishReturn(&t.st)
			t.onAck = append(t.onAck, func() { t.r.mem.returned(uid) })
			t.event(end.pod, corev1.EventTypeNormal, lockv1.ReasonGranted, "Keep", "%s is eligible again; term with token %d continues", t.st.Holder, token)
			return nil
		} else if ok < need {
			t.after(need - ok)
		}
	} else {
		t.r.mem.holderEligibleFor(uid, false)
	}
	if wait := t.releaseWait(); waited < wait {
		t.after(wait - waited)
		return nil
	}
	return t.endAndNext(ctx, reason)
}

// endAndNext ends the current term (deleting its key, guarded) and grants the next
// eligible candidate at once.
func (t *turn) endAndNext(ctx context.Context, reason string) error {
	old := t.st.HolderUID
	if t.g.present() {
		if err := t.release(ctx); err != nil {
			return err
		}
	}
	t.event(nil, corev1.EventTypeNormal, reason, "End", "term of %s (token %d) ended: %s", t.st.Holder, t.st.FencingToken, reason)
	t.r.Metrics.transition(reason)
	publishEnd(&t.st, reason, metav1.Now())
	t.onAck = append(t.onAck, func() { t.r.mem.termEnded(t.lock.UID) })
	switch {
	case t.lock.DeletionTimestamp != nil:
		t.dropFinalizer = true
		return nil
	case t.lock.Spec.Suspend:
		t.st.Phase = lockv1.PhaseSuspended
		return nil
	}
	if next := choose(&t.lock.Spec, t.pods, string(old)); next != nil {
		return t.grantTo(ctx, next, lockv1.ReasonGranted)
	}
	return nil
}

// grantTo grants the lock to pod in one guarded etcd transaction, then stages the status.
func (t *turn) grantTo(ctx context.Context, pod *corev1.Pod, reason string) error {
	rec := record{
		Name: pod.Name, Phase: lockv1.PhaseHeld, Strategy: t.lock.Spec.Strategy,
		LeaseSeconds: t.lock.Spec.LeaseDurationSeconds, Epoch: t.r.Election.Token(),
	}
	l, err := t.r.Grants.TryAcquire(ctx, t.key, string(pod.UID), lease.WithRecord(rec.encode()), lease.WithGuard(t.r.Election.IsOwner()))
	if err != nil {
		var held *lease.HeldError
		if errors.As(err, &held) {
			t.after(100 * time.Millisecond) // someone else's grant: read it next turn
			return nil
		}
		t.r.Metrics.etcdError("grant")
		return fmt.Errorf("grant %s to %s: %w", t.key, pod.Name, err) // an ambiguous outcome is settled by the next read
	}
	t.r.keep(t.key, l)
	t.g = grant{holderUID: pod.UID, token: l.Token(), lease: t.r.Grants.ID(), rec: rec}
	if t.g.token <= t.st.MaxFencingToken {
		return t.regress(fmt.Sprintf("etcd granted token %d, at or below status.maxFencingToken %d", t.g.token, t.st.MaxFencingToken))
	}
	if failpoint("drop-status-after-grant") {
		return errors.New("failpoint drop-status-after-grant: grant committed, status write dropped")
	}
	publishGrant(&t.st, pod.Name, t.g, t.r.Grants.ID(), reason, metav1.Now())
	t.r.Metrics.granted(reason, time.Since(t.trigger))
	uid := t.lock.UID
	t.onAck = append(t.onAck, func() {
		if d, ok := t.r.mem.granted(uid); ok {
			t.r.Metrics.unheld(d)
		}
	})
	token := t.g.token
	t.event(pod, corev1.EventTypeNormal, reason, "Grant", "granted to %s with token %d", pod.Name, token)
	return nil
}

// update replaces the record on the current grant (guarded by token and election).
func (t *turn) update(ctx context.Context, rec record) error {
	l, err := t.r.handle(ctx, t.key, t.g.token)
	if err != nil {
		return err
	}
	if err := l.Update(ctx, rec.encode(), lease.WithGuard(t.r.Election.IsOwner())); err != nil {
		t.r.Metrics.etcdError("update")
		return fmt.Errorf("record %s on %s: %w", rec.Phase, t.key, err)
	}
	t.g.rec = rec
	return nil
}

// release deletes the current grant's key (guarded by token and election).
func (t *turn) release(ctx context.Context) error {
	l, err := t.r.handle(ctx, t.key, t.g.token)
	if err != nil {
		return err
	}
	if err := l.Release(ctx, lease.WithGuard(t.r.Election.IsOwner())); err != nil && !errors.Is(err, lease.ErrNotHeld) {
		t.r.Metrics.etcdError("release")
		return fmt.Errorf("end term on %s: %w", t.key, err)
	}
	t.r.drop(t.key, l)
	t.g = grant{}
	if failpoint("lose-release-reply") {
		return errors.New("failpoint lose-release-reply: release committed, reply reported lost")
	}
	return nil
}

// handle returns a *lease.Lock for the grant of key at token, adopting it on the grant
// lease if this replica has none (after a restart or a takeover).
func (r *Reconciler) handle(ctx context.Context, key string, token int64) (*lease.Lock, error) {
	r.mu.Lock()
	l := r.handles[key]
	r.mu.Unlock()
	if l != nil && l.Token() == token && l.Err() == nil {
		return l, nil
	}
	l, err := r.Grants.Adopt(ctx, key, token, lease.WithGuard(r.Election.IsOwner()))
	if err != nil {
		if errors.Is(err, lease.ErrNotHeld) {
			// Not on our grant lease (an older one that is expiring): it ends by itself.
			return nil, fmt.Errorf("grant %s token %d is not on grant lease %x; waiting for it to expire: %w", key, token, int64(r.Grants.ID()), err)
		}
		return nil, err
	}
	r.keep(key, l)
	return l, nil
}

// keep remembers the handle of a grant, and wakes the lock when the grant ends for any
// reason (released, key deleted behind the controller, grant lease lost): the controller
// learns of a vanished key without polling etcd.
func (r *Reconciler) keep(key string, l *lease.Lock) {
	r.mu.Lock()
	r.handles[key] = l
	r.mu.Unlock()
	ns, name, _ := strings.Cut(key, "/")
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}
	r.watchers.Add(1)
	go func() {
		defer r.watchers.Done()
		<-l.Done() // closes on release, loss, or when the grant session is orphaned
		r.mu.Lock()
		q := r.queue
		r.mu.Unlock()
		if q != nil {
			q.Add(req) // a no-op once the controller has stopped
		}
	}()
}

// Wait returns once every goroutine the reconciler started has ended; call it after the
// grant session ended (Orphan), which ends every handle.
func (r *Reconciler) Wait() { r.watchers.Wait() }

func (r *Reconciler) drop(key string, l *lease.Lock) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.handles[key] == l {
		delete(r.handles, key)
	}
}

// holderUID is the published holder's UID.
func (t *turn) holderUID() types.UID { return t.st.HolderUID }
