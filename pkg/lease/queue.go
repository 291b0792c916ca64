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
// P/queue/<escaped key>/<lease hex>, and the oldest entry is the grant once
// the lock key and its tombstone are gone (owner.go): a release hands the
// lock over in its one write, and the next waiter writes nothing to take it.
// Each waiter watches only the entry just ahead of it, and only the oldest
// watches the lock key and its tombstone, so a release wakes one waiter, not
// all. Every watch starts at the current revision (etcd serves those from its
// synced set, without the 100 ms catch-up of a watch from an old revision)
// and is followed by a re-read, so no deletion between the read and the watch
// is missed. A woken waiter reads whether it is the grant at the revision
// its watch reported (serializable reads of that fixed revision: no raft
// round), and its validity starts at the send time of its newest
// linearizable read that showed it still waiting (sent before it became the
// grant, and refreshed whenever a wait starts with it older than TTL/3);
// without such a read, or if etcd cannot answer for that revision, it reads
// linearizably and its validity starts at that read's send time. A
// blocking Acquire writes once: to take the free lock or to queue, in one
// transaction; one that last found the key free first tries TryAcquire's
// leaner transaction (wasFree). With WithGuard compares (or a record over 256
// KiB) it first tries TryAcquire's transaction, then queues; with guards, it
// takes the lock only from a read in which they held.
//
// A waiter ends with its session: Acquire returns the session's error
// (ErrSessionExpired, ErrSessionClosed) promptly after it ends. A waiter
// re-reads at least every TTL/3, so a stalled watch never blocks it. On any
// error, its queue entry (which may have become the grant meanwhile: the
// delete then hands the lock on), and a lock key an interrupted transaction
// may have created, are deleted again, by the call and then by the session
// until that succeeds (see Session); a session that expired tries that delete
// once. An entry an earlier call of this session left is deleted (even one
// that became the grant meanwhile: that hands the lock on) and the call
// queues at the back. An error etcd refused a request with (too many
// operations, request too large, ...) is returned at once; only lost answers,
// and etcd's "too many requests" (it applied nothing and is catching up), are
// retried. A key this session already holds yields a *HeldError at once,
// since waiting for it would never end.
func (s *Session) Acquire(ctx context.Context, key, holder string, opts ...LockOption) (*Lock, error) {
	l, err := s.acquire(ctx, key, holder, opts)
	if err != nil {
		s.leaseGone(err)
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
	if err := s.claim(ctx, key); err != nil {
		return nil, err
	}
	defer s.unclaim(key)

	ctx, cancel := s.bind(ctx)
	defer cancel()
	v := value{Holder: holder, Record: cfg.record, Call: newCallID()}
	var w *waiter
	var ambiguous *instant // send time of the first transaction whose answer was lost
	unsure := false        // an enqueue's answer was lost
	defer func() {
		// What this call may have left is the session's to delete (settle
		// retries it); a session that ended takes it with its lease. After
		// a lost answer the clean-up puts the call's tombstone first, which
		// every write of the call compares absent: a write only delayed in
		// the network then creates nothing when it lands (review 22).
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
		if ambiguous != nil || unsure {
			for i := range los {
				los[i].gone = s.eng.gonePath(v.Call)
			}
		}
		s.settle(ctx, los...)
		s.abandon(los...)
	}()

	// Transient etcd errors (a leader election, a lost connection) do not
	// end the wait: the loop backs off and reads again until ctx or the
	// session ends, keeping its place in the queue.
	queued := false
	var at int64 // > 0: the revision of a change the waiter's watch saw, to read at
	lean := s.wasFree(key)
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if queued && (w == nil || w.rev == 0) {
			if w, err = s.enqueue(ctx, key, v); err != nil {
				if !unknownOutcome(err) && !overloaded(err) && !errors.Is(err, errLeftGrant) {
					return nil, err // refused: nothing was written
				}
				unsure = unsure || unknownOutcome(err)
				s.backoff(ctx)
				continue
			}
		}
		var l *Lock
		var o obstacle
		var err error
		switch {
		case w == nil && len(cfg.guards) == 0 && joinable(v) && !lean:
			var known bool
			l, w, o, known, err = s.join(ctx, key, v)
			if err != nil && !errors.Is(err, ErrUnknownOutcome) && !known {
				queued = true // queued, but the predecessor is unknown: read it
				continue
			}
			if w != nil {
				queued = true
			}
		case w == nil:
			l, o, err = s.grab(ctx, key, v, cfg, true)
		case at > 0 && w.seen != 0 && len(cfg.guards) == 0:
			o, err = w.lookAt(ctx, at)
			at = 0
			if err != nil {
				continue // read linearizably instead
			}
			if !o.blocked() && !historyUsable(w.seen, now(), s.interval()) {
				continue // the grant, but seen too old to count from: read linearizably
			}
			l, err = s.take(ctx, w, v, o, nil)
		default:
			at = 0
			if o, err = w.look(ctx, cfg.guards); err != nil {
				if !unknownOutcome(err) && !overloaded(err) {
					return nil, err
				}
				s.backoff(ctx)
				continue
			}
			l, err = s.take(ctx, w, v, o, cfg.guards)
		}
		switch {
		case err == nil:
			s.noteFree(key, w == nil)
			if ambiguous != nil || unsure {
				s.bury(ctx, l, v)
			}
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
					s.settle(ctx, w.leftover()) // normally never written
				}
				l, err := s.claimOrphan(ctx, key, v, o.holder, *ambiguous)
				if err == nil {
					s.bury(ctx, l, v)
				}
				return l, err
			}
			if s.leftoverAt(string(o.holder.Key)) {
				// An earlier call of this session left it; this call holds
				// the key's busy mark, so it deletes it itself.
				s.cleanNow(ctx, string(o.holder.Key))
				s.backoff(ctx)
				continue
			}
			return nil, err
		case errors.Is(err, errRegrantRaced):
			continue // the entry is not the grant (any more): read again
		case !o.blocked():
			return nil, err // a guard failed, or the grant could not be registered
		case w == nil || o.lost:
			// Not queued yet, or our entry vanished (an operator deleted
			// it): take a place at the back.
			queued = true
			if w != nil {
				w.rev = 0
			}
			continue
		}
		since := o.rev
		if !historyUsable(w.seen, now(), s.interval()) {
			since = 0 // re-read linearizably once the watches start, refreshing seen
		}
		var changed bool
		if o.pred != nil {
			changed, at, err = s.waitGone(ctx, since, &w.seen, o.pred)
		} else {
			var kvs []*mvccpb.KeyValue
			if o.holder != nil {
				kvs = append(kvs, o.holder)
			}
			if o.tomb != nil {
				kvs = append(kvs, o.tomb)
			}
			changed, at, err = s.waitGone(ctx, since, &w.seen, kvs...)
		}
		if err != nil {
			return nil, err
		}
		if !changed {
			// The watch failed or no change came within TTL/3 (a stalled
			// watch looks like no change): back off, then read again.
			s.backoff(ctx)
		}
	}
}

