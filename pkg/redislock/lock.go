package redislock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// Lock is one grant of a lock key. Its fencing token comes from the lock's
// INCR counter, incremented in the same script that set the key: every later
// grant of this lock gets a larger token for as long as Redis keeps the
// counter (see the package documentation on persistence).
//
// A Lock is valid until S + TTL - margin, where S is the send time of its
// last confirmed acquire or renewal, read from this machine's monotonic
// clock. The Client's watchdog renews it every RenewInterval. Loss (no
// renewal confirmed in time, the key found not ours, Release, Close) closes
// Done, cancels Context and turns Valid false, once; nothing brings a lost
// Lock back.
type Lock struct {
	c      *Client
	key    string
	k      keys
	nonce  string
	token  int64
	holder string
	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{}

	mu              sync.Mutex
	start           *time.Timer // starts the watchdog at the first renewal; nil before
	validUntil      instant
	err             error // why the lock ended; nil while valid
	endedAt         instant
	releaseMaybeRan bool   // an earlier Release attempt may have deleted the key
	releaseCalls    uint64 // Release calls so far: the n-th marks the tombstone "r<n>"
}

// newLock returns the Lock for a grant confirmed by a script sent at sent
// whose key had pttl left when the script ran (pttl is at most TTL): the
// server expires the key no sooner than sent + pttl by its clock.
func (c *Client) newLock(ctx context.Context, key string, v value, sent instant, pttl time.Duration) *Lock {
	l := &Lock{
		c: c, key: key, k: newKeys(c.cfg.Prefix, key), nonce: v.nonce, token: v.token, holder: v.holder,
		done:       make(chan struct{}),
		validUntil: sent.Add(min(pttl, c.cfg.TTL) - c.cfg.Margin),
	}
	l.ctx, l.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	return l
}

// Key returns the lock name.
func (l *Lock) Key() string { return l.key }

// Token returns the fencing token: pass it with every write to a resource
// the lock protects, and have the resource reject tokens below the highest
// it has seen (package fence: Monotonic, or the SQL form).
func (l *Lock) Token() int64 { return l.token }

// Holder returns the holder string the lock was acquired with.
func (l *Lock) Holder() string { return l.holder }

// Done returns a channel closed when the lock is lost or released. Loss by
// deadline is noticed by a timer, which fires late after a suspend; Valid
// reads the clock and is right even then.
func (l *Lock) Done() <-chan struct{} { return l.done }

// Context returns a context cancelled when the lock is lost or released;
// context.Cause tells why. ctx.Err() is no substitute for Valid just before
// acting: a process can pause between the check and the act.
func (l *Lock) Context() context.Context { return l.ctx }

// Err returns why the lock ended (ErrReleased, ErrNotHeld, ErrExpired,
// ErrClosed), or nil while it is valid.
func (l *Lock) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Valid reports whether the lock is within its validity, reading the clock
// itself. Once it returns false it never returns true again.
func (l *Lock) Valid() bool { return l.validAt(now()) }

// ValidUntil returns the end of the lock's validity projected onto the wall
// clock (with a monotonic reading); after loss it is no later than the loss.
func (l *Lock) ValidUntil() time.Time {
	l.mu.Lock()
	vu := l.validUntil
	if l.err != nil {
		vu = min(vu, l.endedAt)
	}
	l.mu.Unlock()
	return vu.Wall()
}

// validAt reports whether the lock is valid at n, ending it if its validity
// has passed.
func (l *Lock) validAt(n instant) bool {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return false
	}
	if n < l.validUntil {
		l.mu.Unlock()
		return true
	}
	l.endLocked(fmt.Errorf("%w: no renewal confirmed within TTL - margin", ErrExpired), n)
	l.mu.Unlock()
	l.finish()
	return false
}

// confirmed records a renewal sent at sent and confirmed by Redis. A lock
// that has ended (lost, released, or its validity passed before the reply
// came) stays ended: a late reply never revives it.
func (l *Lock) confirmed(sent instant) {
	if !l.validAt(now()) {
		return
	}
	l.mu.Lock()
	if vu := sent.Add(l.c.cfg.TTL - l.c.cfg.Margin); l.err == nil && vu > l.validUntil {
		l.validUntil = vu
	}
	l.mu.Unlock()
}

// lose ends the lock with cause, unless it has ended already.
func (l *Lock) lose(cause error) {
	l.mu.Lock()
	ended := l.endLocked(cause, sendTime())
	l.mu.Unlock()
	if ended {
		l.finish()
	}
}

// endLocked records the end; it reports whether this call ended the lock
// (and so must call finish after unlocking).
func (l *Lock) endLocked(cause error, n instant) bool {
	if l.err != nil {
		return false
	}
	l.err, l.endedAt = cause, n
	return true
}

// finish cancels the context and closes Done, once per lock. A watchdog
// that has not started yet never will.
func (l *Lock) finish() {
	l.cancel(l.Err())
	close(l.done)
	l.mu.Lock()
	t := l.start
	l.mu.Unlock()
	if t != nil && t.Stop() {
		l.c.untrack(l)
		l.c.wg.done()
	}
}

