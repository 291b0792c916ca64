package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// NewController builds the controller of Global locks without adding it to the manager: it
// runs only while this replica holds the election (Active.lead), beside the in-cluster one.
// It watches Global locks, the pods they select or name as holder, and (Active.lead) the
// global keys in the shared etcd, whose changes wake the locks of their global name.
func (r *GlobalReconciler) NewController(mgr manager.Manager, maxConcurrent int) (controller.Controller, error) {
	r.init()
	c, err := newEpochController(mgr, "globallock", r, maxConcurrent)
	if err != nil {
		return nil, err
	}
	cache := mgr.GetCache()
	if err := c.Watch(source.Kind(cache, &lockv1.DistributedLock{}, &handler.TypedEnqueueRequestForObject[*lockv1.DistributedLock]{},
		globalScopedLocks())); err != nil {
		return nil, err
	}
	if r.Cluster.Name != "" {
		if err := c.Watch(source.Kind(cache, &corev1.Pod{}, handler.TypedEnqueueRequestsFromMapFunc(r.podToLocks))); err != nil {
			return nil, err
		}
	}
	if err := c.Watch(queueSource(&r.mu, &r.queue)); err != nil {
		return nil, err
	}
	return c, nil
}

// podToLocks maps a pod event to the Global locks that select it or name it as holder.
func (r *GlobalReconciler) podToLocks(ctx context.Context, pod *corev1.Pod) []reconcile.Request {
	locks, err := locksFor(ctx, r.Client, pod)
	if err != nil {
		log.FromContext(ctx).Error(err, "map pod to Global locks", "pod", client.ObjectKeyFromObject(pod))
		return nil
	}
	var reqs []reconcile.Request
	for _, l := range locks {
		if globalScoped(l) {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(l)})
		}
	}
	return reqs
}

// wakeName queues the Global locks of globalName (a change of its K or T).
func (r *GlobalReconciler) wakeName(ctx context.Context, globalName string) {
	locks, err := locksOfGlobalName(ctx, r.Client, globalName)
	if err != nil {
		return
	}
	r.enqueue(locks)
}

// wakeAll queues every Global lock in the cache.
func (r *GlobalReconciler) wakeAll(ctx context.Context) {
	var list lockv1.DistributedLockList
	if err := r.Client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return
	}
	locks := make([]*lockv1.DistributedLock, 0, len(list.Items))
	for i := range list.Items {
		if globalScoped(&list.Items[i]) {
			locks = append(locks, &list.Items[i])
		}
	}
	r.enqueue(locks)
}

func (r *GlobalReconciler) enqueue(locks []*lockv1.DistributedLock) {
	r.mu.Lock()
	q := r.queue
	r.mu.Unlock()
	if q == nil {
		return
	}
	for _, l := range locks {
		q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(l)})
	}
}