// bury puts the tombstone of a call that got its lock l after a lost answer
// (review mx): the lost write may still be on its way, and once l is
// released it would find the lock free and create a key of the call (a lock
// key, or an entry that becomes the grant) on the session's lease, for
// nobody. It settles, with the tombstone, both keys the call may have
// written: a stray entry behind l's lock key is deleted, and so is a key the
// call's write created at l's own path after l's Release; l's grant itself
// (its token) is never touched, now or by a retry of the session's clean-up
// after l ended (a lapsed Lock's key stays for Adopt). While l holds its key
// no write of the call can create anything but that stray entry (a lock key
// needs the lock free and nobody queued; the entry exists when it is the
// grant), so the tombstone, put now, comes in time; what settle cannot do now,
// the session's clean-up retries.
func (s *Session) bury(ctx context.Context, l *Lock, v value) {
	los := []leftover{s.lockLeftover(l.key, v), s.newWaiter(l.key, v).leftover()}
	for i := range los {
		if los[i].path == l.path {
			los[i].keep = l.token
		}
		los[i].gone = s.eng.gonePath(v.Call)
	}
	s.settle(ctx, los...)
}

// historyUsable reports whether a grant learned from history (lookAt) may
// count its validity from seen, the send time of the waiter's newest
// linearizable read that showed it waiting, at n: only while seen is less
// than one period (TTL/3) old. Waiters ahead that leave one by one wake the
// waiter with reads of history that still show someone ahead, which never
// refresh seen; so a wait that starts with seen older than that re-reads
// linearizably once its watches start (refreshing seen), and a grant found
// in history with an older seen is read again linearizably, its validity
// then counted from that read.
func historyUsable(seen, n instant, period time.Duration) bool {
	return seen != 0 && n.Sub(seen) < period
}

