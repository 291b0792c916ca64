package fence

import (
	"context"
	"fmt"

	"github.com/lockwarden/lockwarden/pkg/lease"
)

// Check reports whether token is the current grant of the lock named key,
// with a linearizable read: nil if it is, a *StaleError (ErrStale) naming the
// current token if not. The answer is about the moment of the read; see the
// package documentation for why a write needs the resource's own fence.
func Check(ctx context.Context, e *lease.Engine, key string, token int64) error {
	if token <= 0 {
		return fmt.Errorf("check %s: %w: token %d is not positive", key, ErrInvalid, token)
	}
	h, err := e.Inspect(ctx, key)
	if err != nil {
		return fmt.Errorf("check %s: %w", key, err)
	}
	if h.Token != token {
		return &StaleError{Key: key, Token: token, Current: h.Token}
	}
	return nil
}
