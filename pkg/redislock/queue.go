package redislock

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// Acquire takes the lock named key for holder, waiting while it is held.
// Waiters are served in order of arrival: each joins the lock's queue in the
// acquire script, and a release (or a waiter that gives up) hands the lock
// to the next live waiter in its own script, with a new token, and
// publishes the grant on that waiter's channel: only that waiter wakes, and
// it holds the lock without another round trip (grant.go says from which
// send time its validity counts). A waiter also looks again when the key's
// PTTL runs out (a holder that died), and at least every RenewInterval,
// which keeps its place alive: a waiter that stops looking for TTL loses
// its place. A lost reply is retried with the same nonce, which the script
// recognises as its own grant, and so is an error reply that refused the
// script for a passing reason (READONLY during a failover, LOADING, BUSY,
// OOM, MASTERDOWN, TRYAGAIN, CLUSTERDOWN, NOREPLICAS); another error reply
// ends the call. When ctx ends, the waiter leaves the queue,
// ends a grant made to it that it did not take (handing the lock on), and
// returns context.Cause(ctx).
func (c *Client) Acquire(ctx context.Context, key, holder string) (*Lock, error) {
	if err := c.prepare(key, holder); err != nil {
		return nil, fmt.Errorf("acquire %s: %w", key, err)
	}
	id := c.id + "/" + strconv.FormatUint(c.seq.Add(1), 10)
	wake, err := c.listen(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("acquire %s: %w", key, err)
	}
	defer c.unlisten(id)
	nonce := newNonce()
	var asks askLog
	var timer *time.Timer // made on the first wait: an uncontended acquire needs none
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		cctx, cancel := context.WithTimeout(ctx, c.stepTimeout())
		l, o, err := c.grab(cctx, key, holder, nonce, id, &asks)
		cancel()
		if l != nil {
			return l, nil
		}
		wait := o.wait(c.cfg.RenewInterval)
		switch {
		case err == nil:
		case refused(err):
			// READONLY during a failover, LOADING, BUSY, ...: the script did
			// not run; the server may take it in a moment.
			wait = c.retryDelay()
		case !ambiguous(err):
			// An error reply from Redis, or a grant that grab deleted again
			// (not replicated, an unreadable reply, closed): retrying would
			// not change the answer.
			c.leave(ctx, key, id, nonce)
			return nil, fmt.Errorf("acquire %s: %w", key, err)
		default:
			wait = c.retryDelay()
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-ctx.Done():
			c.leave(ctx, key, id, nonce)
			return nil, fmt.Errorf("acquire %s: %w", key, context.Cause(ctx))
		case <-c.closing:
			c.leave(ctx, key, id, nonce)
			return nil, fmt.Errorf("acquire %s: %w", key, ErrClosed)
		case msg := <-wake:
			l, err := c.takeHandoff(ctx, key, id, nonce, msg, &asks)
			if l != nil {
				return l, nil
			}
			if err != nil {
				return nil, fmt.Errorf("acquire %s: %w", key, err)
			}
			// A wake-up, or a grant it cannot count from: look again now.
		case <-timer.C:
		}
	}
}

// leave takes a waiter that gives up out of the queue, ends a grant made
// to it (by an unanswered call of its own, or by a release racing its
// exit), hands a free lock to the next live waiter and sets its nonce's
// tombstone, in one script, so that a request of this waiter still in the
// network neither queues nor grants when it lands. It runs even though ctx
// has ended, bounded by CallTimeout, and is retried in the background while
// Redis does not answer.
func (c *Client) leave(ctx context.Context, key, id, nonce string) {
	c.dropOrphan(ctx, key, nonce, id)
}
