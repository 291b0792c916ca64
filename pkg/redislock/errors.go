package redislock

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Every error the package returns wraps one of these or an
// error from go-redis or the context, with what was being done in front.
var (
	// ErrLocked means the lock is held, or free with waiters queued ahead
	// (TryAcquire does not barge). A held key is reported as a *HeldError.
	ErrLocked = errors.New("redislock: locked")
	// ErrNotHeld means the lock key no longer carries this grant's value:
	// released, expired, deleted, or taken by someone else.
	ErrNotHeld = errors.New("redislock: lock not held")
	// ErrExpired means the lock's validity ended: no renewal was confirmed
	// within TTL - margin of the send time of the last one that was.
	ErrExpired = errors.New("redislock: lock validity expired")
	// ErrReleased is the cause of a lock's end after Release was called.
	ErrReleased = errors.New("redislock: lock released")
	// ErrClosed means the Client was closed.
	ErrClosed = errors.New("redislock: client closed")
	// ErrNotReplicated means Config.WaitReplicas replicas did not confirm an
	// acquire within Config.WaitTimeout, or the WAIT itself failed (an ACL
	// that denies it, a lost reply); the grant was deleted again.
	ErrNotReplicated = errors.New("redislock: acquire not replicated")
	// ErrInvalid means bad input: the message says which argument and why.
	ErrInvalid = errors.New("redislock: invalid argument")
)

// HeldError reports that a lock is held by someone. It unwraps to ErrLocked.
type HeldError struct {
	// Holder is the holder string the lock was acquired with.
	Holder string
	// Token is the holder's fencing token.
	Token int64
	// Left is the time the key had left by the server's clock (PTTL).
	Left time.Duration
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
