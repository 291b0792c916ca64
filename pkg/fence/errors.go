package fence

import (
	"errors"
	"fmt"
)

// Sentinel errors.
var (
	// ErrStale means a token is not (or no longer) the one allowed to write.
	// It is reported as a *StaleError.
	ErrStale = errors.New("fence: stale token")
	// ErrInvalid means bad input: a token that is not positive, or an empty
	// writer ID.
	ErrInvalid = errors.New("fence: invalid argument")
)

// StaleError reports a token that may not write, and the current one. It
// unwraps to ErrStale.
type StaleError struct {
	// Key is the lock name (Check) or empty (Monotonic).
	Key string
	// Token is the token that was presented.
	Token int64
	// Current is the current token: the lock's current grant (0 when it is
	// free) for Check, the highest admitted token for Monotonic.
	Current int64
}

// Error implements error.
func (e *StaleError) Error() string {
	what := "token"
	if e.Key != "" {
		what = fmt.Sprintf("lock %s: token", e.Key)
	}
	switch {
	case e.Current == 0:
		return fmt.Sprintf("%s %d is stale: the lock is not held", what, e.Token)
	case e.Token == e.Current:
		return fmt.Sprintf("%s %d is in use by another writer", what, e.Token)
	}
	return fmt.Sprintf("%s %d is stale: current token is %d", what, e.Token, e.Current)
}

// Unwrap returns ErrStale.
func (e *StaleError) Unwrap() error { return ErrStale }
