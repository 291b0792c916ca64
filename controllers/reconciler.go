package controllers

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

const (
	// Finalizer holds a DistributedLock until its term has ended and its etcd key is gone:
	// lockv1.Finalizer, named here too for the controller's readers.
	Finalizer = lockv1.Finalizer
	// SkipEtcdCleanupAnnotation set to "true" on a lock being deleted lets it go without
	// ending its term in etcd: for when etcd is gone for good. A grant left in a live etcd
	// is deleted by the turn that finds the lock gone (dropOrphan); a lock created again
	// under the same name gets a new term.
	SkipEtcdCleanupAnnotation = "lockwarden.io/skip-etcd-cleanup"
	// DefaultCountDebounce is the least time between writes of status.eligibleCandidates
	// alone.
	DefaultCountDebounce = 10 * time.Second
	// etcdTimeout bounds the read that starts each turn; the turn's writes get twice that.
	// An ambiguous outcome is settled by the next turn's read.
	etcdTimeout = 5 * time.Second
	// regressionRecheck is how often a lock in TokenRegression is read again.
	regressionRecheck = 10 * time.Second
)

// Reconciler reconciles DistributedLocks while this replica holds the controller election.
type Reconciler struct {
	// Client reads locks, pods and nodes from the cache and writes status and finalizers.
	Client client.Client
	// APIReader is uncached: a holder's absence is confirmed by a GET, never by the cache.
	APIReader client.Reader
	// Recorder emits an Event on every term end and on grants, these within a rate limit
	// (GrantEventRate).
	Recorder events.EventRecorder
	// Engine reads lock keys linearizably and writes them by token.
	Engine Inspector
	// Grants is the grant lease every grant hangs on.
	Grants Grants
	// Election is this replica's election lock; its token is the controller epoch.
	Election Fence
	// Metrics, when set, records transitions, phases, latencies and errors.
	Metrics *Metrics
	// CountDebounce is the least time between writes caused by eligibleCandidates alone.
	// Default DefaultCountDebounce.
	CountDebounce time.Duration
	// GrantEventRate and GrantEventBurst limit the grant Events (grantevents.go): per second,
	// and at once. Defaults DefaultGrantEventRate and DefaultGrantEventBurst.
	GrantEventRate  float64
	GrantEventBurst int

	once       sync.Once
	mem        *memory
	routes     routeMemory
	mu         sync.Mutex
	queue      workqueue.TypedRateLimitingInterface[reconcile.Request]
	regressed  map[string]string // locks in TokenRegression, by key: the reason
	phases     map[string]lockv1.Phase
	phaseCount map[lockv1.Phase]int

	batch       *grantBatcher         // nil when Grants cannot batch
	grantEvents *eventBudget          // the grant Events' rate limit
	granted     map[string]*grantEcho // this replica's grants whose etcd watch echo is due, under mu
	slots       map[string]int32      // locks with slots, by key: how many slots this replica judged, under mu
	hadSlots    map[string]bool       // locks judged by slots until every slot key is seen gone (judgedBySlots), under mu
}

