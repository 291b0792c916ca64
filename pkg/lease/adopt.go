package lease

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Adopt returns a *Lock for a key that is already held on this session's
// lease with the given token: after ResumeSession, or after an earlier Lock
// for it was lost locally while the key stayed. One linearizable
// transaction checks CreateRevision == token and the lease (and WithGuard
// compares); it fails with ErrNotHeld otherwise, and with ErrBusy when a
// live Lock of this session tracks the key already.
//
// WARNING: Adopt cannot know whether another process resumed the same lease
// and adopted the same key: both would hold valid Locks with the same token,
// which fencing cannot tell apart. Adopt only on a lease that something else
// guarantees a single owner of (see ResumeSession).
func (s *Session) Adopt(ctx context.Context, key string, token int64, opts ...LockOption) (*Lock, error) {
	l, err := s.adopt(ctx, key, token, opts)
	if err != nil {
		return nil, fmt.Errorf("adopt %s: %w", key, err)
	}
	return l, nil
}

func (s *Session) adopt(ctx context.Context, key string, token int64, opts []LockOption) (*Lock, error) {
	if err := s.eng.check(key); err != nil {
		return nil, err
	}
	if token <= 0 {
		return nil, invalidf("token %d is not positive", token)
	}
	cfg, err := s.eng.lockConfig(opts)
	if err != nil {
		return nil, err
	}
	if err := s.claim(ctx, key); err != nil {
		return nil, err
	}
	defer s.unclaim(key)
	// The grant is the lock key, or a queue entry of this lease that became
	// the grant (owner.go): one read finds which, then one transaction
	// confirms it is still that grant on this lease. Once a key is the grant
	// with token, CreateRevision == token holds exactly while it stays the
	// grant, so the transaction needs no other compare of the rule.
	path := s.eng.Path(key)
	if kv, err := s.eng.grantOf(ctx, key, token); err == nil {
		path = string(kv.Key)
	}
	cmps := append([]clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(path), "=", token),
		clientv3.Compare(clientv3.LeaseValue(path), "=", s.id),
	}, cfg.guards...)
	sent := now()
	resp, err := s.cli.Txn(ctx).If(cmps...).Then(clientv3.OpGet(path)).Else(clientv3.OpGet(path)).Commit()
	if err != nil {
		return nil, err
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if !resp.Succeeded {
		if len(kvs) == 1 && kvs[0].CreateRevision == token && clientv3.LeaseID(kvs[0].Lease) == s.id {
			return nil, ErrGuardFailed
		}
		return nil, fmt.Errorf("%w: token %d is not on lease %x", ErrNotHeld, token, int64(s.id))
	}
	l := s.newLock(key, path, token, decodeValue(kvs[0].Value))
	if err := s.register(l, sent, resp.Header.Revision+1); err != nil {
		return nil, err
	}
	return l, nil
}
