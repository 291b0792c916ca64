package lease

import (
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Sentinel errors. Every error the engine returns wraps one of these or an
// error from etcd or the context, with what was being done in front of it.
var (
	// ErrLocked means the lock is held, queued for, or in its lock-delay after
	// a forced release. A held key is reported as a *HeldError wrapping it.
	ErrLocked = errors.New("lease: locked")
	// ErrNotHeld means the lock is not, or no longer, held under this token in
	// etcd: released, expired, force-released or replaced.
	ErrNotHeld = errors.New("lease: lock not held")
	// ErrSessionExpired means the session's lease is gone (expired, revoked,
	// not found) or its validity ended before a renewal was confirmed.
	ErrSessionExpired = errors.New("lease: session expired")
	// ErrSessionClosed means Close or Orphan was called, or the etcd client
	// was closed.
	ErrSessionClosed = errors.New("lease: session closed")
	// ErrExpired means a lock's own validity ended: no ownership check was
	// confirmed within TTL - margin of the last one that was.
	ErrExpired = errors.New("lease: lock validity expired")
	// ErrReleased is the cause of a lock's loss after Release was called.
	ErrReleased = errors.New("lease: lock released")
	// ErrGuardFailed means the lock compare held but one of the caller's
	// WithGuard compares did not, so nothing was written.
	ErrGuardFailed = errors.New("lease: guard compare failed")
	// ErrBusy means this session already holds the key through a tracked
	// *Lock (Adopt) or is acquiring or cleaning it up in another call
	// (Acquire, TryAcquire, Adopt); or, from ResumeSession, that a live
	// session of the same engine renews the lease already.
	ErrBusy = errors.New("lease: key busy in this session")
	// ErrInvalid means bad input: the message says which argument and why.
	ErrInvalid = errors.New("lease: invalid argument")
	// ErrGlobalChanged means a compare of a global lock's transaction (Global.Wait,
	// Global.Grant) failed: someone granted, waited or deleted since the caller's basis, or
	// the caller's guard did not hold (then the error wraps ErrGuardFailed too). Nothing was
	// written; the caller observes again.
	ErrGlobalChanged = errors.New("lease: global lock changed")
	// ErrClusterNameTaken means Global.Register found the cluster name registered under
	// another cluster UID, or the engine prefix registered by another cluster.
	ErrClusterNameTaken = errors.New("lease: cluster name taken")
)

// HeldError reports that a lock is held by someone. It unwraps to ErrLocked.
type HeldError struct {
	// Holder is the holder string the lock was acquired with.
	Holder string
	// Token is the holder's fencing token (the key's CreateRevision).
	Token int64
	// Lease is the etcd lease the key is attached to.
	Lease clientv3.LeaseID
}

// Error implements error.
func (e *HeldError) Error() string {
	return fmt.Sprintf("locked: held by %q with token %d", e.Holder, e.Token)
}

// Unwrap returns ErrLocked.
func (e *HeldError) Unwrap() error { return ErrLocked }

// invalidf returns an ErrInvalid that says what is wrong.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}