// Reconcile runs one turn of the term lifecycle for a lock: gather (etcd, candidates, the
// holder's evidence, this replica's clocks), decide (a pure function), apply (the guarded
// etcd writes), then publish status once.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	r.init()
	key := lockKey(req.Namespace, req.Name)
	var lock lockv1.DistributedLock
	if err := r.Client.Get(ctx, req.NamespacedName, &lock); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(key)
			return ctrl.Result{}, r.dropOrphan(ctx, req.NamespacedName, key)
		}
		return ctrl.Result{}, fmt.Errorf("get lock: %w", err)
	}
	if !clusterScoped(&lock) {
		// A Global lock is the global reconciler's (global_scope.go): no status write, no
		// finalizer, no engine key of this cluster's, whatever queued it.
		return ctrl.Result{}, nil
	}
	if !r.Election.Valid() {
		return ctrl.Result{}, ErrElectionLost
	}
	deleting := lock.DeletionTimestamp != nil
	if deleting && !controllerutil.ContainsFinalizer(&lock, Finalizer) {
		return ctrl.Result{}, nil
	}
	if deleting && lock.Annotations[SkipEtcdCleanupAnnotation] == "true" {
		// Before the epoch check: a replaced etcd (a regressed epoch) is what it is for.
		return ctrl.Result{}, r.dropFinalizer(ctx, &lock)
	}
	if epoch := r.Election.Token(); epoch < lock.Status.ControllerEpoch {
		// The API server refuses a lower epoch, so this can only be reported, not published.
		r.regression(ctx, &lock, key, fmt.Sprintf("controller epoch %d is below status.controllerEpoch %d: etcd was restored or replaced", epoch, lock.Status.ControllerEpoch))
		return ctrl.Result{RequeueAfter: regressionRecheck}, nil
	}
	fresh := false // the lock as the API server has it now, not as the cache had it
	if !deleting && controllerutil.AddFinalizer(&lock, Finalizer) {
		// Before any grant, so that deleting the lock always goes through the term's end.
		// The turn goes on with the object the update returned (its resourceVersion is the
		// status write's precondition): a new lock is granted in one reconcile, not two.
		if err := r.Client.Update(ctx, &lock); err != nil {
			if apierrors.IsConflict(err) {
				return ctrl.Result{RequeueAfter: 50 * time.Millisecond}, nil
			}
			return ctrl.Result{}, fmt.Errorf("add finalizer: %w", err)
		}
		r.mem.wrote(key, lock.UID, lock.ResourceVersion)
		fresh = true
	}

	if r.judgedBySlots(&lock) {
		return r.reconcileSlots(ctx, &lock, fresh)
	}
	t, res, err := r.runTurn(ctx, &lock, fresh, -1)
	if err != nil || t == nil {
		return res, err
	}
	if t.dropFinalizer {
		return ctrl.Result{}, r.dropFinalizer(ctx, t.lock)
	}
	return ctrl.Result{RequeueAfter: t.requeue}, nil
}

// runTurn runs one turn of the lock (slot -1) or of one of its slots, and publishes its
// status. It returns the turn when it published; otherwise nil, with the result and error
// Reconcile returns. A turn that needs the lock read uncached reads it and runs again.
func (r *Reconciler) runTurn(ctx context.Context, lock *lockv1.DistributedLock, fresh bool, slot int32) (*turn, ctrl.Result, error) {
	t, err := r.turn(ctx, lock, fresh, slot)
	if errors.Is(err, errStaleLock) {
		var live lockv1.DistributedLock
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(lock), &live); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, ctrl.Result{}, nil // deleted meanwhile; its event brings the next turn
			}
			return nil, ctrl.Result{}, fmt.Errorf("get lock uncached: %w", err)
		}
		if slot < 0 {
			*lock = live
		} else {
			lock = &live
		}
		t, err = r.turn(ctx, lock, true, slot)
	}
	switch {
	case t != nil && t.gatherErr != nil:
		return nil, ctrl.Result{}, t.etcdDown(ctx, t.gatherErr)
	case errors.Is(err, lease.ErrGuardFailed):
		return nil, ctrl.Result{}, fmt.Errorf("%w: %w", ErrElectionLost, err)
	case apierrors.IsConflict(err):
		return nil, ctrl.Result{RequeueAfter: 50 * time.Millisecond}, nil // the epoch write lost a race: read again
	case err != nil:
		return nil, ctrl.Result{}, err
	}
	if err := t.publish(ctx); err != nil {
		if t.cachedGrant != 0 {
			// A grant decided on the cache whose status write failed: the cache may have been
			// stale (the lock deleted, created again, suspended, or written since). Delete the
			// grant now; the next turn decides on the lock read again.
			if derr := t.discardCachedGrant(ctx); derr != nil {
				return nil, ctrl.Result{}, fmt.Errorf("%w (and %w)", err, derr) // the next turn's decideUnpublished settles it
			}
			if apierrors.IsNotFound(err) {
				return nil, ctrl.Result{}, nil // the lock is gone: nothing to publish
			}
		}
		if apierrors.IsConflict(err) {
			return nil, ctrl.Result{RequeueAfter: 50 * time.Millisecond}, nil // the next turn re-reads both
		}
		return nil, ctrl.Result{}, err
	}
	return t, ctrl.Result{}, nil
}

