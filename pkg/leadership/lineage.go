package leadership

import (
	"sync/atomic"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// Token lineages. A fencing token is a revision of one etcd cluster: a Cluster lock's of its
// cluster's engine etcd, a Global lock's of the shared etcd of global locks (docs/global.md).
// Tokens of one lineage are ordered (a later grant's is higher); tokens of two are not. What
// this process remembers by number (the highest token it released, abandoned, or led) is
// therefore kept per lineage, and compared only with tokens of the same lineage: spec.scope is
// immutable, so a lock moves between scopes only by being deleted and created again under its
// name, and the new object's grants continue the other lineage (a pod that abandoned Cluster
// token 5000 leads the new Global lock's token 200).
//
// Why per scope and not per lock object (UID): within one lineage the memory must survive a
// delete and re-create. A Cluster lock deleted (with skip-etcd-cleanup, or before the
// controller's clean-up) leaves its grant in the engine's etcd; the controller discards such a
// grant for the new object only when its record names another object (controllers
// decideUnpublished: record.Lock != the object's UID), and adopts one whose record names no
// object (record.Lock empty: an older controller's record, or a foreign one), publishing the
// old object's holder and token on the new object. So a re-created Cluster object can show,
// Held by this pod, a token this process abandoned on the old object (another writer of the
// pod may act under it) or released: keyed by UID, that memory would be gone, and the pod
// would lead it. The same holds of a Global lock's shared-etcd grant left by a deleted
// object. Keyed by scope, the re-created object is judged against every token of its
// lineage, as one object's tokens always were: a grant made for it after the old object's
// is higher than every token of the lineage this process saw, so it is led as usual, and an
// adopted old grant is not. (scope, UID) would lose the memory the same way as UID alone.
// Not covered: a lineage whose etcd is replaced (restored from backup, or the shared etcd of
// global locks swapped for another) behind a running process; DESIGN.md's token-regression
// rules apply.
type lineage uint8

const (
	lineageCluster lineage = iota // the cluster's engine etcd (spec.scope Cluster)
	lineageGlobal                 // the shared etcd of global locks (spec.scope Global)
	lineages                      // how many lineages there are
)

// lineageOf is the lineage of lock's tokens; a nil lock's is the Cluster lineage.
func lineageOf(lock *lockv1.DistributedLock) lineage {
	if lock != nil && lock.Spec.IsGlobal() {
		return lineageGlobal
	}
	return lineageCluster
}

// String names the lineage for logs.
func (l lineage) String() string {
	if l == lineageGlobal {
		return "global"
	}
	return "cluster"
}

// tokenMark is the highest token of each lineage that something happened to (0: none). Safe
// for concurrent use.
type tokenMark struct{ by [lineages]atomic.Int64 }

// load is the mark of lineage l.
func (m *tokenMark) load(l lineage) int64 { return m.by[l].Load() }

// raise sets the mark of lineage l to token when token is higher.
func (m *tokenMark) raise(l lineage, token int64) {
	for {
		old := m.by[l].Load()
		if token <= old || m.by[l].CompareAndSwap(old, token) {
			return
		}
	}
}

// reset puts the mark of lineage l back to 0 when it is token (a release refused or not sent:
// the token may be led again).
func (m *tokenMark) reset(l lineage, token int64) { m.by[l].CompareAndSwap(token, 0) }
