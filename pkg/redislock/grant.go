package redislock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// A release (or a waiter leaving, or an acquire that finds the lock free
// with a queue) hands the lock to the next live waiter in its own script:
// it writes the waiter's grant, with a new token, and publishes
// "<waiter ID> <ask> <value>" on the waiter's channel. The waiter then holds
// the lock without a round trip of its own.
//
// Its validity must count from a send time that came before the grant,
// since the server set the key's expiry (PX the waiter's TTL) when it ran
// the grant. The message's arrival says nothing about that: it can be late
// by any amount (a paused process, a slow subscription). So the grant
// names the queue request whose liveness key it read (ask): that request
// was sent, then ran, then the grant ran, and the key lives until at least
// that send time + TTL by the server's clock. The waiter counts
// S_ask + TTL - margin, S_ask being that request's send time on its own
// monotonic clock. A grant naming a request the waiter no longer
// remembers, another nonce, or a validity already over, is not taken: the
// waiter asks Redis instead (its acquire script recognises its own grant
// by nonce and answers with the key's PTTL, sent at a known time).

// askMemory is how many recent queue requests a waiter remembers. A
// grant names the last request that wrote the waiter's liveness key; one
// older than this could only be a request delayed past several later ones.
const askMemory = 8

// askLog is the send times of a waiter's recent queue requests, by ask
// number (1, 2, ...). Only the Acquire loop that owns it uses it.
type askLog struct {
	last uint64
	sent [askMemory]instant
}

// next numbers a request sent at sent and remembers its send time.
func (a *askLog) next(sent instant) uint64 {
	a.last++
	a.sent[a.last%askMemory] = sent
	return a.last
}

// sentOf returns the send time of request n, if it is remembered.
func (a *askLog) sentOf(n uint64) (instant, bool) {
	if n == 0 || n > a.last || a.last-n >= askMemory {
		return 0, false
	}
	return a.sent[n%askMemory], true
}

// handoff is a grant message: the waiter it names, the queue request whose
// place the grant took (ask), and the lock's new value.
type handoff struct {
	id  string
	ask uint64
	v   value
}

// parseHandoff decodes a wake channel message. ok is false for anything
// but a grant (a bare waiter ID is a wake-up: look again).
func parseHandoff(payload string) (h handoff, ok bool) {
	parts := strings.SplitN(payload, " ", 3)
	if len(parts) != 3 {
		return handoff{}, false
	}
	ask, err := strconv.ParseUint(parts[1], 10, 64)
	if err != nil {
		return handoff{}, false
	}
	v, err := parseValue(parts[2])
	if err != nil {
		return handoff{}, false
	}
	return handoff{id: parts[0], ask: ask, v: v}, true
}

// waiterOf returns the waiter ID a wake channel message is for.
func waiterOf(payload string) string {
	id, _, _ := strings.Cut(payload, " ")
	return id
}

// sentBefore decides whether a handoff message can be taken by the waiter
// id with nonce, and from which send time its validity counts: the send
// time of the request it names, if remembered. ok is false for a message
// of another waiter or another nonce, a plain wake-up, or a request the
// waiter does not remember.
func sentBefore(payload, id, nonce string, asks *askLog) (h handoff, sent instant, ok bool) {
	h, ok = parseHandoff(payload)
	if !ok || h.id != id || h.v.nonce != nonce {
		return handoff{}, 0, false
	}
	sent, ok = asks.sentOf(h.ask)
	return h, sent, ok
}

// takeHandoff turns a grant message into a Lock, or returns nil, nil when
// the waiter should ask Redis instead (see sentBefore; also a grant whose
// validity, counted from the request's send time, is already over). With
// WaitReplicas the grant was written by another client's connection, so
// this waiter confirms it on its own: a renewal (a write after the grant in
// the replication stream) and a WAIT on the renewal's connection; a grant
// that is not confirmed is ended again, as grab does, and the error is
// returned.
func (c *Client) takeHandoff(ctx context.Context, key, id, nonce, payload string, asks *askLog) (*Lock, error) {
	h, sent, ok := sentBefore(payload, id, nonce, asks)
	if !ok || now() >= sent.Add(c.cfg.TTL-c.cfg.Margin) {
		return nil, nil
	}
	if c.cfg.WaitReplicas > 0 {
		rsent := sendTime()
		renewed, err := c.renewReplicated(ctx, key, nonce)
		if err != nil && !errors.Is(err, ErrNotReplicated) {
			err = fmt.Errorf("%w: confirm a handed-over grant: %w", ErrNotReplicated, err)
		}
		if err != nil {
			return nil, c.undo(ctx, key, nonce, id, err)
		}
		if !renewed {
			return nil, nil // not ours after all (expired): ask Redis
		}
		sent = rsent // the renewal set PX TTL after rsent
	}
	return c.hold(ctx, key, id, h.v, sent, c.cfg.TTL)
}

// hold starts the Lock of a grant confirmed by a script sent at sent,
// whose key had pttl left when the script ran: tracked (Close releases
// it) and with its watchdog scheduled. A Client closed meanwhile ends the
// grant again (by nonce, and takes waiterID out of the queue) and returns
// ErrClosed.
func (c *Client) hold(ctx context.Context, key, waiterID string, v value, sent instant, pttl time.Duration) (*Lock, error) {
	l := c.newLock(ctx, key, v, sent, pttl)
	if !c.track(l) {
		return nil, c.undo(ctx, key, v.nonce, waiterID, ErrClosed)
	}
	if !l.startWatchdog(sent) {
		// Close released it (by nonce) after track: nothing is held.
		return nil, &undoneError{err: ErrClosed}
	}
	return l, nil
}
