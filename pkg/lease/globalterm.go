package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Confirm is R1's linearizable confirmation that the grant with token stands: one
// transaction If(CreateRevision(K) == token, guard) with no operations. held is false when
// the compare failed: the grant is gone or replaced, or the guard did not hold. The caller
// reads its clock before calling (the confirmation's send time); an error is no evidence
// either way.
func (g *Global) Confirm(ctx context.Context, name string, token int64, guard clientv3.Cmp) (held bool, err error) {
	if err := validateTerm(name, token, guard); err != nil {
		return false, globalErr("confirm", name, err)
	}
	resp, err := g.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(g.GrantPath(name)), "=", token), guard).
		Commit()
	if err != nil {
		return false, globalErr("confirm", name, fmt.Errorf("token %d: %w", token, err))
	}
	return resp.Succeeded, nil
}

// Renew sends ONE KeepAliveOnce of the grant's lease and returns the TTL etcd granted (L5:
// never the KeepAlive stream, never several in flight: the caller gates each one by R4).
// ctx must carry a deadline, below P0: KeepAliveOnce retries until its context ends, and a
// keepalive that lands late may renew a grant R4 no longer allows. A lease that is gone
// (expired, revoked) gives 0 and an error wrapping ErrNotHeld and etcd's ErrLeaseNotFound.
func (g *Global) Renew(ctx context.Context, lease clientv3.LeaseID) (time.Duration, error) {
	ttl, err := g.renew(ctx, lease)
	if err != nil {
		return 0, fmt.Errorf("renew global grant lease %x: %w", int64(lease), err)
	}
	return ttl, nil
}

func (g *Global) renew(ctx context.Context, lease clientv3.LeaseID) (time.Duration, error) {
	if lease <= 0 {
		return 0, invalidf("lease %d is not a granted lease", int64(lease))
	}
	if _, ok := ctx.Deadline(); !ok {
		return 0, invalidf("context has no deadline: a keepalive needs one below the round cadence")
	}
	resp, err := g.cli.KeepAliveOnce(ctx, lease)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return 0, fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	if err != nil {
		return 0, err
	}
	return time.Duration(resp.TTL) * time.Second, nil
}

// Delete deletes K if it is still the grant with token: If(CreateRevision(K) == token, guard)
// Then(Delete(K)), then revokes lease if K was on it (best effort: the lease holds nothing
// any more, and a revoke that fails leaves it to expire). deleted reports that the guarded delete itself was
// acknowledged, which R8 needs; false with a nil error means the compare failed (the grant
// is gone or replaced, or the guard did not hold) and nothing was deleted. A lost answer
// wraps ErrUnknownOutcome (deleted false: no acknowledgement). lease 0 skips the revoke.
func (g *Global) Delete(ctx context.Context, name string, token int64, lease clientv3.LeaseID, guard clientv3.Cmp) (deleted bool, err error) {
	if err := validateTerm(name, token, guard); err != nil {
		return false, globalErr("delete", name, err)
	}
	if lease < 0 {
		return false, globalErr("delete", name, invalidf("lease %d is negative", int64(lease)))
	}
	kPath := g.GrantPath(name)
	resp, err := g.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(kPath), "=", token), guard).
		Then(clientv3.OpDelete(kPath, clientv3.WithPrevKV())).
		Commit()
	if err != nil {
		return false, globalErr("delete", name, fmt.Errorf("token %d: %w", token, writeErr(err)))
	}
	if !resp.Succeeded {
		return false, nil
	}
	// The lease K was on, as the delete saw it, is the one revoked: never another lease
	// the caller may have confused with it.
	if prev := resp.Responses[0].GetResponseDeleteRange().PrevKvs; lease != clientv3.NoLease &&
		len(prev) == 1 && clientv3.LeaseID(prev[0].Lease) == lease {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), globalRevokeTimeout)
		defer cancel()
		_, _ = g.cli.Revoke(cctx, lease) // holds nothing now; expires by itself otherwise
	}
	return true, nil
}

// validateTerm checks the arguments of Confirm and Delete.
func validateTerm(name string, token int64, guard clientv3.Cmp) error {
	if err := validateGlobalName("global name", name); err != nil {
		return err
	}
	if err := validateToken(token); err != nil {
		return err
	}
	return validateGuard(guard)
}
