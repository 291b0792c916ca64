package controllers

import (
	"context"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// probeEtcd reads one key linearizably every interval and, when etcd's reachability
// changes, wakes every lock so that EtcdAvailable follows it even for locks in steady state
// (which otherwise see no event). It is a read: steady state still writes nothing.
func (r *Reconciler) probeEtcd(ctx context.Context, interval time.Duration) {
	up := true
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, min(interval, 2*time.Second))
		_, err := r.Engine.Inspect(pctx, GrantLeaseKey)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if now := err == nil; now != up {
			up = now
			r.wakeAll(ctx)
		}
	}
}

// wakeAll queues every lock in the cache.
func (r *Reconciler) wakeAll(ctx context.Context) {
	r.mu.Lock()
	q := r.queue
	r.mu.Unlock()
	if q == nil {
		return
	}
	var locks lockv1.DistributedLockList
	if err := r.Client.List(ctx, &locks); err != nil {
		return
	}
	for i := range locks.Items {
		q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&locks.Items[i])})
	}
}
