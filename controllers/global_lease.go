package controllers

import (
	"time"

	"k8s.io/apimachinery/pkg/types"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// termLease is G, the TTL of the grant lease the term of this object's grant keeps, so its
// round cadence P0 = G/3 and its keepalive deadlines (R4) follow the grant and not
// spec.leaseDurationSeconds, which may change mid-term (raised, the old G would lapse between
// rounds). It is the TTL K's record says it was granted with; a record without it (an older
// manager's) falls back to the status's termLeaseSeconds when the status publishes that token,
// then to the spec. Any other view (no grant, or another's) gives the spec's: the TTL of the
// next grant.
func termLease(spec *lockv1.DistributedLockSpec, st *lockv1.DistributedLockStatus, v lease.GlobalView, cluster lease.ClusterID, uid types.UID) time.Duration {
	if v.Held && v.Grant.Cluster.UID == cluster.UID && v.Grant.Object == string(uid) {
		switch {
		case v.Grant.LeaseSeconds > 0:
			return seconds(v.Grant.LeaseSeconds)
		case st.GlobalToken == v.Token && st.FencingToken == v.Token && st.TermLeaseSeconds > 0:
			return seconds(st.TermLeaseSeconds)
		}
	}
	return seconds(spec.LeaseDurationSeconds)
}
