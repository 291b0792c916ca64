package lease

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The ownership rule. At every etcd revision, the grant of the lock named k
// is, in this order:
//
//  1. its lock key P/locks/k, if it exists (TryAcquire, Grant, or an Acquire
//     that found the lock free and nobody queued: one transaction created it);
//  2. nobody, while the tombstone P/tombstones/k exists (ForceRelease's
//     lock-delay);
//  3. the oldest entry of its queue P/queue/<escaped k>/, by CreateRevision:
//     a blocking Acquire's entry becomes the grant when everything ahead of
//     it is gone, without a write of its own;
//  4. nobody (free).
//
// The token is the CreateRevision of the grant's key. So a release hands the
// lock over in its one write: deleting the holder's key makes the next entry
// the grant at that revision, and the next waiter (watching that key) learns
// it with one linearizable read.
//
// Why the token still grows with every grant: a lock key is created only
// while the queue is empty and no tombstone exists (its transaction compares
// both), so every entry is younger than the lock key that was there when it
// queued, and entries become grants in CreateRevision order; a new lock key
// comes after every entry is gone, at a newer revision. Why a grant stays the
// grant until its key is deleted: nothing can come before it (a lock key
// needs an empty queue; a new entry is the youngest; a tombstone is put only
// by ForceRelease, in the transaction that deletes the grant). So once a read
// showed a key to be the grant with token T, "CreateRevision(key) == T" is
// true exactly while that grant lasts: the one compare every guarded write
// carries (Lock.IsOwner).
//
// A waiter whose lease ended has no entry (etcd deleted it with the lease),
// so the rule skips it: the lock is never handed to a session etcd ended.

// lockState is what one read of a lock saw: its lock key, its tombstone and
// the oldest entry of its queue (each nil when absent).
type lockState struct {
	lock, tomb, oldest *mvccpb.KeyValue
}

// owner applies the ownership rule: the grant's key, or nil when the lock is
// free or in its lock-delay.
func (st lockState) owner() *mvccpb.KeyValue {
	switch {
	case st.lock != nil:
		return st.lock
	case st.tomb != nil:
		return nil
	}
	return st.oldest
}

// stateReads reads what the ownership rule needs, in one transaction's ops:
// the lock key, its tombstone (keys only) and the oldest queue entry.
// readState parses their answers.
func (e *Engine) stateReads(key string) []clientv3.Op {
	return []clientv3.Op{
		clientv3.OpGet(e.Path(key)),
		clientv3.OpGet(e.tombPath(key), clientv3.WithKeysOnly()),
		clientv3.OpGet(e.queueDir(key), clientv3.WithFirstCreate()...),
	}
}

// readState parses the answers to stateReads.
func readState(rs []*etcdserverpb.ResponseOp) lockState {
	first := func(r *etcdserverpb.ResponseOp) *mvccpb.KeyValue {
		if kvs := r.GetResponseRange().Kvs; len(kvs) > 0 {
			return kvs[0]
		}
		return nil
	}
	return lockState{lock: first(rs[0]), tomb: first(rs[1]), oldest: first(rs[2])}
}

// grantOf reads the lock named key linearizably and returns the grant's key
// if it carries token; ErrNotHeld otherwise. It reads the lock key alone
// first (the controller's grants are lock keys), and the whole state only
// when the lock key is absent: a lock key that exists is the grant.
func (e *Engine) grantOf(ctx context.Context, key string, token int64) (*mvccpb.KeyValue, error) {
	got, err := e.cli.Get(ctx, e.Path(key))
	if err != nil {
		return nil, fmt.Errorf("read grant: %w", err)
	}
	var own *mvccpb.KeyValue
	if len(got.Kvs) > 0 {
		own = got.Kvs[0]
	} else {
		resp, err := e.cli.Txn(ctx).Then(e.stateReads(key)...).Commit()
		if err != nil {
			return nil, fmt.Errorf("read grant: %w", err)
		}
		own = readState(resp.Responses).owner()
	}
	if own == nil || own.CreateRevision != token {
		return nil, fmt.Errorf("%w: token %d", ErrNotHeld, token)
	}
	return own, nil
}
