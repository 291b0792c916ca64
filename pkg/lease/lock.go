package lease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// errLockLapsed is the cause when no ownership check was confirmed in time.
var errLockLapsed = fmt.Errorf("%w: no ownership check confirmed within TTL - margin", ErrExpired)

// Lock is one held key. Its fencing token is the key's CreateRevision:
// global in the etcd cluster and only growing, so every later grant of this
// lock, after any release, expiry or restart, carries a larger token.
//
// A Lock is valid until the earlier of its session's validity and
// S_own + TTL - margin, where S_own is the send time of the last confirmed
// linearizable ownership check of its key (the acquire itself, then the
// session's check every TTL/3). Loss closes Done, cancels Context and turns
// Valid false, once; nothing brings a lost Lock back (Adopt makes a new one).
// A watch on the key makes loss detection faster; it never extends validity.
type Lock struct {
	s      *Session
	key    string
	path   string
	token  int64
	holder string
	slots  int // the semaphore's slot count for a slot's Lock (kept by Update), else 0
	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{}
	exited chan struct{} // closed when the monitor goroutine returns, or when it will never start
	start  *time.Timer   // starts the monitor; set before the lock is registered

	// Guarded by s.mu.
	record   json.RawMessage
	ownUntil instant
	err      error // why the lock ended; nil while held
	endedAt  instant
}

// newLock returns the Lock of the grant at path (the lock key, or the queue
// entry that became the grant) with token.
func (s *Session) newLock(key, path string, token int64, v value) *Lock {
	l := &Lock{
		s: s, key: key, path: path, token: token, holder: v.Holder, record: v.Record, slots: v.Slots,
		done: make(chan struct{}), exited: make(chan struct{}),
	}
	l.ctx, l.cancel = context.WithCancelCause(s.ctx)
	return l
}

// Key returns the lock name.
func (l *Lock) Key() string { return l.key }

// Path returns the etcd key of the lock's grant: the lock key
// (Engine.Path), or, for a blocking Acquire that queued, its queue entry,
// which became the grant when everything ahead of it was gone. IsOwner
// compares this key.
func (l *Lock) Path() string { return l.path }

// Token returns the fencing token: pass it with every write to a resource
// the lock protects, and have the resource reject tokens below the highest
// it has seen (see package fence).
func (l *Lock) Token() int64 { return l.token }

// Holder returns the holder string the lock was acquired with.
func (l *Lock) Holder() string { return l.holder }

// Record returns the record stored with the holder.
func (l *Lock) Record() json.RawMessage {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	return append(json.RawMessage(nil), l.record...)
}

// Session returns the session the lock is held on.
func (l *Lock) Session() *Session { return l.s }

// Done returns a channel closed when the lock is lost or released. Loss by
// deadline is noticed by a timer, which fires late after a suspend; Valid
// reads the clock and is right even then.
func (l *Lock) Done() <-chan struct{} { return l.done }

// Context returns a context cancelled when the lock is lost or released;
// context.Cause tells why. Checking ctx.Err() is not a substitute for Valid
// just before acting: a process can pause between the check and the act.
func (l *Lock) Context() context.Context { return l.ctx }

// Err returns why the lock ended (ErrReleased, ErrNotHeld, ErrExpired, or the
// session's cause), or nil while it is held.
func (l *Lock) Err() error {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	return l.err
}

// Valid reports whether the lock is within its validity, reading the clock
// itself. Once it returns false it never returns true again.
func (l *Lock) Valid() bool {
	n := now()
	l.s.mu.Lock()
	ok, p := l.validLocked(n)
	l.s.mu.Unlock()
	p.run()
	return ok
}

// ValidUntil returns the end of the lock's validity projected onto the wall
// clock (with a monotonic reading); after loss it is no later than the loss.
func (l *Lock) ValidUntil() time.Time {
	l.s.mu.Lock()
	vu := l.validUntilLocked()
	l.s.mu.Unlock()
	return vu.Wall()
}

func (l *Lock) validUntilLocked() instant {
	vu := min(l.s.validUntil, l.ownUntil)
	if l.err != nil {
		vu = min(vu, l.endedAt)
	}
	if l.s.err != nil {
		vu = min(vu, l.s.endedAt)
	}
	return vu
}

// IsOwner returns the compare CreateRevision(key) == token, to put in any
// transaction that must only apply while this grant holds the key.
func (l *Lock) IsOwner() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(l.path), "=", l.token)
}

