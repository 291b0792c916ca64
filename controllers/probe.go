package controllers

import (
	"context"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// probeEtcd reads one key linearizably every interval and wakes every lock when etcd's
// reachability changes (so that EtcdAvailable follows it even for locks in steady state,
// which otherwise see no event) or when etcd was replaced under it: another cluster ID or a
// revision that went back, as after a restore from a snapshot. A restore is invisible to the
// lock watch (clientv3 resumes a watch silently from its last revision), and every lock must
// then be read again: its key may be older than its published term (TokenRegression). It is
// a read: steady state still writes nothing.
func (r *Reconciler) probeEtcd(ctx context.Context, interval time.Duration) {
	up := true
	var seen etcdIdentity
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, min(interval, 2*time.Second))
		h, err := r.Engine.Inspect(pctx, GrantLeaseKey)
		cancel()
		if ctx.Err() != nil {
			return
		}
		replaced := err == nil && seen.replacedBy(h.ClusterID, h.Revision)
		if err == nil {
			seen = etcdIdentity{cluster: h.ClusterID, revision: h.Revision}
		}
		if now := err == nil; now != up || replaced {
			up = now
			r.wakeAll(ctx)
		}
	}
}

// etcdIdentity is what the probe last saw of etcd: its cluster ID and revision.
type etcdIdentity struct {
	cluster  uint64
	revision int64
}

// replacedBy reports whether an answer from cluster at revision shows another etcd than the
// one seen: another cluster, or the same one with its revision gone back.
func (s etcdIdentity) replacedBy(cluster uint64, revision int64) bool {
	return s.cluster != 0 && (cluster != s.cluster || revision < s.revision)
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
		if clusterScoped(&locks.Items[i]) {
			q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&locks.Items[i])})
		}
	}
}
