package redislock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// Each Client subscribes one channel, "<prefix>:wake:<client ID>", on its
// first wait. Grants and wake-ups for its waiters arrive there, each naming
// the waiter (see grant.go), and one goroutine (dispatch) reads them and
// hands each to its waiter.

// healthEvery is how long the wake subscription may be silent before the
// dispatcher pings it, and how long it then waits for any message (the
// Pong, or anything else) before it takes the connection for dead and
// replaces the subscription (resubscribe). A write alone proves nothing: a
// half-open connection (a peer or middlebox gone, a partition, no reset)
// accepts writes, and the kernel gives up on it only after tcp_retries2
// (about 15 minutes); go-redis's own Channel pings but never looks for the
// Pong. So a dead subscription is replaced within 2 * healthEvery of its
// last message. Messages lost meanwhile cost a waiter at most its poll
// interval.
const healthEvery = 3 * time.Second

// listen registers waiter id for its channel's messages (grants and
// wake-ups), subscribing the client's channel on first use. A registered
// waiter is counted in the Client's group until unlisten, which Acquire
// defers, so it runs after the waiter's leave: Close waits for a blocked
// Acquire to have left its queue. Registering and counting happen under
// c.mu with the closed check, so a waiter Close does not wait for is one
// that never registers.
func (c *Client) listen(ctx context.Context, id string) (<-chan string, error) {
	w := make(chan string, 1)
	c.mu.Lock()
	closed, subscribed := c.closed, c.ps != nil
	if !closed && subscribed {
		c.waiters[id] = w
		c.wg.add()
	}
	c.mu.Unlock()
	switch {
	case closed:
		return nil, ErrClosed
	case subscribed:
		return w, nil
	}
	if err := c.subscribe(ctx); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	c.waiters[id] = w
	c.wg.add()
	return w, nil
}

// subscribe subscribes the client's channel and starts the dispatcher,
// once.
func (c *Client) subscribe(ctx context.Context) error {
	c.subMu.Lock()
	defer c.subMu.Unlock()
	c.mu.Lock()
	closed, ps := c.closed, c.ps
	c.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if ps != nil {
		return nil
	}
	ps = c.rdb.Subscribe(ctx, c.wakeChannel())
	if _, err := ps.Receive(ctx); err != nil {
		_ = ps.Close()
		return fmt.Errorf("subscribe wake channel: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		_ = ps.Close()
		return ErrClosed
	}
	c.ps = ps
	c.wg.add()
	go c.dispatch(ps)
	return nil
}

// unlisten unregisters waiter id and uncounts it (see listen).
func (c *Client) unlisten(id string) {
	c.mu.Lock()
	delete(c.waiters, id)
	c.mu.Unlock()
	c.wg.done()
}

// wakeChannel is the client's wake channel.
func (c *Client) wakeChannel() string { return c.cfg.Prefix + ":wake:" + c.id }

// dispatch reads the subscription until it is closed (Close) and hands
// each message to the waiter it names. It reads the connection itself
// rather than through go-redis's Channel, which would add a goroutine (and
// a wake-up of its health checker) to every handoff. A subscription silent
// for healthEvery is pinged, and one that stays silent for healthEvery
// after that is replaced (see healthEvery).
func (c *Client) dispatch(ps *redis.PubSub) {
	defer c.wg.done()
	ctx := context.Background()
	failures := 0
	pinged := false // a Ping is out, and nothing has come since
	for {
		msg, err := ps.ReceiveTimeout(ctx, healthEvery)
		switch health(err, pinged) {
		case healthClosed:
			return
		case healthPing:
			// A Ping that fails to write makes go-redis reconnect; one that
			// is written must be answered within healthEvery.
			pinged = ps.Ping(ctx) == nil
			continue
		case healthDead:
			if ps = c.resubscribe(ps); ps == nil {
				return
			}
			pinged = false
			continue
		case healthFailed:
			// go-redis reconnects on the next Receive; do not spin meanwhile.
			pinged = false
			if failures++; failures > 1 {
				time.Sleep(100 * time.Millisecond)
			}
			continue
		}
		failures, pinged = 0, false
		if m, ok := msg.(*redis.Message); ok {
			c.deliver(m.Payload)
		}
	}
}

// What the dispatcher does after a read of the subscription.
const (
	healthMessage = iota // a message (a grant, a wake-up, a Pong, a confirmation) came
	healthClosed         // the subscription was closed: stop
	healthPing           // silent for healthEvery: ping it
	healthDead           // silent for healthEvery after a Ping: replace it
	healthFailed         // the read failed: go-redis reconnects
)

// health decides what the dispatcher does after a read that returned err,
// pinged telling whether a Ping is out with nothing come since.
func health(err error, pinged bool) int {
	var ne net.Error
	switch {
	case err == nil:
		return healthMessage
	case errors.Is(err, redis.ErrClosed):
		return healthClosed
	case errors.As(err, &ne) && ne.Timeout() && pinged:
		return healthDead
	case errors.As(err, &ne) && ne.Timeout():
		return healthPing
	}
	return healthFailed
}

// resubscribe replaces the dead subscription old: a new PubSub (a
// connection of its own) subscribes the wake channel, becomes c.ps and old
// is closed. It returns nil, and closes both, if the Client was closed
// meanwhile. The subscription is confirmed by the dispatcher's next read
// (a failed subscribe is retried there by go-redis). Grants published to
// the client meanwhile are lost; their waiters find them by polling.
func (c *Client) resubscribe(old *redis.PubSub) *redis.PubSub {
	ps := c.rdb.Subscribe(context.Background(), c.wakeChannel())
	c.mu.Lock()
	closed := c.closed
	if !closed {
		c.ps = ps
	}
	c.mu.Unlock()
	_ = old.Close()
	if closed {
		_ = ps.Close()
		return nil
	}
	return ps
}

// deliver hands payload to the waiter it names. A waiter that has not
// taken the previous message gets the newer one instead (deliver is only
// called by dispatch): every message makes the waiter look, and a stale
// grant would only be refused.
func (c *Client) deliver(payload string) {
	c.mu.Lock()
	w := c.waiters[waiterOf(payload)]
	c.mu.Unlock()
	if w == nil {
		return
	}
	select {
	case w <- payload:
	default:
		select {
		case <-w:
		default:
		}
		w <- payload
	}
}
