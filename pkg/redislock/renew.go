package redislock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// renewal is the outcome of one renewal call sent at sent.
type renewal struct {
	sent instant
	ours bool
	err  error
}

// watchdog renews the lock every RenewInterval with a script that extends
// the key only if its value is this grant's. Each renewal's send time S is
// known, and a confirmed one moves validity to S + TTL - margin. A failed
// call is retried after TTL/20; the validity deadline, not a retry count,
// ends the lock. A renewal that finds the key not ours ends it at once.
//
// The call runs in its own goroutine while the loop keeps the deadline: a
// go-redis client without ContextTimeoutEnabled ignores the context's
// deadline on the socket and can block for its ReadTimeout (3 s by default),
// and loss must be signalled at the deadline however long the call takes.
// The watchdog starts at the first renewal (startWatchdog) and returns when
// the lock ends, however it ends; if it ended by its deadline, dropExpired
// deletes the key.
func (l *Lock) watchdog(last instant) {
	defer l.c.wg.done()
	defer l.c.untrack(l)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	renewAt := last.Add(l.c.cfg.RenewInterval)
	var inflight chan renewal // nil while no call is out
	defer l.dropExpired()
	for {
		l.mu.Lock()
		next := l.validUntil
		l.mu.Unlock()
		if inflight == nil {
			next = min(next, renewAt)
		}
		timer.Reset(max(0, next.Sub(now())))
		select {
		case <-l.done:
			return
		case r := <-inflight:
			inflight = nil
			switch {
			case r.err == nil && r.ours:
				l.confirmed(r.sent) // a lock that has ended stays ended
				renewAt = r.sent.Add(l.c.cfg.RenewInterval)
			case r.err == nil:
				l.lose(fmt.Errorf("renew %s: %w: token %d", l.key, ErrNotHeld, l.token))
				return
			default:
				// Timeout, broken connection, a replica answering READONLY
				// during a failover: try again soon.
				renewAt = now().Add(l.c.retryDelay())
			}
		case <-timer.C:
		}
		if !l.Valid() {
			return
		}
		if inflight == nil && now() >= renewAt {
			out := make(chan renewal, 1)
			inflight = out
			l.c.wg.goFunc(func() {
				sent := sendTime()
				ours, err := l.renewOnce(sent)
				out <- renewal{sent: sent, ours: ours, err: err}
			})
		}
	}
}

// dropExpired deletes, by nonce, the key of a lock that ended by its
// deadline (ErrExpired), in a goroutine of the Client, so that a renewal
// that was sent while the lock was valid and reaches Redis after it ended
// does not keep, for another TTL, a grant that no one holds. A lock that
// ended otherwise needs nothing: Release deletes its key, and ErrNotHeld
// means the key is not ours.
//
// Why the late renewal cannot outlive the delete: the renewal script
// extends the key only if its value carries this grant's nonce. If the
// renewal runs before the delete, the delete removes the extended key; if
// after, the key is gone or another grant's and the renewal changes nothing.
// So once the delete has run, no renewal of this grant can keep the key.
//
// It is one attempt, bounded by CallTimeout (by the redis client's
// ReadTimeout without ContextTimeoutEnabled), and best effort: loss by
// deadline usually means a slow or broken network, where retries would add
// connections to it, and an attempt whose reply is lost may still run. If
// the delete never reaches Redis while the late renewal does, the key lives
// one more TTL from the renewal's arrival, as before; the token still
// fences the ex-holder.
//
// A renewal reply that arrives after the loss does not revive the Lock:
// confirmed ignores a lock that has ended.
func (l *Lock) dropExpired() {
	if !errors.Is(l.Err(), ErrExpired) {
		return
	}
	ctx := context.WithoutCancel(l.ctx)
	l.c.wg.goFunc(func() { _ = l.c.dropByNonce(ctx, l.key, l.nonce, "") })
}

// renewOnce sends one renewal with a deadline of CallTimeout, never past the
// lock's validity: an answer after that is too late to matter. It sends the
// script's body (EVAL), not its hash: after a restart, a failover or SCRIPT
// FLUSH, EVALSHA would meet NOSCRIPT and the renewal would cost a second
// round trip (EVAL), which on a slow link can lose a lock the client could
// have kept. The body is short, and a renewal runs once per RenewInterval.
func (l *Lock) renewOnce(sent instant) (bool, error) {
	l.mu.Lock()
	left := l.validUntil.Sub(sent)
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(l.ctx, min(l.c.cfg.CallTimeout, left))
	defer cancel()
	n, err := renewScript.Eval(ctx, l.c.rdb, []string{l.k.lock}, l.nonce, l.c.ttlMillis()).Int64()
	if err != nil {
		return false, err
	}
	return n == 1, nil
}
