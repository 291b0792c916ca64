package controllers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/pkg/clock"
	"github.com/lockwarden/lockwarden/pkg/eligibility"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// GlobalEngine is the shared-etcd side of Global locks the reconciler uses (*lease.Global).
type GlobalEngine interface {
	Observe(ctx context.Context, name string) (lease.GlobalView, error)
	Wait(ctx context.Context, name string, basis lease.GlobalView, rec lease.GlobalRecord, guard clientv3.Cmp) (int64, error)
	Grant(ctx context.Context, name string, req lease.GlobalGrantRequest, guard clientv3.Cmp) (int64, clientv3.LeaseID, error)
	Confirm(ctx context.Context, name string, token int64, guard clientv3.Cmp) (bool, error)
	Renew(ctx context.Context, lease clientv3.LeaseID) (time.Duration, error)
	Delete(ctx context.Context, name string, token int64, lease clientv3.LeaseID, guard clientv3.Cmp) (bool, error)
}

// maxGlobalSteps bounds the steps of one turn: a grant, its round, a confirmation, the
// second round (R3) and a keepalive or two fit.
const maxGlobalSteps = 10

// globalTurn is one reconcile of one Global lock: gather, then decide and apply one step
// at a time (decideGlobal), reading again what each step changed.
type globalTurn struct {
	r     *GlobalReconciler
	key   string
	lock  *lockv1.DistributedLock // read uncached; each status write leaves its answer here
	apiOK bool                    // the uncached read of this turn answered (R4'(b))

	contender bool         // the oldest lock of its globalName here (F2)
	pods      []corev1.Pod // the candidates, from the cache
	view      lease.GlobalView
	holderEnd string // why the holder of this object's grant must stop ("" none)
	requeue   time.Duration
}

// reconcileNamed runs one turn of a Global lock on a manager with a cluster name.
func (r *GlobalReconciler) reconcileNamed(ctx context.Context, nn types.NamespacedName) (ctrl.Result, error) {
	key := lockKey(nn.Namespace, nn.Name)
	var lock lockv1.DistributedLock
	if err := r.APIReader.Get(ctx, nn, &lock); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(key)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("get lock uncached: %w", err)
	}
	if lock.DeletionTimestamp == nil && controllerutil.AddFinalizer(&lock, Finalizer) {
		// Before any grant, as the in-cluster reconciler does: deleting a lock that holds the
		// global term then ends it (Releasing, D, the guarded delete) and frees the grant at
		// once instead of after its lease lapses. The update's answer is the turn's lock.
		if err := r.Client.Update(ctx, &lock); err != nil {
			return ctrl.Result{}, fmt.Errorf("add finalizer: %w", err) // a conflict: the caller requeues
		}
	}
	at := clock.Now() // the read's (or update's) reception: evidence of the round it shows (R1)
	r.mem.update(key, lock.UID, func(o *globalObject) { o.saw(lock.Status.GlobalRound, at) })
	t := &globalTurn{r: r, key: key, lock: &lock, apiOK: true}
	if err := t.gatherLocal(ctx); err != nil {
		return ctrl.Result{}, err
	}
	if err := t.observe(ctx); err != nil {
		return ctrl.Result{}, t.etcdDown(ctx, err)
	}
	for range maxGlobalSteps {
		step := decideGlobal(t.input())
		log.FromContext(ctx).V(1).Info("global step", "lock", key, "step", step.verb.String(), "why", step.why)
		r.noteRegression(ctx, t.lock, key, step)
		done, err := t.apply(ctx, step)
		if apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: globalRetry}, nil // new evidence: the next turn reads again (L5)
		}
		if err != nil {
			return ctrl.Result{}, err
		}
		if done {
			return ctrl.Result{RequeueAfter: t.requeue}, nil
		}
	}
	return ctrl.Result{RequeueAfter: globalObserveSoon}, nil
}

// gatherLocal reads this cluster's side: whether the lock contends for its global name, and
// its candidates (both from the cache).
func (t *globalTurn) gatherLocal(ctx context.Context) error {
	ok, err := contends(ctx, t.r.Client, t.lock)
	if err != nil {
		return err
	}
	t.contender = ok
	if sel := t.lock.Spec.Candidates.Selector; sel != nil {
		selector, err := sel.AsSelector()
		if err != nil {
			return nil // no candidate: the spec is the user's to fix
		}
		if t.pods, err = candidatePods(ctx, t.r.Client, t.lock, selector); err != nil {
			return fmt.Errorf("list candidate pods: %w", err)
		}
	}
	return nil
}

