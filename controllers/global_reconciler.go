package controllers

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
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

	once  sync.Once
	mem   *globalMemory
	mu    sync.Mutex
	queue workqueue.TypedRateLimitingInterface[reconcile.Request] // under mu
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
			r.mem.forget(lockKey(req.Namespace, req.Name))
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
// ClusterNameUnset and nothing else, and lets a deleted lock go. Letting it go without ending a
// term is safe: this manager grants nothing, and a term an earlier run granted lives on rounds
// that nobody writes now (its pod stops within the lock delay of its last round, rule R5),
// while its grant in the shared etcd lapses unrenewed (R4).
func (r *GlobalReconciler) unnamed(ctx context.Context, lock *lockv1.DistributedLock) (ctrl.Result, error) {
	if lock.DeletionTimestamp != nil {
		return ctrl.Result{}, r.dropFinalizer(ctx, lock)
	}
	st := lock.Status.DeepCopy()
	setCondition(st, lock.Generation, lockv1.ConditionHeld, false, ReasonClusterNameUnset,
		"this lock has scope Global and the lockwarden manager runs without --cluster-name: no Global lock is granted in this cluster")
	return ctrl.Result{}, r.writeStatus(ctx, lock, st)
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
