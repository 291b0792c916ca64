package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// errSessionLapsed is the cause when no renewal was confirmed in time.
var errSessionLapsed = fmt.Errorf("%w: no renewal confirmed within TTL - margin", ErrSessionExpired)

// Session is one etcd lease, renewed by the session's own loop, and the locks
// held on it. It may hold many keys, for one holder or for many (a
// controller's "grant lease"). It is safe for concurrent use.
//
// The loop sends KeepAliveOnce every TTL/3, each call with a deadline of
// TTL/4, and records the send time S of each one etcd confirms: etcd cannot
// expire the lease before S + TTL, so the session is valid until
// S + TTL - margin. Done closes when that passes without a newer
// confirmation, when etcd reports the lease gone, or on Close, Orphan or when
// the etcd client is closed: whichever comes first, once.
//
// The session also owns the clean-up of what its failed calls left (a lock
// key whose acquire answer was lost, a cancelled waiter's queue entry): its
// clean-up loop retries each, guarded, until it is settled or the session
// ends, so that a lost reply never blocks a lock for the session's life.
// While it works on a lock key, an acquire of that key in this session gets
// ErrBusy for that moment.
type Session struct {
	eng    *Engine
	cli    *clientv3.Client
	id     clientv3.LeaseID
	ttl    time.Duration
	margin time.Duration

	// ctx is cancelled, with the session's cause, exactly when the session
	// ends; it bounds the loops and is the parent of every lock's context.
	ctx         context.Context
	stop        context.CancelCauseFunc
	stopOnClose func() bool // unregisters the client-close hook
	done        chan struct{}
	wg          sync.WaitGroup // renewal loop, check loop, clean-up loop, lock monitors
	checkc      chan struct{}  // asks the check loop for a round now
	cleanc      chan struct{}  // asks the clean-up loop for a round now

	mu         sync.Mutex
	validUntil instant
	err        error // why the session ended; nil while it lives
	endedAt    instant
	locks      map[string]*Lock         // held keys, by lock name
	busy       map[string]bool          // lock names with an acquire, adopt or clean-up in flight
	cleaning   map[string]chan struct{} // lock names the clean-up loop marks busy: closed when it is done
	leftovers  map[string][]leftover    // by etcd key: what failed calls may have left
	free       map[string]bool          // lock names this session's last Acquire found free (wasFree)
	keepStop   context.CancelFunc       // ends keepWatchStream's idle watch; nil when none runs
}

// NewSession grants an etcd lease of ttl (whole seconds, at least MinTTL)
// and starts renewing it. ctx bounds the grant only; the session lives until
// it ends as described on Session. (If ctx ends while the grant is in
// flight, a lease etcd may have granted is unknown to the caller; nothing
// renews it, so it expires after ttl.)
func (e *Engine) NewSession(ctx context.Context, ttl time.Duration, opts ...SessionOption) (*Session, error) {
	cfg := sessionConfig{}
	for _, o := range opts {
		o(&cfg)
	}
	if err := e.validateSession(ttl, cfg); err != nil {
		return nil, fmt.Errorf("new session: %w", err)
	}
	sent := now()
	resp, err := e.cli.Grant(ctx, int64(ttl/time.Second))
	if err != nil {
		return nil, fmt.Errorf("new session: grant: %w", err)
	}
	granted := time.Duration(resp.TTL) * time.Second
	margin, _ := cfg.resolve(granted) // granted >= ttl, so still valid
	e.reserve(resp.ID)                // a new lease: nobody else renews it
	return e.start(resp.ID, granted, margin, sent), nil
}

