package redislock

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// maxWatchAttempts bounds Lock.Watch's retries when its transaction is
// aborted because a watched key changed (the watchdog's own renewal touches
// the lock key, which aborts a WATCH on it).
const maxWatchAttempts = 5

// Script is a caller's Lua script that runs only while a lock is held: the
// Redis twin of fence.Txn. Build it once with NewScript and run it with
// Lock.Eval.
type Script struct {
	s *redis.Script
}

// NewScript wraps src so that, in the same script, it first compares the
// lock key's value with the grant's and returns an error reply (Eval maps it
// to ErrNotHeld) if it differs. src sees KEYS and ARGV exactly as passed to
// Eval and returns as a script does. Its keys must be in the lock's hash
// slot on Redis Cluster: name them with the lock's hash tag "{<key>}".
func NewScript(src string) *Script {
	return &Script{s: redis.NewScript(guardPrologue + src + guardEpilogue)}
}

// Eval runs s with keys and args if the lock key still holds this grant,
// checked inside the script: a late write from an ex-holder applies nothing
// and returns ErrNotHeld. It also refuses without a round trip once Valid is
// false. The reply is the script's, as go-redis decodes it.
func (l *Lock) Eval(ctx context.Context, s *Script, keys []string, args ...any) (any, error) {
	if !l.Valid() {
		return nil, fmt.Errorf("eval under %s: %w", l.key, l.notValid())
	}
	ks := append(append(make([]string, 0, len(keys)+1), keys...), l.k.lock)
	as := append(append(make([]any, 0, len(args)+1), args...), l.nonce)
	res, err := s.s.Run(ctx, l.c.rdb, ks, as...).Result()
	if err != nil && strings.Contains(err.Error(), "LOCKWARDEN_NOT_HELD") {
		return nil, fmt.Errorf("eval under %s: %w: token %d", l.key, ErrNotHeld, l.token)
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("eval under %s: %w", l.key, err)
	}
	return res, err
}

// Watch runs fn's commands in one MULTI/EXEC that applies only if the lock
// key still holds this grant: it WATCHes the lock key and keys, compares the
// value, and queues fn's commands. If a watched key changes before EXEC (the
// lock's own renewal counts), it tries again, up to 5 times. A lock no
// longer ours is ErrNotHeld, with nothing applied. keys must share the lock's
// hash slot on Redis Cluster.
func (l *Lock) Watch(ctx context.Context, fn func(pipe redis.Pipeliner) error, keys ...string) error {
	watched := append(append(make([]string, 0, len(keys)+1), keys...), l.k.lock)
	var err error
	for range maxWatchAttempts {
		if !l.Valid() {
			return fmt.Errorf("watch under %s: %w", l.key, l.notValid())
		}
		err = l.c.rdb.Watch(ctx, func(tx *redis.Tx) error {
			v, err := tx.Get(ctx, l.k.lock).Result()
			if errors.Is(err, redis.Nil) || (err == nil && !strings.HasPrefix(v, l.nonce+" ")) {
				return fmt.Errorf("%w: token %d", ErrNotHeld, l.token)
			}
			if err != nil {
				return err
			}
			_, err = tx.TxPipelined(ctx, fn)
			return err
		}, watched...)
		if !errors.Is(err, redis.TxFailedErr) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("watch under %s: %w", l.key, err)
	}
	return nil
}

// notValid is the error for an operation refused because Valid is false.
func (l *Lock) notValid() error {
	if err := l.Err(); err != nil {
		return err
	}
	return ErrExpired
}
