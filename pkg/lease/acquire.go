package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TryAcquire takes the lock named key for holder, or fails at once. It is
// one transaction:
//
//	If(CreateRevision(key) == 0, tombstone absent, queue empty, guards...)
//	Then(Put(key, {holder, record}, WithLease(session)))
//
// so it never barges past blocking waiters. A held key yields a *HeldError
// (ErrLocked), at once and without asking etcd when a live Lock of this
// session tracks it; so does a queue, whose oldest entry is the grant
// (owner.go), naming that waiter; a lock-delay yields ErrLocked; a failed
// WithGuard compare yields ErrGuardFailed. holder is opaque: a controller can
// take many keys on one session on behalf of many holders. If the
// transaction's answer was lost (the error wraps ErrUnknownOutcome), a key it
// may have created is deleted again by the session, which retries until that
// is settled (see Session); the clean-up first puts the call's tombstone
// P/gone/<call id> on the session's lease (kept for the session's life), and
// the transaction compares it absent, so that the transaction, if it was only
// delayed and lands later, creates nothing (review 22).
func (s *Session) TryAcquire(ctx context.Context, key, holder string, opts ...LockOption) (*Lock, error) {
	l, err := s.tryAcquire(ctx, key, holder, opts)
	if err != nil {
		if s.leaseGone(err) {
			err = fmt.Errorf("%w (%w)", s.Err(), err)
		}
		return nil, fmt.Errorf("try acquire %s: %w", key, err)
	}
	return l, nil
}

func (s *Session) tryAcquire(ctx context.Context, key, holder string, opts []LockOption) (l *Lock, err error) {
	cfg, err := s.prepare(key, holder, opts)
	if err != nil {
		return nil, err
	}
	if held := s.heldLock(key); held != nil {
		// Asking etcd could succeed (the key deleted behind the Lock's back)
		// and replace a Lock that has not noticed yet.
		return nil, &HeldError{Holder: held.holder, Token: held.token, Lease: s.id}
	}
	if err := s.claim(ctx, key); err != nil {
		return nil, err
	}
	defer s.unclaim(key)
	v := value{Holder: holder, Record: cfg.record, Call: newCallID()}
	l, _, err = s.grab(ctx, key, v, cfg, false)
	if errors.Is(err, ErrUnknownOutcome) {
		lo := s.lockLeftover(key, v)
		lo.gone = s.eng.gonePath(v.Call)
		s.settle(ctx, lo)
	}
	return l, err
}

// prepare validates the arguments of an acquire.
func (s *Session) prepare(key, holder string, opts []LockOption) (lockConfig, error) {
	if err := s.eng.check(key); err != nil {
		return lockConfig{}, err
	}
	if err := validateHolder(holder); err != nil {
		return lockConfig{}, err
	}
	return s.eng.lockConfig(opts)
}

// claim marks key as being acquired by this session. Two acquires (or an
// acquire and an adopt, or either and the session's clean-up of the key) of
// one key in one session never overlap, so a key of ours that an
// interrupted acquire may have created can be told apart. A key a live Lock
// of this session tracks is refused. A mark the session's clean-up loop holds
// (one read and one delete, bounded by TTL/4) is waited for, as long as ctx
// allows: it is the engine's own, not a call of the caller's.
func (s *Session) claim(ctx context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ch := s.cleaning[key]; ch != nil; ch = s.cleaning[key] {
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			s.mu.Lock()
			return ctx.Err()
		}
		s.mu.Lock()
	}
	switch {
	case s.err != nil:
		return s.err
	case s.busy[key]:
		return fmt.Errorf("%w: another acquire, adopt or clean-up of this key is in flight", ErrBusy)
	case s.locks[key] != nil:
		return fmt.Errorf("%w: this session holds the key with token %d", ErrBusy, s.locks[key].token)
	}
	s.busy[key] = true
	return nil
}

func (s *Session) unclaim(key string) {
	s.mu.Lock()
	delete(s.busy, key)
	s.mu.Unlock()
}

