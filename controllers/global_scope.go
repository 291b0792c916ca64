package controllers

import (
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// Which reconciler owns a lock. spec.scope is immutable (a CEL rule), so a lock belongs to one
// of them for its whole life: the in-cluster reconciler (reconciler.go) never reads, writes
// or grants a Global lock, whose status the CRD forbids it to write in its form (holderUID)
// and whose grant lives in the shared etcd, not under this cluster's engine prefix; the
// global reconciler (global_reconciler.go) handles only Global locks.

// clusterScoped reports whether the in-cluster reconciler owns the lock.
func clusterScoped(l *lockv1.DistributedLock) bool { return l != nil && !l.Spec.IsGlobal() }

// globalScoped reports whether the global reconciler owns the lock.
func globalScoped(l *lockv1.DistributedLock) bool { return l != nil && l.Spec.IsGlobal() }

// clusterScopedLocks passes the events of cluster-scoped locks only.
func clusterScopedLocks() predicate.TypedPredicate[*lockv1.DistributedLock] {
	return predicate.NewTypedPredicateFuncs(clusterScoped)
}

// globalScopedLocks passes the events of Global locks only.
func globalScopedLocks() predicate.TypedPredicate[*lockv1.DistributedLock] {
	return predicate.NewTypedPredicateFuncs(globalScoped)
}
