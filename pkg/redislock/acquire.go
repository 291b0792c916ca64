package redislock

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// TryAcquire takes the lock named key for holder if it is free and no waiter
// is queued for it (it does not barge past Acquire callers), in one script:
// SET PX of the lock key and INCR of its token counter. A held lock is
// reported as a *HeldError (ErrLocked). A free lock with waiters is granted
// to the first live one and reported as a *HeldError of that grant (or as
// ErrLocked when that waiter only asks to be woken). If the reply is lost,
// a key it may have set is deleted again by value (retried in the
// background while Redis does not answer, until the key must have expired
// by itself), and the nonce's tombstone keeps the request, if it was only
// delayed, from granting when it lands later (up to TTL + margin after the
// delete). If the script granted and a step after it failed (the WAIT of
// Config.WaitReplicas, reading the reply), the grant is deleted the same
// way before the error is returned: an error from TryAcquire never leaves a
// key held. Bad input is an ErrInvalid and writes nothing.
func (c *Client) TryAcquire(ctx context.Context, key, holder string) (*Lock, error) {
	if err := c.prepare(key, holder); err != nil {
		return nil, fmt.Errorf("try acquire %s: %w", key, err)
	}
	nonce := newNonce()
	l, o, err := c.grab(ctx, key, holder, nonce, "", nil)
	if err != nil {
		if ambiguous(err) {
			c.dropOrphan(ctx, key, nonce, "")
		}
		return nil, fmt.Errorf("try acquire %s: %w", key, err)
	}
	if l == nil {
		return nil, fmt.Errorf("try acquire %s: %w", key, o.err())
	}
	return l, nil
}

// prepare validates the arguments of an acquire.
func (c *Client) prepare(key, holder string) error {
	if err := validateKey(key); err != nil {
		return err
	}
	if err := validateHolder(holder); err != nil {
		return err
	}
	if c.isClosed() {
		return ErrClosed
	}
	return nil
}

// grab runs the acquire script once (as waiter if waiterID is set, its
// send time recorded in asks) and, when it grants, returns the started
// Lock. With WaitReplicas a WAIT follows a grant on the connection that
// wrote it.
//
// An error of the script's own call is returned as is: the caller knows
// from ambiguous whether the script may have run. Once the script's reply is
// in, any failure after it (an unreadable reply, a WAIT that failed or was
// not confirmed by enough replicas, a Client closed meanwhile) may leave a
// grant with this nonce that nobody will hold: grab deletes it by nonce
// (a value-checked delete, harmless if the key is not ours) and returns an
// undoneError, which is definite.
func (c *Client) grab(ctx context.Context, key, holder, nonce, waiterID string, asks *askLog) (*Lock, obstacle, error) {
	k := newKeys(c.cfg.Prefix, key)
	sent := sendTime()
	ask := "0"
	if asks != nil {
		ask = strconv.FormatUint(asks.next(sent), 10)
	}
	confirm := "0" // with WaitReplicas, a grant found by its nonce is written again (scripts.go)
	if c.cfg.WaitReplicas > 0 {
		confirm = "1"
	}
	res, acked, waitErr, err := c.runAcquire(ctx, []string{k.lock, k.token, k.queue},
		nonce, holder, c.ttlMillis(), waiterID, k.waiter, k.gone+nonce, ask, k.channel, confirm)
	if err != nil {
		return nil, obstacle{}, err
	}
	o, err := parseReply(res)
	if err != nil {
		return nil, o, c.undo(ctx, key, nonce, waiterID, err)
	}
	if o.state == stateEnded {
		return nil, o, &undoneError{err: errEnded} // granted nothing
	}
	if o.state != stateGranted {
		return nil, o, nil
	}
	v, err := parseValue(o.text)
	if err != nil {
		return nil, o, c.undo(ctx, key, nonce, waiterID, err)
	}
	if err := replicated(c.cfg.WaitReplicas, acked, waitErr, c.cfg.WaitTimeout); err != nil {
		return nil, o, c.undo(ctx, key, nonce, waiterID, err)
	}
	l, err := c.hold(ctx, key, waiterID, v, sent, o.left)
	return l, o, err
}

// Reply states of the acquire script.
const (
	stateHeld    = 0 // held by another grant
	stateGranted = 1 // granted now, or earlier to the same nonce
	stateQueued  = 2 // free, but a live waiter is ahead
	stateEnded   = 3 // this nonce's call has ended: its tombstone is set
)

// obstacle is the acquire script's answer.
type obstacle struct {
	state int64
	text  string        // the lock value (held, granted) or the head waiter's ID (queued)
	left  time.Duration // PTTL of the lock key or of the head waiter's liveness key
}

// parseReply decodes the acquire script's reply {state, text, pttl}.
func parseReply(res []any) (obstacle, error) {
	if len(res) != 3 {
		return obstacle{}, fmt.Errorf("parse acquire reply %v: want 3 elements", res)
	}
	state, ok1 := res[0].(int64)
	text, ok2 := res[1].(string)
	pttl, ok3 := res[2].(int64)
	if !ok1 || !ok2 || !ok3 || state < stateHeld || state > stateEnded {
		return obstacle{}, fmt.Errorf("parse acquire reply %v: want {0..3, string, integer}", res)
	}
	return obstacle{state: state, text: text, left: time.Duration(max(pttl, 0)) * time.Millisecond}, nil
}

// err explains an acquire that did not grant.
func (o obstacle) err() error {
	if o.state == stateQueued {
		return fmt.Errorf("%w: free, but waiter %s is queued ahead", ErrLocked, o.text)
	}
	v, err := parseValue(o.text)
	if err != nil {
		return &HeldError{Holder: o.text, Left: o.left} // not written by this package
	}
	return &HeldError{Holder: v.holder, Token: v.token, Left: o.left}
}

// wait returns how long a waiter that met o sleeps before it looks again,
// unless woken: until the key or the head waiter's liveness expires, but at
// most every interval, so that its own liveness key stays fresh and a lost
// wake message delays it by no more than that.
func (o obstacle) wait(interval time.Duration) time.Duration {
	if o.left <= 0 {
		return interval
	}
	return min(interval, o.left+time.Millisecond)
}
