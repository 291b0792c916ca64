package lease

import (
	"context"
	"encoding/json"
	"fmt"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// This file is the engine's API for a controller that holds many keys on
// behalf of others on one shared session: one transaction per call, nothing
// tracked, no goroutine, no watch per key. Such a caller keeps one
// controller-wide keepalive (the session), watches every lock with one
// WatchLocks, and reads linearizably on demand (Inspect); it settles a lost
// answer (ErrUnknownOutcome) by reading again.

// Grant takes the lock named key for holder on the session's lease in the same
// one transaction as TryAcquire (free, no tombstone, queue empty, WithGuard
// compares) and returns its token. It tracks nothing: no *Lock, no goroutine,
// no watch, no ownership checks, and an ambiguous outcome is NOT cleaned up:
// the error wraps ErrUnknownOutcome and the caller settles it by re-reading
// (Inspect). For a controller that holds many keys on behalf of others.
// Errors: *HeldError (ErrLocked), ErrLocked, ErrGuardFailed, ErrInvalid,
// ErrUnknownOutcome, session errors.
func (s *Session) Grant(ctx context.Context, key, holder string, opts ...LockOption) (int64, error) {
	token, err := s.grant(ctx, key, holder, opts)
	if err != nil {
		return 0, fmt.Errorf("grant %s: %w", key, err)
	}
	return token, nil
}

func (s *Session) grant(ctx context.Context, key, holder string, opts []LockOption) (int64, error) {
	cfg, err := s.prepare(key, holder, opts)
	if err != nil {
		return 0, err
	}
	if !s.Valid() {
		return 0, s.Err()
	}
	token, _, err := s.grabTxn(ctx, key, value{Holder: holder, Record: cfg.record}, cfg, false)
	return token, err
}

// Release deletes the lock named key if it is still held with token:
// If(CreateRevision == token, guards...) Then(Delete), on the lock key or, when
// a blocking Acquire's queue entry is the grant (owner.go), on that entry
// (found by the first transaction's Else reads). ErrNotHeld if not held with
// token, ErrGuardFailed if a guard failed, ErrUnknownOutcome (wrapped) if the
// answer was lost.
func (e *Engine) Release(ctx context.Context, key string, token int64, opts ...LockOption) error {
	if err := e.guarded(ctx, key, token, opts, nil); err != nil {
		return fmt.Errorf("release %s: %w", key, err)
	}
	return nil
}

// UpdateRecord replaces the record of the lock named key held with token
// (holder and lease unchanged): If(CreateRevision == token, guards...)
// Then(Put(grant, {holder, record}, WithIgnoreLease)). The grant (the lock
// key, or the queue entry that is the grant) and its holder are read first,
// linearizably, and checked against token; the holder of one grant never
// changes, so the write needs no other compare. Same errors as Release.
func (e *Engine) UpdateRecord(ctx context.Context, key string, token int64, record json.RawMessage, opts ...LockOption) error {
	err := validateRecord(record)
	if err == nil {
		if record == nil {
			record = json.RawMessage{} // a put, with no record
		}
		err = e.guarded(ctx, key, token, opts, record)
	}
	if err != nil {
		return fmt.Errorf("update record %s: %w", key, err)
	}
	return nil
}

// guarded runs one transaction guarded by CreateRevision(grant) == token and
// the WithGuard compares: a delete of the grant's key when record is nil,
// otherwise a put of {holder, record} that keeps the key's lease. A put reads
// the grant first. A delete tries the lock key first (the controller's
// grants are lock keys: one round trip) and, if the Else reads show that a
// queue entry is the grant with token, deletes that entry. Once a key is the
// grant with token, CreateRevision == token holds exactly while it stays the
// grant (owner.go), so that compare is all the rule needs.
func (e *Engine) guarded(ctx context.Context, key string, token int64, opts []LockOption, record json.RawMessage) error {
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
	var path string
	var op clientv3.Op
	if record == nil {
		done, entry, err := e.deleteLockKey(ctx, key, token, cfg)
		if done || err != nil {
			return err
		}
		path, op = entry, clientv3.OpDelete(entry)
	} else {
		kv, err := e.grantOf(ctx, key, token)
		if err != nil {
			return err
		}
		path = string(kv.Key)
		v := value{Holder: decodeValue(kv.Value).Holder, Record: record}
		op = clientv3.OpPut(path, v.encode(), clientv3.WithIgnoreLease())
	}
	resp, err := e.cli.Txn(ctx).
		If(append([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(path), "=", token)}, cfg.guards...)...).
		Then(op).
		Else(clientv3.OpGet(path, clientv3.WithKeysOnly())).
		Commit()
	if err != nil {
		return writeErr(err)
	}
	if !resp.Succeeded {
		return notApplied(resp.Responses[0], token)
	}
	return nil
}

// deleteLockKey deletes the lock key if it is the grant with token (done),
// or returns the queue entry that is the grant with token instead.
func (e *Engine) deleteLockKey(ctx context.Context, key string, token int64, cfg lockConfig) (done bool, entry string, err error) {
	path := e.Path(key)
	resp, err := e.cli.Txn(ctx).
		If(append([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(path), "=", token)}, cfg.guards...)...).
		Then(clientv3.OpDelete(path)).
		Else(e.stateReads(key)...).
		Commit()
	if err != nil {
		return false, "", writeErr(err)
	}
	if resp.Succeeded {
		return true, "", nil
	}
	st := readState(resp.Responses)
	if st.lock != nil && st.lock.CreateRevision == token {
		return false, "", ErrGuardFailed
	}
	if own := st.owner(); own != nil && own.CreateRevision == token {
		return false, string(own.Key), nil
	}
	return false, "", fmt.Errorf("%w: token %d", ErrNotHeld, token)
}

// notApplied explains a transaction guarded by CreateRevision == token that
// did not apply, from its Else read of the key: still that grant means a
// guard failed.
func notApplied(r *etcdserverpb.ResponseOp, token int64) error {
	if kvs := r.GetResponseRange().Kvs; len(kvs) == 1 && kvs[0].CreateRevision == token {
		return ErrGuardFailed
	}
	return fmt.Errorf("%w: token %d", ErrNotHeld, token)
}
