package controllers

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
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
	// Finalizer holds a DistributedLock until its term has ended and its etcd key is gone.
	Finalizer = "lockwarden.io/release"
	// SkipEtcdCleanupAnnotation set to "true" on a lock being deleted lets it go without
	// ending its term in etcd: for when etcd is gone for good. The grant, if any, expires
	// with the grant lease.
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

// errDeposed means this replica lost its election; it must stop reconciling.
var errDeposed = errors.New("controller election lost")

// Reconciler reconciles DistributedLocks while this replica holds the controller election.
type Reconciler struct {
	// Client reads locks, pods and nodes from the cache and writes status and finalizers.
	Client client.Client
	// APIReader is uncached: a holder's absence is confirmed by a GET, never by the cache.
	APIReader client.Reader
	// Recorder emits an Event on every grant and term end.
	Recorder events.EventRecorder
	// Engine reads lock keys linearizably.
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

	mem        *memory
	watchers   sync.WaitGroup // one per kept handle: wakes the lock when its grant ends
	mu         sync.Mutex
	queue      workqueue.TypedRateLimitingInterface[reconcile.Request]
	handles    map[string]*lease.Lock // grants this replica holds a *lease.Lock for, by key
	regressed  map[string]string      // locks in TokenRegression, by key: the reason
	phases     map[string]lockv1.Phase
	phaseCount map[lockv1.Phase]int
}

// Reconcile runs one turn of the term lifecycle for a lock: read etcd, read the candidates,
// decide, write etcd (guarded), then publish status once.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	r.init()
	var lock lockv1.DistributedLock
	if err := r.Client.Get(ctx, req.NamespacedName, &lock); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(lockKey(req.Namespace, req.Name))
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("get lock: %w", err)
	}
	if !r.Election.Valid() {
		return ctrl.Result{}, errDeposed
	}
	key := lockKey(lock.Namespace, lock.Name)
	if epoch := r.Election.Token(); epoch < lock.Status.ControllerEpoch {
		// The API server refuses a lower epoch, so this can only be reported, not published.
		r.regression(ctx, &lock, key, fmt.Sprintf("controller epoch %d is below status.controllerEpoch %d: etcd was restored or replaced", epoch, lock.Status.ControllerEpoch))
		return ctrl.Result{RequeueAfter: regressionRecheck}, nil
	}
	deleting := lock.DeletionTimestamp != nil
	if deleting && !controllerutil.ContainsFinalizer(&lock, Finalizer) {
		return ctrl.Result{}, nil
	}
	if deleting && lock.Annotations[SkipEtcdCleanupAnnotation] == "true" {
		return ctrl.Result{}, r.dropFinalizer(ctx, &lock)
	}
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
	}

	t := &turn{r: r, lock: &lock, key: key, st: *lock.Status.DeepCopy(), trigger: time.Now(), log: log.FromContext(ctx)}
	ictx, cancel := context.WithTimeout(ctx, etcdTimeout)
	h, err := r.Engine.Inspect(ictx, key)
	cancel()
	if err != nil {
		r.Metrics.etcdError("inspect")
		return ctrl.Result{}, t.etcdDown(ctx, err)
	}
	t.g, t.rev = grantFrom(h), h.Revision
	t.readCandidates(ctx)
	rctx, cancel := context.WithTimeout(ctx, 2*etcdTimeout)
	err = t.run(rctx)
	cancel()
	if err != nil {
		if errors.Is(err, lease.ErrGuardFailed) {
			return ctrl.Result{}, errDeposed
		}
		return ctrl.Result{}, err
	}
	if err := t.publish(ctx); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: 50 * time.Millisecond}, nil // the next turn re-reads both
		}
		return ctrl.Result{}, err
	}
	if t.dropFinalizer {
		return ctrl.Result{}, r.dropFinalizer(ctx, &lock)
	}
	return ctrl.Result{RequeueAfter: t.requeue}, nil
}

func (r *Reconciler) init() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mem == nil {
		r.mem = newMemory()
		r.handles = map[string]*lease.Lock{}
		r.regressed = map[string]string{}
		r.phases = map[string]lockv1.Phase{}
		r.phaseCount = map[lockv1.Phase]int{}
	}
	if r.CountDebounce == 0 {
		r.CountDebounce = DefaultCountDebounce
	}
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