// turn gathers, decides and applies one turn on lock (read from the cache, or uncached with
// fresh), or on its slot slot (>= 0; slots.go); it returns errStaleLock when a decision
// needs the lock read uncached first.
func (r *Reconciler) turn(ctx context.Context, lock *lockv1.DistributedLock, fresh bool, slot int32) (*turn, error) {
	obj := lockKey(lock.Namespace, lock.Name)
	t := &turn{r: r, lock: lock, key: obj, objKey: obj, trigger: time.Now(), fresh: fresh}
	if slot >= 0 {
		t.lock, t.slot = slotView(lock, slot)
		t.key = slotKey(obj, slot)
	}
	t.st = *t.lock.Status.DeepCopy()
	log.FromContext(ctx).V(1).Info("turn", "lock", t.key, "resourceVersion", lock.ResourceVersion, "fresh", fresh)
	if err := t.gather(ctx); err != nil {
		t.gatherErr = err
		return t, nil
	}
	rctx, cancel := context.WithTimeout(ctx, 2*etcdTimeout)
	defer cancel()
	return t, t.run(rctx)
}

func (r *Reconciler) init() {
	r.once.Do(func() {
		r.mem = newMemory()
		r.batch = newGrantBatcher(r.Grants, func() clientv3.Cmp { return r.Election.IsOwner() })
		r.regressed = map[string]string{}
		r.slots, r.hadSlots = map[string]int32{}, map[string]bool{}
		r.phases = map[string]lockv1.Phase{}
		r.phaseCount = map[lockv1.Phase]int{}
		if r.CountDebounce == 0 {
			r.CountDebounce = DefaultCountDebounce
		}
		if r.GrantEventRate <= 0 {
			r.GrantEventRate = DefaultGrantEventRate
		}
		if r.GrantEventBurst <= 0 {
			r.GrantEventBurst = DefaultGrantEventBurst
		}
		r.grantEvents = newEventBudget(r.GrantEventRate, r.GrantEventBurst, time.Now)
	})
}

// Healthy reports whether every lock is free of token regression, for /readyz.
func (r *Reconciler) Healthy() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for key, why := range r.regressed {
		return fmt.Errorf("token regression on %s (and %d more): %s", key, len(r.regressed)-1, why)
	}
	return nil
}

// forget drops what this replica remembers of a deleted lock, and of each of its slots.
func (r *Reconciler) forget(key string) {
	r.mu.Lock()
	n := max(r.slots[key], 1)
	delete(r.slots, key)
	delete(r.hadSlots, key)
	r.mu.Unlock()
	for i := range n {
		r.forgetKey(slotKey(key, i))
	}
}

// forgetKey drops what this replica remembers of one engine key of a lock.
func (r *Reconciler) forgetKey(key string) {
	r.mem.forget(key)
	r.routes.forget(key)
	r.mu.Lock()
	delete(r.regressed, key)
	delete(r.granted, key)
	r.Metrics.setPhases(r.setPhase(key, "")) // under r.mu: gauges set in the order the counts changed
	r.mu.Unlock()
}

// dropOrphan deletes a grant left in etcd under the name of a lock the cache says is gone,
// once an uncached read confirms it: a grant decided on a cached copy of a lock deleted
// meanwhile (firstGrant), whose discard failed, or a grant left by skip-etcd-cleanup. A lock
// that no longer exists is led by no one, and nothing else would ever delete its key,
// which the grant lease would keep alive. The common case (no key) costs one etcd read.
func (r *Reconciler) dropOrphan(ctx context.Context, name types.NamespacedName, key string) error {
	ictx, cancel := context.WithTimeout(ctx, etcdTimeout)
	defer cancel()
	slots, err := r.Engine.LockKeys(ictx, key+slotInfix)
	if err != nil {
		r.Metrics.etcdError("inspect")
		return fmt.Errorf("list the slot keys of the deleted lock %s: %w", key, err)
	}
	for _, k := range append([]string{key}, slots...) {
		if err := r.dropOrphanKey(ctx, name, k); err != nil {
			return err
		}
	}
	return nil
}

