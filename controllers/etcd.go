package controllers

import (
	"context"
	"encoding/json"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/types"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// The few engine calls the reconciler makes. pkg/lease returns concrete types; the
// reconciler names only what it uses. A held lock costs the controller no *lease.Lock, no
// goroutine and no watch of its own: one watch of the lock prefix (Engine.WatchLocks) wakes
// the locks whose keys change, and each turn reads its key linearizably.
type (
	// Inspector reads and writes lock keys by token (*lease.Engine).
	Inspector interface {
		Inspect(ctx context.Context, key string) (lease.Holding, error)
		Release(ctx context.Context, key string, token int64, opts ...lease.LockOption) error
		UpdateRecord(ctx context.Context, key string, token int64, record json.RawMessage, opts ...lease.LockOption) error
		Compacted(ctx context.Context, rev int64) (bool, error)
		LockKeys(ctx context.Context, prefix string) ([]string, error)
	}
	// Grants is the shared grant lease every grant hangs on (*lease.Session).
	Grants interface {
		ID() clientv3.LeaseID
		Grant(ctx context.Context, key, holder string, opts ...lease.LockOption) (int64, error)
	}
	// Fence is this replica's election lock (*lease.Lock): its token is the controller epoch
	// and its IsOwner compare guards every transaction the reconciler issues.
	Fence interface {
		Token() int64
		IsOwner() clientv3.Cmp
		Valid() bool
	}
)

const (
	// ElectionKey is the lock name of the controller election.
	ElectionKey = "_controller"
	// GrantLeaseKey is the lock name that records the grant lease: held on the grant lease
	// itself by the elected replica, so the lease's ID is its Holding.Lease.
	GrantLeaseKey = "_grant-lease"
)

// lockKey maps a DistributedLock to its engine lock name. Kubernetes names cannot contain
// "/", so the mapping is injective.
func lockKey(namespace, name string) string { return namespace + "/" + name }

// record is what the controller stores with each grant, beside the holder (the pod UID).
// The term's phase lives here so that etcd records Releasing before status publishes it.
type record struct {
	// Name is the holder pod's name.
	Name string `json:"name"`
	// Phase is Held or Releasing.
	Phase lockv1.Phase `json:"phase"`
	// Reason says why a Releasing term is ending.
	Reason string `json:"reason,omitempty"`
	// Strategy is spec.strategy when the term was granted; a change ends the term.
	Strategy lockv1.Strategy `json:"strategy"`
	// LeaseSeconds is spec.leaseDurationSeconds when the term was granted.
	LeaseSeconds int32 `json:"leaseSeconds"`
	// Epoch is the controller epoch that wrote the record.
	Epoch int64 `json:"epoch"`
	// Containers are the holder's containers when the term was granted (restart.go): a
	// restart of one of them ends the term.
	Containers []containerMark `json:"containers,omitempty"`
	// Ends is the published term this grant ended in the same turn (any end that grants the
	// next holder, the restart fast path's included), so that a turn finding the grant
	// unpublished after its status write was lost adopts it and closes that term with its
	// reason (endsPublished).
	Ends *endedTerm `json:"ends,omitempty"`
	// Lock is the UID of the DistributedLock the grant was decided for.
	Lock types.UID `json:"lock,omitempty"`
	// CachedAt is set on a grant decided on the manager's cached copy of the lock instead of
	// the lock read uncached (firstGrant): that copy's resourceVersion. Such a grant may have
	// been decided on a stale view; it is adopted only if the lock read uncached is still
	// that very object (cachedGrantStands), and discarded otherwise.
	CachedAt string `json:"cachedAt,omitempty"`
}

// endedTerm names a term by its token and why it ended.
type endedTerm struct {
	Token  int64  `json:"token"`
	Reason string `json:"reason"`
	// HolderUID is the ended term's holder ("" in records written before review 20f: before
	// review 20e only the restart fast path recorded its end, always for the same pod; 3022f26
	// recorded every end without it, which fastPathGrant takes as the same pod too, harmless
	// because the restart clock is set only by this replica's own grantTo, which writes it).
	HolderUID types.UID `json:"holderUID,omitempty"`
}

// fastPathGrant reports whether g is the restart fast path's grant: it ended a term of the
// same pod for HolderRestarted. Another pod's grant that ended a restarted holder's term
// after its Releasing is not (review 20f).
func fastPathGrant(g grant) bool {
	e := g.rec.Ends
	return e != nil && e.Reason == lockv1.ReasonHolderRestarted && (e.HolderUID == "" || e.HolderUID == g.holderUID)
}

func (r record) encode() json.RawMessage {
	b, err := json.Marshal(r)
	if err != nil {
		panic(fmt.Sprintf("encode record: %v", err)) // a struct of strings and ints always encodes
	}
	return b
}

// grant is one lock key as read from etcd.
type grant struct {
	holderUID types.UID
	token     int64
	lease     clientv3.LeaseID
	rec       record
}

// present reports whether the key exists.
func (g grant) present() bool { return g.token > 0 }

// grantFrom decodes a Holding; a record that does not decode leaves rec zero (phase "").
func grantFrom(h lease.Holding) grant {
	g := grant{holderUID: types.UID(h.Holder), token: h.Token, lease: h.Lease}
	if len(h.Record) > 0 {
		_ = json.Unmarshal(h.Record, &g.rec) // a foreign record is treated as phase Held below
	}
	if g.present() && g.rec.Phase == "" {
		g.rec.Phase = lockv1.PhaseHeld
	}
	return g
}
