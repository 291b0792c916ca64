package lease

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ForceRelease ends the grant of key with the given token, for an operator
// or a controller that has decided its holder is gone. It is one transaction:
//
//	If(CreateRevision(key) == token, guards...)
//	Then(Delete(key), Put(tombstone(key), old value, WithLease(fresh lease)))
//
// where the fresh lease has the old lease's granted TTL. Acquires require the
// tombstone to be absent, and waiters wake when it expires. After the
// transaction committed, the fresh lease is renewed once (KeepAliveOnce with
// a deadline), so that its TTL counts from a send time after the delete: the
// evicted holder's validity (S_own + TTL - margin, S_own being before the
// delete, since no check after it can succeed) ends before the tombstone
// does, however late the transaction applied. (etcd cannot delete and put
// one key in a transaction, and a put over a live key keeps its
// CreateRevision, so the tombstone lives beside the key.)
//
// It fails with ErrNotHeld if key is not held with token, ErrGuardFailed if a
// guard failed (the fresh lease is then revoked: nothing uses it). If the
// transaction's answer was lost and a read cannot show that it applied, the
// error wraps ErrUnknownOutcome and the fresh lease is left alone: the
// transaction may still apply, and a revoke would delete its tombstone; an
// unrenewed lease expires by itself. If the renewal after the commit fails,
// the error wraps ErrLockDelayUnconfirmed: the key was released, but the
// lock-delay may count from before the delete.
func (e *Engine) ForceRelease(ctx context.Context, key string, token int64, opts ...LockOption) error {
	if err := e.forceRelease(ctx, key, token, opts); err != nil {
		return fmt.Errorf("force release %s: %w", key, err)
	}
	return nil
}

func (e *Engine) forceRelease(ctx context.Context, key string, token int64, opts []LockOption) error {
	if err := e.check(key); err != nil {
		return err
	}
	if token <= 0 {
		return invalidf("token %d is not positive", token)
	}
	cfg, err := e.lockConfig(opts)
	if err != nil {
		return err
	}
	path, tomb := e.Path(key), e.tombPath(key)
	got, err := e.cli.Get(ctx, path)
	if err != nil {
		return err
	}
	if len(got.Kvs) == 0 || got.Kvs[0].CreateRevision != token {
		return fmt.Errorf("%w: token %d", ErrNotHeld, token)
	}
	kv := got.Kvs[0]

	// The lock-delay is the evicted holder's TTL. A key without a lease was
	// not written by the engine; MinTTL is the least delay that still lets a
	// tombstone be seen.
	delay := MinTTL
	if kv.Lease != 0 {
		ttl, err := e.cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
		if err != nil {
			return fmt.Errorf("lease %x: %w", kv.Lease, err)
		}
		delay = max(delay, time.Duration(ttl.GrantedTTL)*time.Second)
	}
	grant, err := e.cli.Grant(ctx, int64(delay/time.Second))
	if err != nil {
		return fmt.Errorf("grant lock-delay lease: %w", err)
	}

	resp, err := e.cli.Txn(ctx).
		If(append([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(path), "=", token)}, cfg.guards...)...).
		Then(clientv3.OpDelete(path), clientv3.OpPut(tomb, string(kv.Value), clientv3.WithLease(grant.ID))).
		Else(clientv3.OpGet(path, clientv3.WithKeysOnly())).
		Commit()

	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), delay/4)
	defer cancel()
	switch {
	case err != nil && !unknownOutcome(err):
		_, _ = e.cli.Revoke(cctx, grant.ID) // refused: nothing uses the lease
		return err
	case err != nil:
		// Settle by reading: the tombstone on the fresh lease means the
		// transaction applied. Otherwise it may still apply: never revoke.
		t, gerr := e.cli.Get(cctx, tomb)
		if gerr != nil || len(t.Kvs) != 1 || clientv3.LeaseID(t.Kvs[0].Lease) != grant.ID {
			return writeErr(err)
		}
	case !resp.Succeeded:
		_, _ = e.cli.Revoke(cctx, grant.ID)
		return notApplied(resp.Responses[0], token)
	}
	// Committed. The TTL must count from after the delete.
	if _, err := e.cli.KeepAliveOnce(cctx, grant.ID); err != nil {
		return fmt.Errorf("%w: renew lock-delay lease %x: %w", ErrLockDelayUnconfirmed, int64(grant.ID), err)
	}
	return nil
}
