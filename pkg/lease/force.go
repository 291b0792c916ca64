package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// forceAttempts bounds how often ForceRelease sends its transaction again
// after one that provably did not apply (it arrived after its freshness
// lease ended, or its lost answer was settled as not applied).
const forceAttempts = 3

// revokeSlack is how much longer than the freshness lease the tombstone's
// lease lives beyond the lock-delay: etcd's leader revokes expired leases in
// batches, so a lease can outlive its TTL by a little.
const revokeSlack = time.Second

// ForceRelease ends the grant of key with the given token, for an operator
// or a controller that has decided its holder is gone. It grants two fresh
// leases, a short freshness lease F (TTL MinTTL) and the tombstone's lease G
// (TTL the old lease's granted TTL + MinTTL + 1 s), and sends one
// transaction:
//
//	If(CreateRevision(grant) == token, guards...)
//	Then(Delete(grant), Put(tombstone(key), old value, WithLease(G)),
//	     Put(fence(key), WithLease(F)))
//
// where grant is the lock key, or the queue entry of a blocking Acquire that
// became the grant (owner.go); the tombstone keeps the next entry from
// becoming the grant as it keeps acquires out.
//
// etcd refuses a transaction that puts on a lease it no longer has, as a
// whole (ErrLeaseNotFound). So the transaction applies before F ends, if at
// all, and G, granted after F, outlives that moment by the lock-delay:
// acquires require the tombstone to be absent, so the next holder waits at
// least the evicted holder's TTL counted from the delete, beyond the evicted
// holder's validity (S_own + TTL - margin, S_own being before the delete),
// however late the transaction applied. A transaction refused that way is
// sent again with fresh leases, up to three times. After the commit, G is
// renewed once (best effort) and F revoked, taking the marker with it.
// (etcd cannot delete and put one key in a transaction, and a put over a
// live key keeps its CreateRevision, so the tombstone lives beside the key.)
//
// It fails with ErrNotHeld if key is not held with token, ErrGuardFailed if a
// guard failed (both leases are then revoked: nothing uses them). If the
// transaction's answer was lost, F is revoked, which fences the transaction
// off: a read after the revoke shows for certain whether it applied. Only if
// the revoke's answer is lost too does the error wrap ErrUnknownOutcome; G
// is then left alone (a revoke would delete a tombstone that may exist) and
// expires by itself.
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
	// The grant: the lock key, or the queue entry that became the grant
	// (owner.go). CreateRevision == token on it is then true exactly while it
	// stays that grant, which is what the transaction compares.
	kv, err := e.grantOf(ctx, key, token)
	if err != nil {
		return err
	}

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
	for attempt := 1; ; attempt++ {
		err := e.forceOnce(ctx, key, string(kv.Key), token, string(kv.Value), delay, cfg)
		if !errors.Is(err, errNotApplied) {
			return err
		}
		if attempt == forceAttempts || ctx.Err() != nil {
			return fmt.Errorf("attempt %d of %d: %w", attempt, forceAttempts, err)
		}
	}
}

// errNotApplied marks a ForceRelease transaction shown not to have applied,
// which may be sent again.
var errNotApplied = errors.New("transaction did not apply")

// forceOnce grants the two leases and sends ForceRelease's transaction once.
func (e *Engine) forceOnce(ctx context.Context, key, path string, token int64, old string, delay time.Duration, cfg lockConfig) error {
	tomb, fence := e.tombPath(key), e.fencePath(key)
	fresh, err := e.cli.Grant(ctx, int64(MinTTL/time.Second))
	if err != nil {
		return fmt.Errorf("grant freshness lease: %w", err)
	}
	// Granted after F, so it ends after F's end plus the lock-delay.
	g, err := e.cli.Grant(ctx, int64((delay+MinTTL+revokeSlack)/time.Second))
	if err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), delay/4)
		defer cancel()
		_, _ = e.cli.Revoke(cctx, fresh.ID)
		return fmt.Errorf("grant lock-delay lease: %w", err)
	}
	resp, err := e.cli.Txn(ctx).
		If(append([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(path), "=", token)}, cfg.guards...)...).
		Then(clientv3.OpDelete(path),
			clientv3.OpPut(tomb, old, clientv3.WithLease(g.ID)),
			clientv3.OpPut(fence, "", clientv3.WithLease(fresh.ID))).
		Else(clientv3.OpGet(path, clientv3.WithKeysOnly())).
		Commit()
	// What follows must run even if ctx ended during the transaction.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), delay/4)
	defer cancel()
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		// F (or G) ended before the transaction applied: nothing did.
		_, _ = e.cli.Revoke(cctx, g.ID)
		return fmt.Errorf("%w: it arrived after its freshness lease ended: %w", errNotApplied, err)
	case err != nil && !unknownOutcome(err):
		_, _ = e.cli.Revoke(cctx, fresh.ID) // refused: nothing uses the leases
		_, _ = e.cli.Revoke(cctx, g.ID)
		return err
	case err != nil:
		applied, serr := e.settleForce(cctx, tomb, fresh.ID, g.ID)
		if serr != nil {
			return fmt.Errorf("%w: %w (settle: %w)", ErrUnknownOutcome, err, serr)
		}
		if !applied {
			_, _ = e.cli.Revoke(cctx, g.ID)
			return fmt.Errorf("%w: answer lost (%w), and the fence showed it did not apply", errNotApplied, err)
		}
	case !resp.Succeeded:
		_, _ = e.cli.Revoke(cctx, fresh.ID)
		_, _ = e.cli.Revoke(cctx, g.ID)
		return notApplied(resp.Responses[0], token)
	}
	// Committed. Renewing G makes its TTL count from after the delete too;
	// the freshness lease already made it long enough, so this is a bonus.
	_, _ = e.cli.KeepAliveOnce(cctx, g.ID)
	_, _ = e.cli.Revoke(cctx, fresh.ID)
	return nil
}

// settleForce finds out whether a ForceRelease transaction whose answer was
// lost applied: it revokes the freshness lease, after which the transaction
// can no longer apply, then reads the tombstone. The error is the revoke's or
// the read's, when the outcome is still unknown.
func (e *Engine) settleForce(ctx context.Context, tomb string, fresh, g clientv3.LeaseID) (bool, error) {
	if _, err := e.cli.Revoke(ctx, fresh); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return false, fmt.Errorf("revoke freshness lease: %w", err)
	}
	t, err := e.cli.Get(ctx, tomb)
	if err != nil {
		return false, fmt.Errorf("read tombstone: %w", err)
	}
	return len(t.Kvs) == 1 && clientv3.LeaseID(t.Kvs[0].Lease) == g, nil
}