// ResumeSession takes over the lease id, for example after a restart, and
// starts renewing it. Its lock keys stay held: they are the resumer's to
// Adopt (a *Lock for each) or release (Engine.Release); Session.Keys lists
// them. Its queue entries (of Acquire and AcquireSlot) belong to calls that died with the process
// that made them: the new session deletes them (guarded by their
// CreateRevision and the lease), so that they block no one. The
// lease's granted TTL must be at least MinTTL. A lease that is gone yields
// ErrSessionExpired; a lease that a live session of this engine renews
// yields ErrBusy.
//
// WARNING: etcd cannot tell who renews a lease. Two processes (or two
// engines) that resume the same lease both renew it, and both can Adopt the
// same key with the same token: two valid Locks, one token, and no fencing
// between them (the token is the same). Resume a lease only where something
// else guarantees a single owner, as the controller does with its election
// (the grant lease is resumed by the elected replica only, and every write
// it makes carries the election's compare).
func (e *Engine) ResumeSession(ctx context.Context, id clientv3.LeaseID, opts ...SessionOption) (*Session, error) {
	cfg := sessionConfig{}
	for _, o := range opts {
		o(&cfg)
	}
	if e.err != nil {
		return nil, fmt.Errorf("resume session %x: %w", int64(id), e.err)
	}
	s, err := e.resume(ctx, id, cfg)
	if err != nil {
		return nil, fmt.Errorf("resume session %x: %w", int64(id), err)
	}
	return s, nil
}

func (e *Engine) resume(ctx context.Context, id clientv3.LeaseID, cfg sessionConfig) (*Session, error) {
	sent := now()
	resp, err := e.cli.KeepAliveOnce(ctx, id)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return nil, fmt.Errorf("%w: lease not found", ErrSessionExpired)
	}
	if err != nil {
		return nil, err
	}
	ttl := time.Duration(resp.TTL) * time.Second
	if err := e.validateSession(ttl, cfg); err != nil {
		return nil, err
	}
	margin, _ := cfg.resolve(ttl)
	stale, err := e.staleEntries(ctx, id)
	if err != nil {
		return nil, err
	}
	if !e.reserve(id) {
		return nil, fmt.Errorf("%w: a live session of this engine renews the lease", ErrBusy)
	}
	s := e.start(id, ttl, margin, sent)
	s.settle(ctx, stale...)
	return s, nil
}

func (e *Engine) validateSession(ttl time.Duration, cfg sessionConfig) error {
	if e.err != nil {
		return e.err
	}
	if ttl < MinTTL {
		return invalidf("ttl %v is below the minimum %v", ttl, MinTTL)
	}
	if ttl%time.Second != 0 {
		return invalidf("ttl %v is not a whole number of seconds (etcd leases are)", ttl)
	}
	_, err := cfg.resolve(ttl)
	return err
}

// start begins renewing a lease whose last confirmed renewal (or grant) was
// sent at sent.
func (e *Engine) start(id clientv3.LeaseID, ttl, margin time.Duration, sent instant) *Session {
	s := &Session{
		eng: e, cli: e.cli, id: id, ttl: ttl, margin: margin,
		done:       make(chan struct{}),
		checkc:     make(chan struct{}, 1),
		cleanc:     make(chan struct{}, 1),
		leftovers:  make(map[string][]leftover),
		validUntil: sent.Add(ttl - margin),
		locks:      make(map[string]*Lock),
		busy:       make(map[string]bool),
		cleaning:   make(map[string]chan struct{}),
		free:       make(map[string]bool),
	}
	// The session's context is cancelled only by end, so that a cancelled
	// context always comes with a recorded cause; closing the client ends the
	// session through the hook below.
	s.ctx, s.stop = context.WithCancelCause(context.WithoutCancel(e.cli.Ctx()))
	s.stopOnClose = context.AfterFunc(e.cli.Ctx(), func() {
		s.end(fmt.Errorf("%w: etcd client closed", ErrSessionClosed))
	})
	s.wg.Add(3)
	go s.renewLoop(sent)
	go s.checkLoop()
	go s.cleanLoop()
	return s
}

// ID returns the session's etcd lease ID.
func (s *Session) ID() clientv3.LeaseID { return s.id }

// TTL returns the lease's granted TTL.
func (s *Session) TTL() time.Duration { return s.ttl }

// Margin returns the safety margin subtracted from validities.
func (s *Session) Margin() time.Duration { return s.margin }

// Engine returns the engine the session belongs to.
func (s *Session) Engine() *Engine { return s.eng }