// obstacle is what kept an acquire transaction from applying, as read by its
// Else branch at the transaction's revision, or what a waiter's read saw.
type obstacle struct {
	holder  *mvccpb.KeyValue // the lock key, if held
	tomb    *mvccpb.KeyValue // the tombstone, if a ForceRelease lock-delay is in effect
	oldest  *mvccpb.KeyValue // TryAcquire: the oldest queue entry (the grant, when holder and tomb are nil)
	waiters int64            // TryAcquire: queued entries
	busy    bool             // a lean try failed: held, queued for or in a lock-delay (not read which)
	pred    *mvccpb.KeyValue // queued: the waiter just ahead of us
	lost    bool             // queued: our waiter entry is gone
	guarded bool             // queued: the WithGuard compares held at the read (true without any)
	rev     int64            // queued: the revision of the read
	sent    instant          // when the transaction was sent
}

// blocked reports whether anything but a guard stood in the way.
func (o obstacle) blocked() bool {
	return o.holder != nil || o.tomb != nil || o.waiters > 0 || o.busy || o.pred != nil || o.lost
}

// grab runs TryAcquire's transaction (Grant's too, and an Acquire's first
// try when it has guards or expects a free lock) and registers the lock it
// created. A lean grab (an Acquire without guards) reads nothing when it
// fails: the caller queues whatever stood in the way. The returned error
// wraps ErrUnknownOutcome when etcd's answer was not received.
func (s *Session) grab(ctx context.Context, key string, v value, cfg lockConfig, lean bool) (*Lock, obstacle, error) {
	rev, o, err := s.grabTxn(ctx, key, v, cfg, lean)
	if err != nil {
		return nil, o, err
	}
	l, err := s.granted(ctx, key, v, rev, o.sent)
	return l, obstacle{sent: o.sent}, err
}

// grabTxn sends TryAcquire's transaction and returns the revision that
// created the key (the token), or what stood in the way. o.sent is always
// set. Which compare guards what:
//
//	CreateRevision(lock key) == 0          nobody holds the lock key
//	CreateRevision(tombstone) == 0         no ForceRelease lock-delay
//	CreateRevision(queue prefix) == 0      nobody queues (true for an empty range):
//	                                       no barging, and no grant of an entry
//	                                       (owner.go) can exist or be overtaken
//	CreateRevision(P/gone/<call id>) == 0  the call has not given up (TryAcquire's
//	                                       clean-up after a lost answer puts it;
//	                                       a value without a call ID, Grant's, has none)
//	guards...                              the caller's (WithGuard)
func (s *Session) grabTxn(ctx context.Context, key string, v value, cfg lockConfig, lean bool) (int64, obstacle, error) {
	e := s.eng
	path, tomb, qdir := e.Path(key), e.tombPath(key), e.queueDir(key)
	cmps := []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(path), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(tomb), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(qdir), "=", 0).WithPrefix(),
	}
	cmps = append(cmps, e.callAlive(v)...)
	cmps = append(cmps, cfg.guards...)
	var els []clientv3.Op
	if !lean || len(cfg.guards) > 0 {
		els = append(e.stateReads(key), clientv3.OpGet(qdir, clientv3.WithPrefix(), clientv3.WithCountOnly()))
	}

	o := obstacle{sent: now()}
	tctx, cancel := s.callContext(ctx)
	resp, err := s.cli.Txn(tctx).If(cmps...).
		Then(clientv3.OpPut(path, v.encode(), clientv3.WithLease(s.id))).
		Else(els...).Commit()
	cancel()
	if err != nil {
		return 0, o, writeErr(err)
	}
	if resp.Succeeded {
		return resp.Header.Revision, o, nil
	}
	if len(els) == 0 {
		o.busy = true // no guards: one of the three compares failed
		return 0, o, o.err()
	}
	st := readState(resp.Responses)
	o.holder, o.tomb, o.oldest = st.lock, st.tomb, st.oldest
	o.waiters = resp.Responses[3].GetResponseRange().Count
	if o.blocked() {
		return 0, o, o.err()
	}
	return 0, o, ErrGuardFailed
}

// callAlive is the compare that refuses a write of the call that made v once
// the call has given up: its tombstone P/gone/<call id> absent (put by the
// call's clean-up after an answer was lost). A value without a call ID
// (Grant's) has none.
func (e *Engine) callAlive(v value) []clientv3.Cmp {
	if v.Call == "" {
		return nil
	}
	return []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(e.gonePath(v.Call)), "=", 0)}
}