// candidate chooses among the candidates by strategy, never the holder of K when K is this
// object's grant (its term is ending when a successor is wanted).
func (t *globalTurn) chooseCandidate() *candidateRef {
	exclude := ""
	if v := t.view; v.Held && v.Grant.Cluster.UID == t.r.Cluster.UID && v.Grant.Object == string(t.lock.UID) {
		exclude = v.Grant.HolderUID
	}
	if p := eligibility.Choose(&t.lock.Spec, t.pods, exclude); p != nil {
		return &candidateRef{name: p.Name, uid: p.UID}
	}
	return nil
}

// observe reads K and T (one linearizable read), and what this cluster knows of K's holder
// when the grant is this object's.
func (t *globalTurn) observe(ctx context.Context) error {
	octx, cancel := context.WithTimeout(ctx, etcdTimeout)
	defer cancel()
	v, err := t.r.Global.Observe(octx, t.lock.Spec.GlobalName)
	if err != nil {
		return err
	}
	t.view = v
	t.r.mem.update(t.key, t.lock.UID, func(o *globalObject) {
		switch {
		case v.Held:
			o.freeMod, o.freeAt = 0, 0
		case o.freeAt == 0 || o.freeMod != v.TMod:
			o.freeMod, o.freeAt = v.TMod, v.ReceivedAt
		}
	})
	if v.TCreate != 0 && v.Tomb.Kind == lease.RecordWaiting && v.Tomb.Cluster.UID != t.r.Cluster.UID {
		t.r.mem.update(t.key, t.lock.UID, func(o *globalObject) {
			if o.rivalMod != v.TMod {
				o.rivalMod, o.rivalSince = v.TMod, v.ReceivedAt
			}
		})
	}
	t.holderEnd = ""
	if v.Held && v.Grant.Cluster.UID == t.r.Cluster.UID && v.Grant.Object == string(t.lock.UID) {
		t.holderEnd = t.holderEndOf(ctx, v.Grant)
	}
	return nil
}

// holderEndOf says why the pod K's record names must stop leading, or "" when it may go on
// (or this turn cannot tell). Absence is confirmed uncached, never taken from the cache.
func (t *globalTurn) holderEndOf(ctx context.Context, g lease.GlobalRecord) string {
	for i := range t.pods {
		if p := &t.pods[i]; string(p.UID) == g.HolderUID {
			switch {
			case p.DeletionTimestamp != nil:
				return lockv1.ReasonHolderTerminating
			case !eligibility.Eligible(p):
				return lockv1.ReasonHolderNotReady
			}
			return ""
		}
	}
	var live corev1.Pod
	switch err := t.r.APIReader.Get(ctx, client.ObjectKey{Namespace: t.lock.Namespace, Name: g.Holder}, &live); {
	case apierrors.IsNotFound(err):
		return lockv1.ReasonHolderGone
	case err != nil:
		return ""
	case string(live.UID) != g.HolderUID:
		return lockv1.ReasonHolderGone
	case !selects(t.lock, &live):
		return lockv1.ReasonSelectorChanged
	case !eligibility.Eligible(&live):
		return lockv1.ReasonHolderNotReady
	}
	return "" // selected and eligible, not yet in the cache's list
}

// input is decideGlobal's input now.
func (t *globalTurn) input() globalInput {
	l := t.lock
	g := t.termLease()
	return globalInput{
		now: clock.Now(), owner: t.r.Election.Valid(), apiOK: t.apiOK,
		cluster: t.r.Cluster, uid: l.UID, contender: t.contender, preference: l.Spec.ClusterPreference,
		deleting: l.DeletionTimestamp != nil, suspend: l.Spec.Suspend,
		ownDelay: seconds(l.Spec.EffectiveLockDelaySeconds()), period: g / 3, leaseTTL: g,
		view: t.view, pub: publishedOf(&l.Status), candidate: t.chooseCandidate(), holderEnd: t.holderEnd,
		mem: t.r.mem.get(t.key, l.UID),
	}
}

// termLease is G of the turn's view (termLease): the grant's own TTL when K is this
// object's grant.
func (t *globalTurn) termLease() time.Duration {
	return termLease(&t.lock.Spec, &t.lock.Status, t.view, t.r.Cluster, t.lock.UID)
}

