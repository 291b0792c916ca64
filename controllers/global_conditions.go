package controllers

// Condition reasons of Global locks (docs/global.md), on the Held condition.
const (
	// ReasonClusterNameUnset: the manager runs without --cluster-name, so it has no identity
	// in the shared etcd and grants no Global lock.
	ReasonClusterNameUnset = "ClusterNameUnset"
	// ReasonDuplicateGlobalName: an older lock in this cluster has the same spec.globalName and
	// contends for it; this one does not (docs/global.md, finding F2).
	ReasonDuplicateGlobalName = "DuplicateGlobalName"
	// ReasonHeldElsewhere: another cluster holds the global term (Held=True is for a term held
	// here; the phase is Held either way).
	ReasonHeldElsewhere = "HeldByOtherCluster"
	// ReasonGlobalWaiting: the grant is free and this cluster waits the lock delay before it
	// takes it (rule R7).
	ReasonGlobalWaiting = "WaitingForGlobalGrant"
	// ReasonGlobalUnavailable: the shared etcd did not answer; nothing is granted meanwhile.
	ReasonGlobalUnavailable = "GlobalEtcdUnreachable"
)