// Release ends the lock locally (Done, Context, Valid), then deletes the key
// with one transaction guarded by CreateRevision == token (and WithGuard
// compares). It returns ErrNotHeld if the key was no longer this grant: a
// retried Release never deletes a newer grant, even one of the same session.
//
// A ctx that already ended does not stop the delete (the usual
// `defer l.Release(ctx)` runs after ctx ended): it is sent anyway, bounded by
// TTL/4. If the delete cannot be sent or its answer is lost, and Release has
// no WithGuard compares, the key is handed to the session's clean-up, which
// deletes it while it is still this grant on the session's lease (as it does
// a failed Acquire's leftovers); the error is returned all the same. After an
// error other than ErrNotHeld, Release may be called again (an ErrNotHeld
// then can mean that the clean-up deleted the key first).
func (l *Lock) Release(ctx context.Context, opts ...LockOption) error {
	cfg, err := l.s.eng.lockConfig(opts)
	if err != nil {
		return fmt.Errorf("release %s: %w", l.key, err)
	}
	l.lose(ErrReleased)
	// The monitor ends on its own now. Join it after the transaction, which
	// does not depend on it, so that its exit overlaps the round trip.
	defer func() { <-l.exited }()
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = l.s.cleanupContext(ctx)
		defer cancel()
	}
	// IsOwner guards the delete: never a newer grant of the key, even one of
	// this session. Without guards a failed compare can only mean that the
	// key is no longer this grant, so the transaction reads nothing back.
	txn := l.s.cli.Txn(ctx).If(append([]clientv3.Cmp{l.IsOwner()}, cfg.guards...)...).Then(clientv3.OpDelete(l.path))
	if len(cfg.guards) > 0 {
		txn = txn.Else(clientv3.OpGet(l.path, clientv3.WithKeysOnly()))
	}
	resp, err := txn.Commit()
	if err != nil {
		if len(cfg.guards) == 0 {
			// The key may still be there. With guards it stays (a later
			// delete without them could act against them); without, the
			// session deletes it while it is this grant.
			l.s.handOver(leftover{key: l.key, path: l.path, lock: true, token: l.token})
		}
		return fmt.Errorf("release %s: %w", l.key, err)
	}
	switch {
	case resp.Succeeded:
		return nil
	case len(cfg.guards) == 0:
		return fmt.Errorf("release %s: %w: token %d", l.key, ErrNotHeld, l.token)
	}
	return fmt.Errorf("release %s: %w", l.key, l.failure(resp.Responses[0]))
}

// Update replaces the record stored with the holder, in one transaction
// guarded by CreateRevision == token (and WithGuard compares). A confirmed
// Update also counts as an ownership check. It writes nothing for a lock
// that is no longer valid: it fails with the lock's cause (ErrExpired when
// its validity lapsed, the session's error when the session ended,
// ErrNotHeld after Release or loss of the key), and with ErrNotHeld when the
// key is no longer this grant.
func (l *Lock) Update(ctx context.Context, record json.RawMessage, opts ...LockOption) error {
	cfg, err := l.s.eng.lockConfig(opts)
	if err == nil {
		err = validateRecord(record)
	}
	if err != nil {
		return fmt.Errorf("update %s: %w", l.key, err)
	}
	if !l.Valid() {
		// A lapsed lock may still be ours in etcd, but its holder must have
		// stopped acting: writing for it would act after the deadline.
		if cause := l.Err(); !errors.Is(cause, ErrReleased) {
			return fmt.Errorf("update %s: %w", l.key, cause)
		}
		return fmt.Errorf("update %s: %w: released", l.key, ErrNotHeld)
	}
	sent := now()
	resp, err := l.s.cli.Txn(ctx).
		If(append([]clientv3.Cmp{l.IsOwner()}, cfg.guards...)...).
		Then(clientv3.OpPut(l.path, value{Holder: l.holder, Record: record, Slots: l.slots}.encode(), clientv3.WithIgnoreLease())).
		Else(clientv3.OpGet(l.path, clientv3.WithKeysOnly())).
		Commit()
	if err != nil {
		return fmt.Errorf("update %s: %w", l.key, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("update %s: %w", l.key, l.failure(resp.Responses[0]))
	}
	l.s.mu.Lock()
	l.record = append(json.RawMessage(nil), record...)
	l.s.mu.Unlock()
	l.confirmed(sent)
	return nil
}

// failure explains a guarded transaction that did not apply, from the Else
// read of the lock key: still ours means a guard failed.
func (l *Lock) failure(r *etcdserverpb.ResponseOp) error {
	if kvs := r.GetResponseRange().Kvs; len(kvs) == 1 && kvs[0].CreateRevision == l.token {
		return ErrGuardFailed
	}
	return fmt.Errorf("%w: token %d", ErrNotHeld, l.token)
}

// confirmed records an ownership check sent at sent and confirmed by etcd.
// A lock whose validity has passed stays ended.
func (l *Lock) confirmed(sent instant) {
	n := now()
	l.s.mu.Lock()
	ok, p := l.validLocked(n)
	if ok {
		if vu := sent.Add(l.s.ttl - l.s.margin); vu > l.ownUntil {
			l.ownUntil = vu
		}
	}
	l.s.mu.Unlock()
	p.run()
}

// lose ends the lock with cause, unless it has ended already.
func (l *Lock) lose(cause error) {
	l.s.mu.Lock()
	var p pending
	if l.endLocked(cause, now()) {
		p.locks = []*Lock{l}
	}
	l.s.mu.Unlock()
	p.run()
}

// validLocked reports whether the lock is valid at n, ending it (or its
// session) if validity has passed.
func (l *Lock) validLocked(n instant) (bool, pending) {
	if l.err != nil {
		return false, pending{}
	}
	if ok, p := l.s.validLocked(n); !ok {
		return false, p
	}
	if n < l.ownUntil {
		return true, pending{}
	}
	l.endLocked(errLockLapsed, n)
	return false, pending{locks: []*Lock{l}}
}

// endLocked records that the lock ended at n with cause; it reports whether
// this call ended it (and so must call finish after unlocking).
func (l *Lock) endLocked(cause error, n instant) bool {
	if l.err != nil {
		return false
	}
	l.err, l.endedAt = cause, n
	if l.s.locks[l.key] == l {
		delete(l.s.locks, l.key)
	}
	return true
}

// finish cancels the context and closes Done; it runs once per lock, after
// endLocked returned true.
func (l *Lock) finish() {
	l.cancel(l.err)
	close(l.done)
	if l.start != nil && l.start.Stop() {
		// The monitor never started, and now never will.
		close(l.exited)
		l.s.wg.Done()
	}
}

// held reports whether kv is this grant's key.
func (l *Lock) held(kv *mvccpb.KeyValue) bool {
	return kv != nil && kv.CreateRevision == l.token
}
