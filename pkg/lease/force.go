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
// where the fresh lease has the old lease's granted TTL and is never renewed.
// Acquires require the tombstone to be absent, and waiters wake when it
// expires: the next holder waits out a lock-delay as long as the evicted
// holder's validity could last (its S_own + TTL - margin ends before the
// tombstone does), and gets a larger token. (etcd cannot delete and put one
// key in a transaction, and a put over a live key keeps its CreateRevision,
// so the tombstone lives beside the key.)
//
// It fails with ErrNotHeld if key is not held with token. The fresh lease is
// revoked again whenever the transaction did not apply.
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

	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), MinTTL)
	defer cancel()
	if err != nil {
		// Unknown outcome. If the tombstone is on the fresh lease the
		// transaction applied, and revoking would cut the lock-delay short.
		if t, gerr := e.cli.Get(cctx, tomb); gerr == nil {
			if len(t.Kvs) == 1 && clientv3.LeaseID(t.Kvs[0].Lease) == grant.ID {
				return nil
			}
			_, _ = e.cli.Revoke(cctx, grant.ID)
		}
		return err
	}
	if !resp.Succeeded {
		_, _ = e.cli.Revoke(cctx, grant.ID)
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 && kvs[0].CreateRevision == token {
			return ErrGuardFailed
		}
		return fmt.Errorf("%w: token %d", ErrNotHeld, token)
	}
	return nil
}
