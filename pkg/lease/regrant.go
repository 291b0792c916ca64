package lease

import (
	"context"
	"errors"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A rolling upgrade from a version before the queued grant (issue 24) runs
// waiters of both protocols on one queue. The old protocol's waiter, once
// it is the oldest, takes the lock with its own write,
//
//	If(lock key absent, tombstone absent, own entry, every entry's CreateRevision >= its own)
//	Then(Put(lock key, WithLease(its session)), Delete(own entry))
//
// which creates a lock key while newer entries queue: the one case where
// owner.go's "a lock key is created only while nobody queues" fails. An entry
// queued before that lock key would then become the grant with a token below
// the lock key's. So a waiter that ever read a lock key created after its
// entry (outrun) never takes its entry as the grant: once it is the grant it
// takes the lock by the old protocol's write (regrant), whose revision, and
// so its token, is above every lock key before it. The delete of its entry in
// that write is seen, at that revision, by the waiter behind it, which is
// then outrun too.
//
// Limitation (docs/operations.md): a waiter reads the lock key only when the
// entry ahead of it goes (or after a quiet TTL/3), so the waiters behind the
// first outrun one need not see the old protocol's lock key. If that waiter
// leaves before its regrant (a crash or hang, its lease's expiry, a cancel,
// a closed session), the delete of its entry wakes the next, which finds the
// lock free and takes its own entry as the grant, with a token below the old
// protocol's lock key. No watch failure is needed. Only a rolling upgrade
// from a version before issue 24, with blocking waiters of both versions on
// one key, can do that: stop the old version's replicas first.

// errRegrantRaced says a regrant's compares failed: the waiter's entry was
// not the grant any more, or not yet. The caller reads again.
var errRegrantRaced = errors.New("lease: entry no longer the oldest")

// notice records a lock key read while queued: one created after the
// waiter's entry makes it outrun.
func (w *waiter) notice(lock *mvccpb.KeyValue) {
	if lock != nil && w.rev > 0 && lock.CreateRevision > w.rev {
		w.outrun = true
	}
}

// regrant takes the lock for an outrun waiter whose entry is the grant: it
// turns the entry into a lock key in one write, with the old protocol's
// compares and the caller's guards, so that the token is that write's
// revision. Which compare guards what:
//
//	CreateRevision(lock key) == 0      no lock key holds the lock
//	CreateRevision(tombstone) == 0     no ForceRelease lock-delay
//	CreateRevision(entry) == w.rev     this call's entry, still queued
//	CreateRevision(queue) >= w.rev     nothing queued ahead: the entry is the grant
//	CreateRevision(P/gone/<call>) == 0 the call has not given up (its clean-up puts
//	                                   it after a lost answer: a delayed regrant then
//	                                   creates nothing, review mx)
//	guards...                          the caller's (WithGuard)
//
// With guards, the Else branch reads what the first four compares test (the
// waiter's reads), so that a failed guard is told apart from a lost race.
// The error wraps ErrUnknownOutcome when the answer was lost (the lock key
// may exist, on this lease with this call's value); it is ErrGuardFailed
// when the four held but a guard did not (nothing was written), and
// errRegrantRaced when one of the four failed. (The call's tombstone exists
// only once the call has ended: a live call never fails on it.)
func (s *Session) regrant(ctx context.Context, w *waiter, v value, guards []clientv3.Cmp) (*Lock, error) {
	e := s.eng
	path, tomb, qdir := e.Path(w.key), e.tombPath(w.key), e.queueDir(w.key)
	cmps := append([]clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(path), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(tomb), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(w.path), "=", w.rev),
		clientv3.Compare(clientv3.CreateRevision(qdir), ">", w.rev-1).WithPrefix(),
	}, e.callAlive(v)...)
	cmps = append(cmps, guards...)
	var els []clientv3.Op
	if len(guards) > 0 {
		els = w.reads()
	}
	sent := now()
	tctx, cancel := s.callContext(ctx)
	resp, err := s.cli.Txn(tctx).If(cmps...).Then(
		clientv3.OpPut(path, v.encode(), clientv3.WithLease(s.id)),
		clientv3.OpDelete(w.path),
	).Else(els...).Commit()
	cancel()
	if err != nil {
		return nil, writeErr(err)
	}
	if !resp.Succeeded {
		return nil, regrantFailure(w, resp.Responses)
	}
	return s.granted(ctx, w.key, v, resp.Header.Revision, sent)
}

// regrantFailure explains a regrant that did not apply, from the answers to
// its Else branch (the waiter's reads; none without guards, when only the
// engine's compares can have failed).
func regrantFailure(w *waiter, rs []*etcdserverpb.ResponseOp) error {
	if len(rs) == 0 {
		return errRegrantRaced
	}
	var o obstacle
	o.readLock(rs)
	w.readQueue(&o, rs[2:])
	if o.blocked() {
		return errRegrantRaced
	}
	return ErrGuardFailed
}
