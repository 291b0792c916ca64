package leadership

import (
	"time"

	"k8s.io/apimachinery/pkg/types"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// How this package reads a Global lock (spec.scope Global, docs/global.md). The controller
// publishes a global term so that a reader that knows only cluster-scoped locks never leads it
// (finding F5): status.holderUID stays empty, and the holder pod's UID is in
// status.globalHolderUID, set only while this cluster holds the term. Every in-cluster rule
// (judge, slotOf, the holder-release, Ending, GetLeader) is applied to inClusterView, in which
// holderUID is globalHolderUID; the global bound (globalReads) is applied on top of it, to
// consistent reads only. A term held by another cluster shows phase Held with no holder pod:
// holderUID and holder empty in the view, status.globalCluster naming that cluster.

// inClusterView returns lock as the in-cluster rules read it: lock itself for a lock of scope
// Cluster (and nil), and for a Global lock a copy whose status.holderUID is
// status.globalHolderUID. Whatever a Global lock's holderUID says is ignored (the API server
// refuses to set it): only globalHolderUID names the holder of a global term.
func inClusterView(lock *lockv1.DistributedLock) *lockv1.DistributedLock {
	if lock == nil || !lock.Spec.IsGlobal() {
		return lock
	}
	c := *lock // the status is a value: the caller's lock is not changed
	c.Status.HolderUID = lock.Status.GlobalHolderUID
	return &c
}

// readOf is the globalRead of a consistent read of view (inClusterView of a Global lock) sent
// at sent and answered at received, for pod me.
func readOf(view *lockv1.DistributedLock, sent, received instant, me types.UID) globalRead {
	st := &view.Status
	o := globalRead{
		sent:       sent,
		received:   received,
		consistent: true,
		lockUID:    view.UID,
		round:      st.GlobalRound,
		roundToken: st.GlobalToken,
		delay:      time.Duration(st.GlobalLockDelaySeconds) * time.Second,
	}
	if st.Phase == lockv1.PhaseHeld && me != "" && st.HolderUID == me {
		o.heldToken = st.FencingToken
	}
	return o
}