// dropOrphanKey deletes the grant of one key (the lock's own, or a slot's) of a lock the
// cache says is gone, once an uncached read confirms it.
func (r *Reconciler) dropOrphanKey(ctx context.Context, name types.NamespacedName, key string) error {
	ictx, cancel := context.WithTimeout(ctx, etcdTimeout)
	defer cancel()
	h, err := r.Engine.Inspect(ictx, key)
	if err != nil {
		r.Metrics.etcdError("inspect")
		return fmt.Errorf("read %s of a deleted lock: %w", key, err)
	}
	if h.Token == 0 {
		return nil
	}
	if !r.Election.Valid() {
		return ErrElectionLost // retried, as any turn that would write etcd
	}
	// Read after the key: a lock that exists now may have published this grant; one created
	// later cannot have (its turns come after this one: the workqueue runs one per lock).
	var live lockv1.DistributedLock
	switch err := r.APIReader.Get(ctx, name, &live); {
	case err == nil:
		return nil // the cache lags; the lock's event brings its turn
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("get lock uncached: %w", err)
	}
	err = r.Engine.Release(ictx, key, h.Token, lease.WithGuard(r.Election.IsOwner()))
	if err != nil && !errors.Is(err, lease.ErrNotHeld) {
		r.Metrics.etcdError("release")
		return fmt.Errorf("delete the grant (token %d) of the deleted lock %s: %w", h.Token, key, err)
	}
	log.FromContext(ctx).Info("deleted the etcd grant of a lock that no longer exists", "lock", key, "token", h.Token)
	return nil
}

func (r *Reconciler) dropFinalizer(ctx context.Context, lock *lockv1.DistributedLock) error {
	if controllerutil.RemoveFinalizer(lock, Finalizer) {
		if err := r.Client.Update(ctx, lock); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("remove finalizer: %w", err)
		}
	}
	r.mem.forget(lockKey(lock.Namespace, lock.Name))
	return nil
}

// regression reports a token regression: nothing is granted for the lock until an operator
// restores etcd with a bumped revision.
func (r *Reconciler) regression(ctx context.Context, lock *lockv1.DistributedLock, key, why string) {
	r.mu.Lock()
	_, known := r.regressed[key]
	r.regressed[key] = why
	r.mu.Unlock()
	if !known {
		r.Metrics.tokenRegression()
		r.Recorder.Eventf(lock, nil, corev1.EventTypeWarning, lockv1.ReasonTokenRegression, "Refuse", "%s; granting nothing until etcd is restored with --bump-revision", why)
		log.FromContext(ctx).Info("token regression", "lock", key, "why", why)
	}
}

func (r *Reconciler) clearRegression(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.regressed, key)
}

// setPhase records the lock's published phase ("": forgotten) and returns a copy of the
// counts by phase, kept as they change (counting every lock on every acknowledgement cost
// O(locks) each, 11% of the manager's CPU while 10,000 locks were granted); r.mu must be
// held.
func (r *Reconciler) setPhase(key string, p lockv1.Phase) map[lockv1.Phase]int {
	if old, ok := r.phases[key]; ok {
		r.phaseCount[old]--
	}
	if p == "" {
		delete(r.phases, key)
	} else {
		r.phases[key] = p
		r.phaseCount[p]++
	}
	return maps.Clone(r.phaseCount)
}

// wake queues the lock named by an engine key ("<namespace>/<name>", or a slot's key
// "<namespace>/<name>/slot/<i>"); other keys (the election, the grant lease record) are not
// locks.
func (r *Reconciler) wake(key string) {
	ns, name, ok := keyLock(key)
	if !ok {
		return
	}
	r.mu.Lock()
	q := r.queue
	r.mu.Unlock()
	if q != nil {
		q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}})
	}
}