// wasFree reports whether this session's last Acquire of key found it free
// (took it without queuing). Such an Acquire tries TryAcquire's lean
// transaction first, which etcd decodes, logs and applies faster than join's
// (whose Else branch carries the queue entry and five reads); if the lock is
// taken after all, the lean try costs one more write, then the call queues
// (enqueue) and the key is remembered as contended.
func (s *Session) wasFree(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.free[key]
}

// maxFree bounds the keys wasFree remembers per session.
const maxFree = 256

// noteFree records how this session's Acquire of key ended: free (taken
// without queuing) or not.
func (s *Session) noteFree(key string, free bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case !free:
		delete(s.free, key)
	case len(s.free) >= maxFree && !s.free[key]:
		clear(s.free)
		fallthrough
	default:
		s.free[key] = true
	}
}

// maxJoinValue is the largest encoded value join sends: its transaction
// carries the value twice (the lock key's put and the entry's), and etcd
// refuses requests over 1.5 MiB by default. A larger value takes TryAcquire's
// transaction and then the enqueue, one copy each, so that etcd's own
// refusal of a value too large for it comes back as itself.
const maxJoinValue = 256 << 10

// joinable reports whether an acquire of v may use join.
func joinable(v value) bool { return len(v.Record)+len(v.Holder) <= maxJoinValue }

// take registers the waiter's entry as the lock's grant when the read o
// showed it to be one (nothing ahead of it, no lock key, no tombstone: the
// ownership rule) and the WithGuard compares held in that read. The entry
// was the grant at o.rev, and o.sent is a send time before that (the read's
// own, or, for a read of history, w.seen): the lock's validity counts from
// then. If that leaves less than two ownership-check periods, it asks the
// session for a check now. An outrun waiter (regrant.go) takes the lock by
// regrant's write instead, which carries guards (the caller's WithGuard
// compares: a write applies only if they still hold). Otherwise it returns
// why not.
func (s *Session) take(ctx context.Context, w *waiter, v value, o obstacle, guards []clientv3.Cmp) (*Lock, error) {
	switch {
	case o.blocked():
		return nil, o.err()
	case !o.guarded:
		return nil, ErrGuardFailed
	case w.outrun:
		return s.regrant(ctx, w, v, guards)
	}
	l := s.newLock(w.key, w.path, w.rev, v)
	if err := s.register(l, o.sent, o.rev+1); err != nil {
		return nil, err // the caller's clean-up deletes the entry, handing the lock on
	}
	if o.sent.Add(s.ttl-s.margin).Sub(now()) < 2*s.interval() {
		s.requestCheck()
	}
	return l, nil
}

// claimOrphan takes as ours the lock key kv that one of our acquire
// transactions created although its answer was lost; sent is the send time
// of the first such transaction, before which the key cannot have been
// created.
func (s *Session) claimOrphan(ctx context.Context, key string, v value, kv *mvccpb.KeyValue, sent instant) (*Lock, error) {
	l := s.newLock(key, s.eng.Path(key), kv.CreateRevision, v)
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