// Client returns the session's etcd client.
func (s *Session) Client() *clientv3.Client { return s.cli }

// Done returns a channel closed when the session ends.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err returns why the session ended (wrapping ErrSessionExpired or
// ErrSessionClosed), or nil while it lives.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Valid reports whether the session is within its validity. It reads the
// clock itself, so it is right even when timers fire late (after a suspend
// or a pause); once it returns false it never returns true again.
func (s *Session) Valid() bool {
	n := now()
	s.mu.Lock()
	ok, p := s.validLocked(n)
	s.mu.Unlock()
	p.run()
	return ok
}

// ValidUntil returns the end of the session's validity, projected onto the
// wall clock (with a monotonic reading). After the session ended it is no
// later than the moment it ended.
func (s *Session) ValidUntil() time.Time {
	s.mu.Lock()
	vu := s.validUntil
	if s.err != nil {
		vu = min(vu, s.endedAt)
	}
	s.mu.Unlock()
	return vu.Wall()
}

// Close ends the session, its locks and its goroutines, then revokes the
// lease, which deletes every key on it. ctx bounds the revoke; if it fails the
// lease expires on its own within the TTL.
func (s *Session) Close(ctx context.Context) error {
	s.end(ErrSessionClosed)
	s.wg.Wait()
	if err := s.cli.Ctx().Err(); err != nil {
		// A closed client would only retry until ctx ends.
		return fmt.Errorf("close session %x: revoke: etcd client closed", int64(s.id))
	}
	if _, err := s.cli.Revoke(ctx, s.id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("close session %x: revoke: %w", int64(s.id), err)
	}
	return nil
}

// Orphan ends the session and its goroutines without revoking the lease: its
// keys stay until the lease expires, or until ResumeSession takes it over.
func (s *Session) Orphan() {
	s.end(fmt.Errorf("%w: orphaned", ErrSessionClosed))
	s.wg.Wait()
}

// pending is the part of ending a session or locks that must run after s.mu
// is released: cancelling contexts and closing channels.
type pending struct {
	session *Session // non-nil: the session ended
	cause   error
	locks   []*Lock
}

func (p pending) run() {
	if s := p.session; s != nil {
		s.stopOnClose()
		s.stop(p.cause)
		close(s.done)
		s.eng.forget(s.id)
	}
	for _, l := range p.locks {
		l.finish()
	}
}

// end ends the session with cause, unless it has ended already.
func (s *Session) end(cause error) {
	s.mu.Lock()
	p := s.endLocked(cause, now())
	s.mu.Unlock()
	p.run()
}

// endLocked records that the session ended at n, and ends its locks.
func (s *Session) endLocked(cause error, n instant) pending {
	if s.err != nil {
		return pending{}
	}
	s.err, s.endedAt = cause, n
	p := pending{session: s, cause: cause}
	for _, l := range s.locks {
		if l.endLocked(cause, n) {
			p.locks = append(p.locks, l)
		}
	}
	return p
}

// leaseGone ends the session when err says that etcd no longer has its
// lease (a put on it was refused: expired or revoked), as the renewal loop
// would at its next round; it reports whether it did. The session's error
// then explains the call's, which is otherwise etcd's bare "requested lease
// not found".
func (s *Session) leaseGone(err error) bool {
	if !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return false
	}
	s.end(fmt.Errorf("%w: lease %x not found", ErrSessionExpired, int64(s.id)))
	return true
}

// validLocked reports whether the session is valid at n, ending it if its
// validity has passed.
func (s *Session) validLocked(n instant) (bool, pending) {
	if s.err != nil {
		return false, pending{}
	}
	if n < s.validUntil {
		return true, pending{}
	}
	return false, s.endLocked(errSessionLapsed, n)
}

// Timing, all derived from the TTL.
func (s *Session) interval() time.Duration    { return s.ttl / 3 }  // renewals and ownership checks
func (s *Session) callTimeout() time.Duration { return s.ttl / 4 }  // each renewal or check, below TTL/3
func (s *Session) retryDelay() time.Duration  { return s.ttl / 20 } // after a failed call
