package controllers

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// One contender per global name in a cluster (docs/global.md, finding F2): of the Global
// locks of this cluster with one spec.globalName, in any namespace, only the oldest
// (creationTimestamp, then UID) contends; the others get Held=False DuplicateGlobalName and
// are never granted. The API server cannot enforce the uniqueness atomically (two locks
// created at once both look alone in a lagging cache), so this only keeps the common case
// quiet: the guard is the object UID in K's and T's records, which every confirmation,
// round and R8 succession compares (ownsGrant).

// oldestOf returns the oldest of locks (nil for none).
func oldestOf(locks []*lockv1.DistributedLock) *lockv1.DistributedLock {
	var oldest *lockv1.DistributedLock
	for _, l := range locks {
		if oldest == nil || older(l, oldest) {
			oldest = l
		}
	}
	return oldest
}

// older orders locks by creationTimestamp, then UID.
func older(a, b *lockv1.DistributedLock) bool {
	ta, tb := a.CreationTimestamp, b.CreationTimestamp
	if !ta.Equal(&tb) {
		return ta.Before(&tb)
	}
	return a.UID < b.UID
}

// contends reports whether lock is the oldest Global lock of its globalName in the cache.
func contends(ctx context.Context, c client.Reader, lock *lockv1.DistributedLock) (bool, error) {
	locks, err := locksOfGlobalName(ctx, c, lock.Spec.GlobalName)
	if err != nil {
		return false, err
	}
	locks = append(locks, lock) // the cache may not have it yet
	return oldestOf(locks).UID == lock.UID, nil
}

// locksOfGlobalName lists the cached Global locks with globalName, in every namespace the
// cache sees. The result is the cache's: callers must not modify it.
func locksOfGlobalName(ctx context.Context, c client.Reader, globalName string) ([]*lockv1.DistributedLock, error) {
	var list lockv1.DistributedLockList
	if err := c.List(ctx, &list, client.MatchingFields{lockGlobalNameIndex: globalName}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list the locks of global name %s: %w", globalName, err)
	}
	out := make([]*lockv1.DistributedLock, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	return out, nil
}
