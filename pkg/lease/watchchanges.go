package lease

import (
	"context"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// LockChange is one put or delete of a lock key, as WatchLockChanges reports it.
type LockChange struct {
	// Key is the lock name.
	Key string
	// Revision is the etcd revision of the change.
	Revision int64
	// Token is the key's CreateRevision after a put (a grant's token); 0 after a delete.
	Token int64
	// Deleted is true for a delete.
	Deleted bool
}

// WatchLockChanges is WatchLocks reporting each change with its revision and the key's
// token, so that a caller can tell its own writes (a grant it made at that revision) from
// everyone else's. Everything else is as for WatchLocks: one watch, resync after a failure
// and on every confirmed watch, the caller's goroutine.
func (e *Engine) WatchLockChanges(ctx context.Context, changed func(LockChange), resync func()) error {
	return e.watchLockEvents(ctx, func(dir string, ev *clientv3.Event) {
		c := LockChange{Key: strings.TrimPrefix(string(ev.Kv.Key), dir), Revision: ev.Kv.ModRevision}
		if ev.Type == mvccpb.DELETE {
			c.Deleted = true
		} else {
			c.Token = ev.Kv.CreateRevision
		}
		changed(c)
	}, resync)
}