// forget drops what this replica remembers of a deleted lock.
func (r *Reconciler) forget(key string) {
	r.mu.Lock()
	delete(r.handles, key)
	delete(r.regressed, key)
	r.Metrics.setPhases(r.setPhase(key, "")) // under r.mu: gauges set in the order the counts changed
	r.mu.Unlock()
}

func (r *Reconciler) dropFinalizer(ctx context.Context, lock *lockv1.DistributedLock) error {
	if controllerutil.RemoveFinalizer(lock, Finalizer) {
		if err := r.Client.Update(ctx, lock); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("remove finalizer: %w", err)
		}
	}
	r.mem.forget(lock.UID)
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

// turn is one reconcile of one lock: what was read, and the status to publish.
type turn struct {
	r    *Reconciler
	lock *lockv1.DistributedLock
	key  string
	log  interface {
		Info(msg string, kv ...any)
	}
	trigger time.Time

	g   grant // the key as read at the start of the turn, updated by this turn's writes
	rev int64 // etcd revision of that read

	selector labels.Selector
	selErr   error
	pods     []corev1.Pod // pods matched by the selector, from the cache

	st            lockv1.DistributedLockStatus // status to publish
	regressed     string                       // why the lock is in TokenRegression, if it is
	requeue       time.Duration                // the soonest this turn wants to run again
	onAck         []func()                     // run once the status write is acknowledged
	events        []func()                     // emitted once the status write is acknowledged
	dropFinalizer bool
}

// after asks for another turn within d.
func (t *turn) after(d time.Duration) {
	if d <= 0 {
		d = 10 * time.Millisecond
	}
	if t.requeue == 0 || d < t.requeue {
		t.requeue = d
	}
}

// event queues an Event for after the status write.
func (t *turn) event(related *corev1.Pod, typ, reason, action, format string, args ...any) {
	t.events = append(t.events, func() {
		var rel *corev1.Pod
		if related != nil {
			rel = related
		}
		if rel == nil {
			t.r.Recorder.Eventf(t.lock, nil, typ, reason, action, format, args...)
			return
		}
		t.r.Recorder.Eventf(t.lock, rel, typ, reason, action, format, args...)
	})
}

func (t *turn) readCandidates(ctx context.Context) {
	sel := t.lock.Spec.Candidates.Selector
	if sel == nil {
		t.selErr = errors.New("spec.candidates.selector is not set")
		return
	}
	t.selector, t.selErr = metav1.LabelSelectorAsSelector(sel)
	if t.selErr != nil {
		return
	}
	pods, err := candidatePods(ctx, t.r.Client, t.lock, t.selector)
	if err != nil {
		t.selErr = fmt.Errorf("list candidate pods: %w", err)
		return
	}
	t.pods = pods
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
	setHeldCondition(&t.st, gen)
	setCondition(&t.st, gen, lockv1.ConditionEtcdAvailable, true, lockv1.ReasonEtcdReachable, "etcd answered the last linearizable read")
	if t.regressed != "" {
		setCondition(&t.st, gen, lockv1.ConditionValid, false, lockv1.ReasonTokenRegression, t.regressed)
	} else {
		v := judge(&t.lock.Spec, t.selErr, t.pods)
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
		count = countEligible(t.pods)
	}
	t.st.EligibleCandidates = old.EligibleCandidates
	t.st.ControllerEpoch = old.ControllerEpoch
	changed := !equality.Semantic.DeepEqual(old, &t.st)
	countChanged := count != old.EligibleCandidates
	if countChanged {
		if due, wait := t.r.mem.countWriteDue(t.lock.UID, t.r.CountDebounce); due || changed {
			t.st.EligibleCandidates = count
		} else {
			t.after(wait)
			countChanged = false
		}
	}
	if !changed && !countChanged {
		t.acknowledged()
		return nil
	}
	if !t.r.Election.Valid() {
		return errDeposed
	}
	t.st.ControllerEpoch = max(old.ControllerEpoch, t.r.Election.Token())
	t.lock.Status = t.st
	if err := t.r.Client.Status().Update(ctx, t.lock); err != nil {
		return fmt.Errorf("update status: %w", err)
	}
	if countChanged {
		t.r.mem.countWrittenNow(t.lock.UID)
	}
	t.acknowledged()
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
	t.r.mu.Lock()
	t.r.Metrics.setPhases(t.r.setPhase(t.key, t.st.Phase)) // under r.mu, as in forget
	t.r.mu.Unlock()
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
