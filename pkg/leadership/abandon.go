package leadership

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
)

// A fence refuses an equal token from another writer when another process presented the token
// first: this pod's process before a restart (its writes may still be arriving), or a copy that
// should not exist. The term is then over for this process, whatever the lock says: it must not
// act under the token, and must not release it either, because a release promises that nothing
// acts under the token any more, and this process cannot promise that for the other writer.
// Abandon is how a callback says so.

// ErrAbandoned is wrapped by ReadyzCheck's error while the lock still names this pod with a
// token this process abandoned.
var ErrAbandoned = errors.New("leadership: term abandoned by this process")

// Abandon ends this process's term of token for good, without a release. Call it when a
// resource refused token from Writer() because another writer presented the same token first
// (fence.Monotonic's StaleError with Current == token, "in use by another writer"; 0 rows from
// the SQL form with an equal fence): another process of this pod holds the token there, and
// its writes may still arrive.
//
// From the call on, Valid() is false and Token() is 0 for that term, its OnStartedLeading
// context is cancelled (return from it) and OnStoppedLeading follows as for any end of a term.
// This process never leads token (or a lower one) again and never releases it; ReadyzCheck
// fails, wrapping ErrAbandoned, while the lock still names this pod with it (Held or
// Releasing), so that the controller ends the term (after the lock delay) and the pod is
// granted a new token or another pod the lock. A later grant with a higher token is led as
// usual. Safe to call from any goroutine, OnStartedLeading included, before Run, during it and
// after the term ended; a token that is not positive does nothing.
//
// The token is marked abandoned in its lineage (lineage.go): every lineage in which this
// process led a term of token or a higher one, and every lineage when it led none (before
// Run, say). A lock deleted and created again with the other spec.scope grants tokens of the
// other lineage, which an abandoned token of this one does not hold back.
func (e *Elector) Abandon(token int64) {
	if token <= 0 {
		return
	}
	marked := false
	for l := range lineages {
		if e.ledTop.load(l) >= token {
			e.abandoned.raise(l, token)
			marked = true
		}
	}
	if !marked {
		for l := range lineages {
			e.abandoned.raise(l, token)
		}
	}
	select {
	case e.abandons <- struct{}{}:
	default: // the loop has a notice pending already
	}
}

// abandon ends the open term if this process abandoned its token, and updates readiness.
func (l *loop) abandon() {
	if l.term != nil && l.term.token <= l.e.abandoned.load(l.term.lin) {
		l.end("abandoned by this process (Abandon): no release")
	}
	l.e.setRefused(abandonedErr(l.view, l.e.cfg.Identity, l.e.abandoned.load(l.view.lin)))
}

// abandonedErr is the readiness error while v names me with a token this process abandoned
// (Held or Releasing), nil otherwise; abandoned is the mark of v's lineage.
func abandonedErr(v view, me types.UID, abandoned int64) error {
	if abandoned <= 0 || v.token > abandoned || !v.names(v.lin, me, v.token) {
		return nil
	}
	return fmt.Errorf("%w: the lock still names this pod with token %d, which this process abandoned (Abandon); the controller ends the term", ErrAbandoned, v.token)
}
