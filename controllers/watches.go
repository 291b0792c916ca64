package controllers

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/pkg/eligibility"
)

// NewController builds the DistributedLock controller without adding it to the manager: it
// is started only while this replica holds the election (see Active). It watches locks
// (status included), the pods their selectors match, and nodes (the out-of-service taint);
// nothing polls.
func (r *Reconciler) NewController(mgr manager.Manager, maxConcurrent int) (controller.Controller, error) {
	r.init()
	c, err := newEpochController(mgr, "distributedlock", r, maxConcurrent)
	if err != nil {
		return nil, err
	}
	cache := mgr.GetCache()
	if err := c.Watch(source.Kind(cache, &lockv1.DistributedLock{}, &handler.TypedEnqueueRequestForObject[*lockv1.DistributedLock]{},
		clusterScopedLocks(), predicate.TypedFuncs[*lockv1.DistributedLock]{UpdateFunc: r.notOwnWrite})); err != nil {
		return nil, err
	}
	if err := c.Watch(source.Kind(cache, &corev1.Pod{}, handler.TypedEnqueueRequestsFromMapFunc(r.podToLocks))); err != nil {
		return nil, err
	}
	if err := c.Watch(source.Kind(cache, &corev1.Node{}, handler.TypedEnqueueRequestsFromMapFunc(r.nodeToLocks))); err != nil {
		return nil, err
	}
	if err := r.watchRouting(c, cache); err != nil {
		return nil, err
	}
	// The queue, for the lock keys that change in etcd (see Active.lead, Engine.WatchLocks).
	if err := c.Watch(queueSource(&r.mu, &r.queue)); err != nil {
		return nil, err
	}
	return c, nil
}

// queueSource is a source that hands the controller's queue to *queue (under mu), for the
// wakes that come from etcd watches.
func queueSource(mu *sync.Mutex, queue *workqueue.TypedRateLimitingInterface[reconcile.Request]) source.Source {
	return source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		mu.Lock()
		defer mu.Unlock()
		*queue = q
		return nil
	})
}

// newEpochController builds an unmanaged controller of one election epoch (several run in a
// process's life) named name, for r.
func newEpochController(mgr manager.Manager, name string, r reconcile.Reconciler, maxConcurrent int) (controller.Controller, error) {
	return controller.NewUnmanaged(name, controller.Options{
		Reconciler:              r,
		MaxConcurrentReconciles: max(1, maxConcurrent),
		RateLimiter:             workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](100*time.Millisecond, 30*time.Second),
		SkipNameValidation:      ptr.To(true), // one per epoch in a process's life
		Logger:                  mgr.GetLogger().WithValues("controller", name),
		CacheSyncTimeout:        10 * time.Minute, // the first list of a large cluster's pods can be slow
	})
}

// notOwnWrite filters out the watch event of this replica's own write of a lock: the turn
// that wrote it already asked for the next turn it needs (without this, every grant cost a
// second reconcile). Any other change of the lock, a hand edit of its status included, is
// reconciled.
func (r *Reconciler) notOwnWrite(e event.TypedUpdateEvent[*lockv1.DistributedLock]) bool {
	l := e.ObjectNew
	return !r.mem.ownWrite(lockKey(l.Namespace, l.Name), l.UID, l.ResourceVersion)
}

// podToLocks maps a pod event to the locks that select the pod or name it as holder (of
// any slot). For a lock whose published holder it is (of its slot), it remembers an attested termination (so that a pod
// deleted right after its containers stopped still counts as attested in that term) and
// drops the memory when the event shows a container running; an event that shows the holder
// not eligible restarts its continuous eligibility.
func (r *Reconciler) podToLocks(ctx context.Context, pod *corev1.Pod) []reconcile.Request {
	locks, err := locksFor(ctx, r.Client, pod)
	if err != nil {
		log.FromContext(ctx).Error(err, "map pod to locks", "pod", client.ObjectKeyFromObject(pod))
		return nil
	}
	stopped, running := attestedTerminated(pod, nil), anyRunning(pod)
	reqs := make([]reconcile.Request, 0, len(locks))
	for _, l := range locks {
		if !clusterScoped(l) {
			continue // the global reconciler's (global_watches.go)
		}
		if i := l.Status.HeldSlot(pod.UID); i >= 0 {
			key, token := slotKey(lockKey(l.Namespace, l.Name), i), l.Status.SlotView(i).FencingToken
			switch {
			case stopped:
				r.mem.attest(key, l.UID, pod.UID, token)
			case running:
				r.mem.unattest(key, l.UID, pod.UID)
			}
			if !eligibility.Eligible(pod) {
				// Continuous eligibility is broken by every event that shows otherwise, even
				// one that a later event overtakes before the reconcile runs.
				r.mem.holderEligibleFor(key, l.UID, false)
			}
		}
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(l)})
	}
	return reqs
}

func selects(l *lockv1.DistributedLock, pod *corev1.Pod) bool {
	if l.Spec.Candidates.Selector == nil {
		return false
	}
	sel, err := l.Spec.Candidates.Selector.AsSelector()
	return err == nil && sel.Matches(labels.Set(pod.Labels))
}

// nodeToLocks maps an out-of-service taint on a node to the locks whose holder runs there.
func (r *Reconciler) nodeToLocks(ctx context.Context, node *corev1.Node) []reconcile.Request {
	tainted := false
	for _, t := range node.Spec.Taints {
		tainted = tainted || t.Key == OutOfServiceTaint
	}
	if !tainted {
		return nil
	}
	var locks lockv1.DistributedLockList
	if err := r.Client.List(ctx, &locks); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range locks.Items {
		l := &locks.Items[i]
		if !clusterScoped(l) {
			continue
		}
		for i := range l.Status.SlotCount() {
			holder := l.Status.SlotView(i).Holder
			if holder == "" {
				continue
			}
			var pod corev1.Pod
			if err := r.Client.Get(ctx, client.ObjectKey{Namespace: l.Namespace, Name: holder}, &pod); err == nil && pod.Spec.NodeName == node.Name {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(l)})
				break
			}
		}
	}
	return reqs
}
