package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Acquire takes the lock named key for holder, waiting as long as ctx
// allows. Waiters queue FIFO by the CreateRevision of their entry
// P/queue/<escaped key>/<lease hex>; each watches only the entry just ahead
// of it, and only the oldest waiter watches the lock key and its tombstone,
// so a release wakes one waiter, not all. Every watch starts at the current
// revision (etcd serves those from its synced set, without the 100 ms
// catch-up of a watch from an old revision) and is followed by a re-read, so
// no deletion between the read and the watch is missed. Without WithGuard
// compares a waiter normally writes to etcd twice: once to queue (or take a
// free lock), once to take the lock when it is head and the lock is free;
// what it reads in between is read-only. (With guards, queuing takes a
// failed try, the enqueue and a first grab.)
//
// A waiter ends with its session: Acquire returns the session's error
// (ErrSessionExpired, ErrSessionClosed) promptly after it ends. A waiter
// re-reads at least every TTL/3, so a stalled watch never blocks it. On any
// error, its queue entry, and a lock key an interrupted transaction may have
// created, are deleted again, by the call and then by the session until that
// succeeds (see Session). An entry an earlier call of this session left is
// deleted and the call queues at the back. An error etcd refused a request
// with (too many operations, request too large, ...) is returned at once;
// only lost answers, and etcd's "too many requests" (it applied nothing and
// is catching up), are retried. A key this session already holds yields a
// *HeldError at once, since waiting for it would never end.
func (s *Session) Acquire(ctx context.Context, key, holder string, opts ...LockOption) (*Lock, error) {
	l, err := s.acquire(ctx, key, holder, opts)
	if err != nil {
		if serr := s.Err(); serr != nil && ctx.Err() == nil && !errors.Is(err, serr) {
			err = fmt.Errorf("%w (%w)", serr, err)
		}
		return nil, fmt.Errorf("acquire %s: %w", key, err)
	}
	return l, nil
}

