package controllers

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/pkg/clock"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// GlobalReconciler reconciles the scope Global locks (docs/global.md) while this replica holds
// the controller election: the in-cluster Reconciler ignores them (global_scope.go). Without
// a cluster name it grants nothing and says so on every Global lock (ClusterNameUnset).
type GlobalReconciler struct {
	// Client reads locks and pods from the cache and writes status and finalizers.
	Client client.Client
	// APIReader is uncached.
	APIReader client.Reader
	// Recorder emits Events.
	Recorder events.EventRecorder
	// Election is this replica's election lock: its IsOwner guards every global transaction.
	Election Fence
	// Cluster is this manager's registered identity (RegisterCluster); a zero Cluster (no
	// --cluster-name) grants no Global lock.
	Cluster lease.ClusterID
	// Global reaches the shared etcd; required with a Cluster.
	Global GlobalEngine

	once      sync.Once
	mem       *globalMemory
	mu        sync.Mutex
	queue     workqueue.TypedRateLimitingInterface[reconcile.Request] // under mu
	regressed map[string]string                                       // under mu: locks in TokenRegression, by key: why
}

func (r *GlobalReconciler) init() {
	r.once.Do(func() { r.mem = newGlobalMemory() })
}

// Reconcile runs one turn of a Global lock.
func (r *GlobalReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	r.init()
	var lock lockv1.DistributedLock
	if err := r.Client.Get(ctx, req.NamespacedName, &lock); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(lockKey(req.Namespace, req.Name))
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("get lock: %w", err)
	}
	if !globalScoped(&lock) {
		return ctrl.Result{}, nil // the in-cluster reconciler's
	}
	if !r.Election.Valid() {
		return ctrl.Result{}, ErrElectionLost
	}
	var (
		res ctrl.Result
		err error
	)
	if r.Cluster.Name == "" || r.Global == nil {
		res, err = r.unnamed(ctx, &lock)
	} else {
		res, err = r.reconcileNamed(ctx, req.NamespacedName)
	}
	if apierrors.IsConflict(err) {
		return ctrl.Result{RequeueAfter: globalRetry}, nil // new evidence: the next turn reads again
	}
	return res, err
}

// unnamed handles a Global lock on a manager without --cluster-name: it publishes Held=False
// ClusterNameUnset and nothing else, and lets a deleted lock go (unnamedDeleted).
func (r *GlobalReconciler) unnamed(ctx context.Context, lock *lockv1.DistributedLock) (ctrl.Result, error) {
	if lock.DeletionTimestamp != nil {
		return r.unnamedDeleted(ctx, client.ObjectKeyFromObject(lock))
	}
	st := lock.Status.DeepCopy()
	setCondition(st, lock.Generation, lockv1.ConditionHeld, false, ReasonClusterNameUnset,
		"this lock has scope Global and the lockwarden manager runs without --cluster-name: no Global lock is granted in this cluster")
	return ctrl.Result{}, r.writeStatus(ctx, lock, st)
}

// unnamedDeleted lets a deleted Global lock go on a manager without --cluster-name. This
// manager grants nothing, and a term an earlier run granted lives on rounds that nobody writes
// now, while its grant in the shared etcd lapses unrenewed (R4). But its pod may still lead by
// R5 up to S + D - m, S before the last round's commit: a lock that published a term (rounds
// or a holder) goes only once D (the published globalLockDelaySeconds, at least the lock's
// own delay) has passed on this process's clock since the reception of its first uncached
// read of the deleted lock. At most one late round of a deposed replica can land after that
// read (the next needs a confirmation its lost election fails), and the S of that round's
// pods precedes the round before it, so precedes the read. A lock that never published a
// round goes at once: no pod of it was ever valid.
func (r *GlobalReconciler) unnamedDeleted(ctx context.Context, nn types.NamespacedName) (ctrl.Result, error) {
	key := lockKey(nn.Namespace, nn.Name)
	var lock lockv1.DistributedLock
	if err := r.APIReader.Get(ctx, nn, &lock); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(key)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("get lock uncached: %w", err)
	}
	at := clock.Now()
	st := &lock.Status
	if st.GlobalRound == 0 && st.GlobalHolderUID == "" {
		r.forget(key)
		return ctrl.Result{}, r.dropFinalizer(ctx, &lock)
	}
	var since clock.Instant
	r.mem.update(key, lock.UID, func(o *globalObject) {
		if o.deletingSince == 0 {
			o.deletingSince = at
		}
		since = o.deletingSince
	})
	d := max(seconds(st.GlobalLockDelaySeconds), seconds(lock.Spec.EffectiveLockDelaySeconds()))
	if left := d - clock.Now().Sub(since); left > 0 {
		next := st.DeepCopy()
		setCondition(next, lock.Generation, lockv1.ConditionHeld, false, ReasonClusterNameUnset,
			fmt.Sprintf("deleted: a pod of its last global term (round %d) may lead up to the lock delay %v; the lock goes after it (no --cluster-name)", st.GlobalRound, d))
		return ctrl.Result{RequeueAfter: left}, r.writeStatus(ctx, &lock, next)
	}
	r.forget(key)
	return ctrl.Result{}, r.dropFinalizer(ctx, &lock)
}

// writeStatus writes st with the lock's resourceVersion as precondition when it differs from
// the published status. Never retried on conflict (docs/global.md, L5): the next turn reads
// again.
func (r *GlobalReconciler) writeStatus(ctx context.Context, lock *lockv1.DistributedLock, st *lockv1.DistributedLockStatus) error {
	st.ObservedGeneration = lock.Generation
	st.ControllerEpoch = max(lock.Status.ControllerEpoch, r.Election.Token())
	if equality.Semantic.DeepEqual(&lock.Status, st) {
		return nil
	}
	if !r.Election.Valid() {
		return ErrElectionLost
	}
	lock.Status = *st
	if err := r.Client.Status().Update(ctx, lock); err != nil {
		return fmt.Errorf("update status: %w", err)
	}
	return nil
}

// dropFinalizer removes the lock's finalizer (a deleted lock's last step).
func (r *GlobalReconciler) dropFinalizer(ctx context.Context, lock *lockv1.DistributedLock) error {
	if !controllerutil.RemoveFinalizer(lock, Finalizer) {
		return nil
	}
	if err := r.Client.Update(ctx, lock); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove finalizer: %w", err)
	}
	return nil
}

// globalRetry is how soon a Global lock whose write lost a race is read again.
const globalRetry = 50 * time.Millisecond