// startWatchdog schedules the watchdog for the first renewal: a lock
// released before then costs no goroutine. The deadline is at least two
// renewal intervals away (Config.Validate), so the watchdog, once started,
// still closes Done on time.
//
// A lock that ended between track and here (Close released it) is not
// scheduled: finish saw no timer to stop, so startWatchdog uncounts it
// itself and reports false. l.err and l.start are both read and written
// under l.mu, so exactly one of finish and startWatchdog uncounts.
func (l *Lock) startWatchdog(sent instant) bool {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		l.c.untrack(l)
		l.c.wg.done()
		return false
	}
	defer l.mu.Unlock()
	l.start = time.AfterFunc(max(0, sent.Add(l.c.cfg.RenewInterval).Sub(sendTime())), func() { l.watchdog(sent) })
	return true
}

// Release ends the lock locally (Done, Context, Valid) and ends the key's
// grant with one script that compares the value first, so it never ends
// another grant, not even a later one of this Client: it hands the lock to
// the next live waiter in the same script (a new token) or, with nobody
// queued, deletes the key. It retries a call whose reply was lost (within
// ctx, and no longer than the key can live); a retry that finds the key
// gone after such a call reports success, since the key is not ours either
// way. The delete leaves a tombstone for the grant's nonce (TTL + margin)
// that names this Release call, so a retry that finds another grant's key
// reports success if an earlier attempt of this call deleted ours (also
// when go-redis resent the script itself after its connection broke,
// which Release cannot see), or, after an earlier Release call whose reply
// was lost, if that call deleted it; and ErrNotHeld if none did (the grant
// expired and was taken). It returns ErrNotHeld if the key was not this
// grant's when the first answered call ran (it had expired, or was taken,
// or an earlier Release call had released it). After another error
// Release may be called again.
//
// Release returns when ctx ends, also while its call is stuck in go-redis
// (a connection without a read deadline): it then returns ctx.Err() wrapped,
// and the call, which may still run, is left to go-redis in a goroutine the
// Client counts (Close waits for it within its ctx); a later Release that
// finds the key gone reports success, one that finds another grant's key
// ErrNotHeld.
func (l *Lock) Release(ctx context.Context) error {
	l.lose(ErrReleased)
	l.mu.Lock()
	l.releaseCalls++
	mark := markReleased + strconv.FormatUint(l.releaseCalls, 10)
	l.mu.Unlock()
	// The watchdog sees Done closed and returns on its own; Close joins it.
	var retry *time.Timer // made on the first retry: a release that is answered needs none
	defer func() {
		if retry != nil {
			retry.Stop()
		}
	}()
	var giveUp instant // set at the first retry: no later than TTL + margin from here
	for {
		n, answered, err := l.releaseOnce(ctx, mark)
		l.mu.Lock()
		maybe := l.releaseMaybeRan
		if !answered || ambiguous(err) {
			l.releaseMaybeRan = true
		}
		l.mu.Unlock()
		switch {
		case !answered:
			return fmt.Errorf("release %s: %w", l.key, ctx.Err())
		case err == nil && released(n, maybe):
			return nil
		case err == nil:
			return fmt.Errorf("release %s: %w: token %d", l.key, ErrNotHeld, l.token)
		case !ambiguous(err) || ctx.Err() != nil || (giveUp != 0 && now() > giveUp):
			return fmt.Errorf("release %s: %w", l.key, err)
		}
		if giveUp == 0 {
			giveUp = sendTime().Add(l.c.cfg.TTL + l.c.cfg.Margin)
		}
		if retry == nil {
			retry = time.NewTimer(l.c.retryDelay())
		} else {
			retry.Reset(l.c.retryDelay())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("release %s: %w", l.key, errors.Join(err, ctx.Err()))
		case <-retry.C:
		}
	}
}

// releaseOnce runs the release script once for the Release call whose
// tombstone mark is mark, with a deadline of CallTimeout, and waits for it
// or for ctx; answered is false if ctx ended first (the script may still
// run).
func (l *Lock) releaseOnce(ctx context.Context, mark string) (n int64, answered bool, err error) {
	cctx, cancel := context.WithTimeout(ctx, l.c.cfg.CallTimeout)
	var got int64 // written by the call's goroutine; read only once it returned
	answered, err = l.c.wg.call(ctx, func() error {
		defer cancel()
		var err error
		got, err = releaseScript.Run(cctx, l.c.rdb, []string{l.k.lock, l.k.queue, l.k.token},
			l.nonce, l.k.waiter, l.k.channel, l.k.gone+l.nonce, l.c.goneMillis(), mark).Int64()
		return err
	})
	if !answered {
		return 0, false, nil
	}
	return got, true, err
}

// released decides whether a release script reply n means this grant's
// key is gone: deleted now, or by an earlier attempt of this Release call
// (its mark is the tombstone's: also a resend by go-redis inside one
// attempt, which the call cannot see), or, after an earlier attempt that
// may have run (maybeRan), deleted by another Release call (its tombstone
// says so) or absent. Another grant's key without a Release's tombstone is
// never success: no release of ours ran, the grant expired and was taken.
func released(n int64, maybeRan bool) bool {
	return n == releaseDeleted || n == releaseThisCall || (maybeRan && (n == releaseEarlier || n == releaseAbsent))
}

// retryDelay is the pause after a failed call before the next one.
func (c *Client) retryDelay() time.Duration { return c.cfg.TTL / 20 }