// apply performs one step; done ends the turn (t.requeue says when to run again).
func (t *globalTurn) apply(ctx context.Context, s globalStep) (done bool, err error) {
	r, l, name := t.r, t.lock, t.lock.Spec.GlobalName
	guard := r.Election.IsOwner()
	period := t.termLease() / 3
	switch s.verb {
	case gIdle, gObserve:
		t.requeue = s.after
		return true, nil
	case gDropFinalizer:
		r.forget(t.key)
		return true, r.dropFinalizer(ctx, l)
	case gPublishElsewhere:
		st := l.Status.DeepCopy()
		publishElsewhere(st, l.Generation, t.view, s.reason)
		return false, t.write(ctx, st)
	case gPublishFree:
		st := l.Status.DeepCopy()
		_, phase := freeReason(t.input())
		publishFree(st, l.Generation, phase, s.reason, cmp.Or(s.msg, freeMessage(s.reason)))
		return false, t.write(ctx, st)
	case gConfirm:
		token := t.view.Token
		cctx, cancel := context.WithTimeout(ctx, period/2)
		defer cancel()
		sent := clock.Now()
		held, err := r.Global.Confirm(cctx, name, token, guard)
		r.mem.update(t.key, l.UID, func(o *globalObject) {
			o.confirm = confirmation{sent: sent, done: err == nil, held: held, token: token}
		})
		if err != nil {
			return false, err
		}
		if !held {
			return false, t.observe(ctx) // the grant or the election is gone: read again
		}
		return false, nil
	case gWriteRound:
		return false, t.writeRound(ctx, s)
	case gRenew:
		rctx, cancel := context.WithTimeout(ctx, period/2) // below P0 (L5)
		defer cancel()
		r.mem.update(t.key, l.UID, func(o *globalObject) { o.renewed, o.renewSent = true, clock.Now() })
		if _, err := r.Global.Renew(rctx, t.view.Lease); err != nil {
			log.FromContext(ctx).Info("keepalive of the global grant failed", "lock", t.key, "error", err.Error())
			return false, t.observe(ctx)
		}
		return false, nil
	case gDelete:
		token := t.view.Token
		dctx, cancel := context.WithTimeout(ctx, etcdTimeout)
		defer cancel()
		deleted, err := r.Global.Delete(dctx, name, token, t.view.Lease, guard)
		if err != nil {
			return false, err // no acknowledgement: only R7 may follow (F1)
		}
		if !deleted {
			return false, t.observe(ctx) // the grant is gone or replaced, or the election lost
		}
		{
			reason := lockv1.ReasonDeleted
			r.mem.update(t.key, l.UID, func(o *globalObject) {
				if o.releasingReason != "" {
					reason = o.releasingReason
				}
				o.deletedToken, o.releasingToken, o.releasingAt, o.releasingReason = token, 0, 0, ""
			})
			log.FromContext(ctx).Info("global term ended", "lock", t.key, "token", token, "reason", reason)
			r.Recorder.Eventf(l, nil, corev1.EventTypeNormal, reason, "End", "global term of %s (token %d) ended (%s): its grant is deleted", t.view.Grant.Holder, token, reason)
		}
		if s.basis == lease.GrantSuccession && s.rev == token {
			return false, t.grant(ctx, s, guard) // R8 at once: this process's delete was acknowledged
		}
		return false, t.observe(ctx)
	case gGrant:
		return false, t.grant(ctx, s, guard)
	case gWaitRecord:
		return false, t.waitRecord(ctx, s, guard)
	}
	return true, fmt.Errorf("unknown global step %d", s.verb)
}

// writeRound publishes the next round for K's token (R1-R3): a status update with the
// resourceVersion of the read (or write) that showed the round before, never retried.
func (t *globalTurn) writeRound(ctx context.Context, s globalStep) error {
	l, v := t.lock, t.view
	round := l.Status.GlobalRound + 1
	st := l.Status.DeepCopy()
	g := t.termLease()
	publishRound(st, l.Generation, t.r.Cluster.Name, v.Grant, v.Token, v.Lease, round, seconds32(g), s.releasing, s.reason, metav1.Now())
	sent := clock.Now()
	t.r.mem.update(t.key, l.UID, func(o *globalObject) {
		if o.roundToken != v.Token {
			o.roundToken, o.roundsForToken = v.Token, 0
		}
		o.roundSent, o.roundWritten = sent, true
	})
	wctx, cancel := context.WithTimeout(ctx, g/3)
	defer cancel()
	if err := t.write(wctx, st); err != nil {
		return err // an ambiguous write is no evidence (C6): the next turn reads
	}
	at := clock.Now()
	t.r.mem.update(t.key, l.UID, func(o *globalObject) {
		o.saw(round, at)
		o.roundAcked(v.Token, sent, at)
		if s.releasing && o.releasingToken != v.Token {
			o.releasingToken, o.releasingAt, o.releasingReason = v.Token, at, s.reason
		}
	})
	return nil
}