// granted registers the lock that an acquire transaction sent at sent
// created at revision rev.
func (s *Session) granted(ctx context.Context, key string, v value, rev int64, sent instant) (*Lock, error) {
	l := s.newLock(key, s.eng.Path(key), rev, v)
	if err := s.register(l, sent, rev+1); err != nil {
		s.settle(ctx, s.lockLeftover(key, v))
		return nil, err
	}
	return l, nil
}

// lockReads reads what can keep a lock from being free: the lock key and
// its tombstone. obstacle.readLock parses their answers.
func (s *Session) lockReads(key string, opts ...clientv3.OpOption) []clientv3.Op {
	return []clientv3.Op{
		clientv3.OpGet(s.eng.Path(key), opts...),
		clientv3.OpGet(s.eng.tombPath(key), append([]clientv3.OpOption{clientv3.WithKeysOnly()}, opts...)...),
	}
}

// readLock fills in the holder and the tombstone from the answers to
// lockReads.
func (o *obstacle) readLock(rs []*etcdserverpb.ResponseOp) {
	if kvs := rs[0].GetResponseRange().Kvs; len(kvs) > 0 {
		o.holder = kvs[0]
	}
	if kvs := rs[1].GetResponseRange().Kvs; len(kvs) > 0 {
		o.tomb = kvs[0]
	}
}

// err is the error of an acquire that o kept from applying.
func (o obstacle) err() error {
	switch {
	case o.holder != nil:
		hv := decodeValue(o.holder.Value)
		return &HeldError{Holder: hv.Holder, Token: o.holder.CreateRevision, Lease: clientv3.LeaseID(o.holder.Lease)}
	case o.tomb != nil:
		return fmt.Errorf("%w: lock-delay after a forced release", ErrLocked)
	case o.oldest != nil:
		// The oldest waiter's entry is the grant (owner.go).
		hv := decodeValue(o.oldest.Value)
		return &HeldError{Holder: hv.Holder, Token: o.oldest.CreateRevision, Lease: clientv3.LeaseID(o.oldest.Lease)}
	case o.busy:
		return fmt.Errorf("%w: held, queued for, or in a lock-delay", ErrLocked)
	case o.waiters > 0:
		return fmt.Errorf("%w: %d waiters queued", ErrLocked, o.waiters)
	}
	return fmt.Errorf("%w: waiting in the queue", ErrLocked)
}

// register starts tracking a lock that etcd confirmed at a transaction sent
// at sent; fromRev is where its watch starts. If the session ended meanwhile,
// or the confirmation came back after the validity it would give had already
// passed, it returns an error (and the caller deletes a key it created).
func (s *Session) register(l *Lock, sent instant, fromRev int64) error {
	n := now()
	s.mu.Lock()
	l.ownUntil = sent.Add(s.ttl - s.margin)
	ok, p := s.validLocked(n)
	var err error
	switch {
	case !ok:
		err = s.err
	case n >= l.ownUntil:
		err = fmt.Errorf("%w: the acquire took longer than TTL - margin", ErrExpired)
	default:
		s.locks[l.key] = l
		// The WaitGroup counts the monitor from now; finish disarms the
		// timer if the lock ends before it fires.
		s.wg.Add(1)
		l.start = time.AfterFunc(watchDelay, func() { l.monitor(fromRev) })
	}
	s.mu.Unlock()
	p.run()
	if err == nil {
		return nil
	}
	l.err, l.endedAt = err, n
	l.finish()
	close(l.exited)
	return err
}

// cleanupContext bounds the clean-up after a failed or cancelled call: it
// keeps ctx's values but not its cancellation, since a cancelled caller is
// the usual reason for cleaning up.
func (s *Session) cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), s.callTimeout())
}

// tracks reports whether a live Lock of this session holds key at token.
func (s *Session) tracks(key string, token int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.locks[key]
	return l != nil && l.token == token
}

// callContext bounds one acquire transaction by TTL/4 (below the renewal period), so that one
// hung etcd member (stopped, not refusing) cannot hold an acquire, and every waiter queued
// behind it, for as long as it hangs: past the deadline the outcome is unknown, the caller
// reads again, and the client's balancer sends the next call to another member.
func (s *Session) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.callTimeout())
}
