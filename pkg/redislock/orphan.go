package redislock

import (
	"context"
	"errors"
	"time"
)

// A call that gives up (a TryAcquire whose reply was lost, an acquire whose
// grant is undone, a waiter that leaves, a lock that ended by its deadline)
// deletes by nonce what it may have left and sets the nonce's tombstone
// "<prefix>:{k}:gone:<nonce>", PX TTL + margin, in the same script. The
// acquire script refuses a nonce whose tombstone is set (stateEnded) before
// it grants or queues, so a request of that call that was delayed in the
// network, not lost, and lands after the clean-up grants nothing. The bound:
// a request that lands more than TTL + margin after the clean-up ran can
// still grant (or queue) once; nobody renews that grant, so it lives at most
// TTL.

// errEnded is the acquire script's answer to a nonce whose call has ended:
// only a delayed request of a call that gave up can meet it.
var errEnded = errors.New("acquire call already ended")

// undoneError is the error of an acquire whose script ran and whose grant
// (if it made one) grab deleted again by nonce: the caller holds nothing,
// and the outcome is definite (ambiguous is false).
type undoneError struct{ err error }

func (e *undoneError) Error() string { return e.err.Error() }
func (e *undoneError) Unwrap() error { return e.err }

// undo deletes by nonce a grant that nobody will hold and returns cause as
// an undoneError.
func (c *Client) undo(ctx context.Context, key, nonce, waiterID string, cause error) error {
	c.dropOrphan(ctx, key, nonce, waiterID)
	return &undoneError{err: cause}
}

// dropOrphan deletes, by value, a key an unanswered acquire may have set,
// takes waiterID (if not "") out of the queue and sets the nonce's
// tombstone, in one script. It runs even when ctx has ended (that is
// when it is needed), each attempt bounded by CallTimeout. If the attempt's
// answer is lost too, a goroutine of the Client retries every TTL/20 until
// Redis answers, the key must have expired by itself (TTL + margin), or the
// first Close stops waiting (its ctx ended, or everything else was done):
// while Close waits, the retries go on within its ctx. An error reply that
// refused the script for a passing reason (refused: READONLY during a
// failover, LOADING, BUSY, ...) is retried the same way: the script did not
// run, and the drop is idempotent. A waiter left queued would be granted
// the lock by the next release, and everyone behind it would wait a TTL.
func (c *Client) dropOrphan(ctx context.Context, key, nonce, waiterID string) {
	if !retryDrop(c.dropByNonce(ctx, key, nonce, waiterID)) {
		return
	}
	select {
	case <-c.abandoned:
		return // the key expires after its TTL
	default:
	}
	giveUp := now().Add(c.cfg.TTL + c.cfg.Margin)
	c.wg.goFunc(func() { c.redrop(context.WithoutCancel(ctx), key, nonce, waiterID, giveUp) })
}

// retryDrop reports whether a drop that returned err is tried again: its
// answer was lost (ambiguous), or it was refused for a passing reason.
func retryDrop(err error) bool { return ambiguous(err) || refused(err) }

// redrop retries dropByNonce every TTL/20 until Redis answers, giveUp
// passes or Close stops waiting.
func (c *Client) redrop(ctx context.Context, key, nonce, waiterID string, giveUp instant) {
	t := time.NewTimer(c.retryDelay())
	defer t.Stop()
	for now() < giveUp {
		select {
		case <-c.abandoned:
			return
		case <-t.C:
		}
		if !retryDrop(c.dropByNonce(ctx, key, nonce, waiterID)) {
			return
		}
		t.Reset(c.retryDelay())
	}
}

// dropByNonce runs the drop script once for the call with nonce (and
// waiterID, "" for none). The
// CallTimeout bounds it only with ContextTimeoutEnabled; otherwise the redis
// client's ReadTimeout does (go-redis does not watch ctx on the socket). It
// sends the script's body (EVAL), not its hash: a clean-up runs rarely and
// mostly on a slow network, where EVALSHA's NOSCRIPT on a server that has
// not seen the script yet would cost a second round trip.
func (c *Client) dropByNonce(ctx context.Context, key, nonce, waiterID string) error {
	k := newKeys(c.cfg.Prefix, key)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.CallTimeout)
	defer cancel()
	return dropScript.Eval(cctx, c.rdb, []string{k.lock, k.queue, k.token},
		nonce, waiterID, k.waiter, k.channel, k.gone+nonce, c.goneMillis()).Err()
}