// grant grants the turn's candidate by the step's basis (R6', R7.3 or R8).
func (t *globalTurn) grant(ctx context.Context, s globalStep, guard clientv3.Cmp) error {
	l, c := t.lock, t.input().candidate
	if c == nil {
		return t.observe(ctx)
	}
	ttl := seconds(l.Spec.LeaseDurationSeconds)
	req := lease.GlobalGrantRequest{
		Basis: s.basis, Rev: s.rev,
		Record: lease.GlobalRecord{Cluster: t.r.Cluster, Object: string(l.UID), Holder: c.name, HolderUID: string(c.uid), DelaySeconds: s.delay,
			LeaseSeconds: l.Spec.LeaseDurationSeconds}, // G, for P0 and the keepalives of the term (termLease)
		TTL: ttl,
	}
	gctx, cancel := context.WithTimeout(ctx, etcdTimeout)
	defer cancel()
	sent := clock.Now()
	token, _, err := t.r.Global.Grant(gctx, l.Spec.GlobalName, req, guard)
	switch {
	case err == nil:
		t.r.mem.update(t.key, l.UID, func(o *globalObject) { o.newGrant(token, sent) })
		log.FromContext(ctx).Info("global grant", "lock", t.key, "basis", s.basis.String(), "pod", c.name, "token", token)
		t.r.Recorder.Eventf(l, nil, corev1.EventTypeNormal, lockv1.ReasonGranted, "Grant", "global term granted to %s in cluster %s with token %d (%s)", c.name, t.r.Cluster.Name, token, s.basis)
	case errors.Is(err, lease.ErrGlobalChanged):
		log.FromContext(ctx).V(1).Info("global grant refused", "lock", t.key, "error", err.Error())
	default:
		return err // ambiguous: the next turn's read shows a landed grant as this object's
	}
	return t.observe(ctx)
}

// waitRecord writes this manager's waiting record (R7.2) against the turn's read.
func (t *globalTurn) waitRecord(ctx context.Context, s globalStep, guard clientv3.Cmp) error {
	l, basis := t.lock, t.view
	rec := lease.GlobalRecord{Cluster: t.r.Cluster, Object: string(l.UID), DelaySeconds: s.delay}
	wctx, cancel := context.WithTimeout(ctx, etcdTimeout)
	defer cancel()
	w, err := t.r.Global.Wait(wctx, l.Spec.GlobalName, basis, rec, guard)
	tomb := tombstoneWrite{sent: true, basis: basis.Rev, basisAt: basis.ReceivedAt}
	switch {
	case err == nil:
		tomb.answered, tomb.held, tomb.rev = true, true, w
	case errors.Is(err, lease.ErrGlobalChanged):
		tomb.answered = true
	default:
		tomb.ambiguous = true
	}
	t.r.mem.update(t.key, l.UID, func(o *globalObject) { o.tomb = tomb })
	if tomb.ambiguous {
		return err
	}
	return t.observe(ctx)
}

// write publishes st (EtcdAvailable=True: this turn's etcd read answered).
func (t *globalTurn) write(ctx context.Context, st *lockv1.DistributedLockStatus) error {
	setCondition(st, t.lock.Generation, lockv1.ConditionEtcdAvailable, true, lockv1.ReasonEtcdReachable, "the shared etcd answered the last linearizable read")
	return t.r.writeStatus(ctx, t.lock, st)
}

// etcdDown publishes EtcdAvailable=False and returns cause (the workqueue retries).
func (t *globalTurn) etcdDown(ctx context.Context, cause error) error {
	st := t.lock.Status.DeepCopy()
	setCondition(st, t.lock.Generation, lockv1.ConditionEtcdAvailable, false, ReasonGlobalUnavailable, cause.Error())
	if err := t.r.writeStatus(ctx, t.lock, st); err != nil {
		return fmt.Errorf("%w (and publish EtcdAvailable=False: %w)", cause, err)
	}
	return cause
}
