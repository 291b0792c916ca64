package redislock

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Acquire takes the lock named key for holder, waiting while it is held.
// Waiters are served in order of arrival: each joins the lock's queue in the
// acquire script, and a release (or a waiter that gives up) publishes the
// next live waiter's ID on its client's channel, so only that waiter wakes
// and the others stay asleep (no retry storm). A waiter also looks again when
// the key's PTTL runs out (a holder that died), and at least every
// RenewInterval, which keeps its place alive: a waiter that stops looking for
// TTL loses its place. A lost reply is retried with the same nonce, which the
// script recognises as its own grant. When ctx ends, the waiter leaves the
// queue, deletes a key an unanswered call may have set, and returns
// context.Cause(ctx).
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
	var timer *time.Timer // made on the first wait: an uncontended acquire needs none
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		cctx, cancel := context.WithTimeout(ctx, c.stepTimeout())
		l, o, err := c.grab(cctx, key, holder, nonce, id)
		cancel()
		if l != nil {
			return l, nil
		}
		wait := o.wait(c.cfg.RenewInterval)
		switch {
		case err == nil:
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
		case <-wake:
		case <-timer.C:
		}
	}
}

// leave takes a waiter that gives up out of the queue (waking the next one
// if the lock is free), deletes a key that an unanswered call may have
// granted it and sets its nonce's tombstone, in one script, so that a
// request of this waiter still in the network neither queues nor grants
// when it lands. It runs even though ctx has ended, bounded by CallTimeout,
// and is retried in the background while Redis does not answer.
func (c *Client) leave(ctx context.Context, key, id, nonce string) {
	c.dropOrphan(ctx, key, nonce, id)
}

// listen registers waiter id for wake messages, subscribing the client's
// channel on first use.
func (c *Client) listen(ctx context.Context, id string) (<-chan struct{}, error) {
	c.subMu.Lock()
	defer c.subMu.Unlock()
	c.mu.Lock()
	closed, ps := c.closed, c.ps
	c.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	if ps == nil {
		ps = c.rdb.Subscribe(ctx, c.cfg.Prefix+":wake:"+c.id)
		if _, err := ps.Receive(ctx); err != nil {
			_ = ps.Close()
			return nil, fmt.Errorf("subscribe wake channel: %w", err)
		}
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			_ = ps.Close()
			return nil, ErrClosed
		}
		c.ps = ps
		c.wg.add()
		c.mu.Unlock()
		go c.dispatch(ps.Channel())
	}
	w := make(chan struct{}, 1)
	c.mu.Lock()
	c.waiters[id] = w
	c.mu.Unlock()
	return w, nil
}

func (c *Client) unlisten(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.waiters, id)
}

// dispatch hands each wake message to the waiter it names, until the
// subscription is closed (Close).
func (c *Client) dispatch(ch <-chan *redis.Message) {
	defer c.wg.done()
	for m := range ch {
		c.mu.Lock()
		w := c.waiters[m.Payload]
		c.mu.Unlock()
		if w != nil {
			select {
			case w <- struct{}{}:
			default: // already signalled
			}
		}
	}
}