func (s *Session) acquire(ctx context.Context, key, holder string, opts []LockOption) (l *Lock, err error) {
	cfg, err := s.prepare(key, holder, opts)
	if err != nil {
		return nil, err
	}
	if held := s.heldLock(key); held != nil {
		return nil, &HeldError{Holder: held.holder, Token: held.token, Lease: s.id}
	}
	if err := s.claim(key); err != nil {
		return nil, err
	}
	defer s.unclaim(key)

	ctx, cancel := s.bind(ctx)
	defer cancel()
	v := value{Holder: holder, Record: cfg.record, Call: newCallID()}
	var w *waiter
	var ambiguous *instant // send time of the first transaction whose answer was lost
	defer func() {
		// What this call may have left is the session's to delete (settle
		// retries it); a session that ended takes it with its lease.
		if err == nil {
			return
		}
		var los []leftover
		if w != nil {
			los = append(los, w.leftover())
		}
		if ambiguous != nil {
			los = append(los, s.lockLeftover(key, v))
		}
		s.settle(ctx, los...)
	}()

	// Transient etcd errors (a leader election, a lost connection) do not
	// end the wait: the loop backs off and reads again until ctx or the
	// session ends, keeping its place in the queue.
	//
	// Writes are what a handoff waits for (each is a raft round and an
	// fsync), so the loop sends one only when it can apply: join takes the
	// lock or queues in one transaction, and a waiter woken by its
	// predecessor's departure looks (a read) before it grabs.
	queued := false
	look := false // read before grabbing: the predecessor's entry went
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if queued && (w == nil || w.rev == 0) {
			if w, err = s.enqueue(ctx, key, v); err != nil {
				if !unknownOutcome(err) && !overloaded(err) {
					return nil, err // refused: nothing was written
				}
				s.backoff(ctx)
				continue
			}
		}
		var l *Lock
		var o obstacle
		var err error
		switch {
		case w == nil && len(cfg.guards) == 0:
			var known bool
			l, w, o, known, err = s.join(ctx, key, v)
			if err != nil && !errors.Is(err, ErrUnknownOutcome) && !known {
				// Queued, but the predecessor is unknown: read it.
				queued, look = true, true
				continue
			}
			if w != nil {
				queued = true
			}
		case look:
			if o, err = w.look(ctx, key); err != nil {
				if !unknownOutcome(err) && !overloaded(err) {
					return nil, err
				}
				s.backoff(ctx)
				continue
			}
			if err = o.err(); !o.blocked() {
				l, o, err = s.grab(ctx, key, v, cfg, w)
			}
		default:
			l, o, err = s.grab(ctx, key, v, cfg, w)
		}
		look = false
		switch {
		case err == nil:
			return l, nil
		case errors.Is(err, ErrUnknownOutcome):
			if ambiguous == nil {
				ambiguous = &o.sent
			}
			s.backoff(ctx)
			continue
		case overloaded(err):
			// Nothing applied, and etcd will catch up: try again, keeping
			// any place in the queue.
			s.backoff(ctx)
			continue
		case o.holder != nil && clientv3.LeaseID(o.holder.Lease) == s.id:
			// Our own lease holds the key: a transaction of this call
			// whose answer was lost created it (it is ours since before
			// that transaction was sent), or something else did, and
			// waiting for ourselves would never end.
			if ambiguous != nil && string(o.holder.Value) == v.encode() {
				if w != nil {
					s.settle(ctx, w.leftover()) // normally gone with the transaction
				}
				return s.claimOrphan(ctx, key, v, o.holder, *ambiguous)
			}
			if s.leftoverAt(string(o.holder.Key)) {
				// An earlier call of this session left it; this call holds
				// the key's busy mark, so it deletes it itself.
				s.cleanNow(ctx, string(o.holder.Key))
				s.backoff(ctx)
				continue
			}
			return nil, err
		case !o.blocked():
			return nil, err // a guard failed: waiting will not help
		case w == nil || o.lost:
			// Not queued yet, or our entry vanished (an operator deleted
			// it): take a place at the back.
			queued = true
			if w != nil {
				w.rev = 0
			}
			continue
		}
		var changed bool
		if o.pred != nil {
			changed, err = s.waitGone(ctx, o.pred)
			// The predecessor left, usually because it took the lock:
			// read before grabbing.
			look = true
		} else {
			var kvs []*mvccpb.KeyValue
			if o.holder != nil {
				kvs = append(kvs, o.holder)
			}
			if o.tomb != nil {
				kvs = append(kvs, o.tomb)
			}
			changed, err = s.waitGone(ctx, kvs...)
		}
		if err != nil {
			return nil, err
		}
		if !changed {
			// The watch failed or no change came within TTL/3 (a stalled
			// watch looks like no change): read again, before any write.
			look = true
			s.backoff(ctx)
		}
	}
}

// claimOrphan takes as ours the lock key kv that one of our acquire
// transactions created although its answer was lost; sent is the send time
// of the first such transaction, before which the key cannot have been
// created.
func (s *Session) claimOrphan(ctx context.Context, key string, v value, kv *mvccpb.KeyValue, sent instant) (*Lock, error) {
	l := s.newLock(key, kv.CreateRevision, v)
	if err := s.register(l, sent, kv.ModRevision+1); err != nil {
		s.settle(ctx, s.lockLeftover(key, v))
		return nil, err
	}
	return l, nil
}

// backoff waits a little before retrying after an error.
func (s *Session) backoff(ctx context.Context) {
	t := time.NewTimer(s.retryDelay())
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// heldLock returns this session's live Lock of key, if any, ending it first
// if its validity has passed.
func (s *Session) heldLock(key string) *Lock {
	n := now()
	s.mu.Lock()
	l := s.locks[key]
	ok, p := false, pending{}
	if l != nil {
		ok, p = l.validLocked(n)
	}
	s.mu.Unlock()
	p.run()
	if !ok {
		return nil
	}
	return l
}

// bind returns a context that is cancelled when ctx is or when the session
// ends, so that a waiter blocked in a call or a watch notices its own
// session's loss.
func (s *Session) bind(ctx context.Context) (context.Context, context.CancelFunc) {
	bctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(s.ctx, func() { cancel(context.Cause(s.ctx)) })
	return bctx, func() {
		stop()
		cancel(context.Canceled)
	}
}
