package redislock

import (
	"strings"
	"time"
	"unicode/utf8"
)

// Limits on the configuration and on names.
const (
	// MinTTL is the shortest lock TTL: below it a renewal round trip and the
	// margin leave too little time to act.
	MinTTL = 500 * time.Millisecond
	// DefaultTTL is the lock TTL when Config.TTL is zero.
	DefaultTTL = 15 * time.Second
	// DefaultPrefix is the key prefix when Config.Prefix is empty.
	DefaultPrefix = "lockwarden"

	maxKeyLen    = 512
	maxHolderLen = 1024
)

// Config configures a Client. The zero value is valid: every field states
// its default.
type Config struct {
	// Prefix starts every key the package writes (default "lockwarden").
	// The lock k lives at "<prefix>:{k}:lock", its token counter at
	// "<prefix>:{k}:token", its queue at "<prefix>:{k}:queue", tombstones of
	// ended grants and acquire calls at "<prefix>:{k}:gone:<nonce>" (expiring
	// after TTL + Margin): one hash slot per lock, so the scripts also run on
	// Redis Cluster.
	Prefix string
	// TTL is each lock key's expiry, renewed by the engine (default 15s,
	// minimum MinTTL, whole milliseconds).
	TTL time.Duration
	// Margin is subtracted from every validity: a lock is valid until
	// S + TTL - Margin, S being the send time of its last confirmed acquire or
	// renewal. It absorbs the rate difference between this machine's clock and
	// the Redis server's, which expires the key. Default
	// min(max(2s, TTL/50), TTL/4); at least 0 and below TTL/2.
	Margin time.Duration
	// RenewInterval is the time between renewals (default TTL/3). It must be
	// positive and at most (TTL - Margin)/2, so that one failed renewal can
	// be retried before validity ends.
	RenewInterval time.Duration
	// CallTimeout is the deadline of each renewal (never past the lock's
	// validity) and of each step of a blocking Acquire, plus WaitTimeout
	// with WaitReplicas (default TTL/4, below RenewInterval).
	CallTimeout time.Duration
	// WaitReplicas, when positive, makes every grant wait (Redis WAIT) until
	// that many replicas have the lock key and its token, or release it and
	// fail with ErrNotReplicated (default 0: no wait).
	WaitReplicas int
	// WaitTimeout bounds the WAIT (default TTL/4). On a *redis.Client the
	// WAIT is a command of its own on the connection that ran the acquire
	// script, read with WaitTimeout + 10 s like go-redis's Wait; a
	// *redis.ClusterClient or *redis.Ring sends it in a pipeline read with
	// its ReadTimeout, so New requires WaitTimeout below that ReadTimeout.
	WaitTimeout time.Duration
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.Margin == 0 {
		c.Margin = defaultMargin(c.TTL)
	}
	if c.RenewInterval == 0 {
		c.RenewInterval = c.TTL / 3
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = c.TTL / 4
	}
	if c.WaitTimeout == 0 {
		c.WaitTimeout = c.TTL / 4
	}
	return c
}

// defaultMargin returns min(max(2s, ttl/50), ttl/4).
func defaultMargin(ttl time.Duration) time.Duration {
	return min(max(2*time.Second, ttl/50), ttl/4)
}

// Validate reports the first problem with c (after defaults), as an
// ErrInvalid naming the field.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case strings.ContainsAny(c.Prefix, "{}"):
		return invalidf("prefix %q contains a brace (braces delimit the hash tag)", c.Prefix)
	case c.TTL < MinTTL:
		return invalidf("TTL %v is below the minimum %v", c.TTL, MinTTL)
	case c.TTL%time.Millisecond != 0:
		return invalidf("TTL %v is not a whole number of milliseconds", c.TTL)
	case c.Margin < 0 || c.Margin >= c.TTL/2:
		return invalidf("margin %v must be at least 0 and below TTL/2 (%v)", c.Margin, c.TTL/2)
	case c.RenewInterval < 0 || c.RenewInterval > (c.TTL-c.Margin)/2:
		return invalidf("renew interval %v must be positive and at most (TTL - margin)/2 (%v)",
			c.RenewInterval, (c.TTL-c.Margin)/2)
	case c.CallTimeout < 0 || c.CallTimeout >= c.RenewInterval:
		return invalidf("call timeout %v must be positive and below the renew interval %v", c.CallTimeout, c.RenewInterval)
	case c.WaitReplicas < 0:
		return invalidf("wait replicas %d is negative", c.WaitReplicas)
	case c.WaitTimeout < 0:
		return invalidf("wait timeout %v is negative", c.WaitTimeout)
	}
	return nil
}

// validateKey checks a lock name: printable UTF-8 without braces (which
// would break the hash tag), at most 512 bytes.
func validateKey(key string) error {
	switch {
	case key == "":
		return invalidf("key is empty")
	case len(key) > maxKeyLen:
		return invalidf("key is %d bytes, longer than %d", len(key), maxKeyLen)
	case !utf8.ValidString(key):
		return invalidf("key %q is not valid UTF-8", key)
	case strings.ContainsAny(key, "{}"):
		return invalidf("key %q contains a brace (braces delimit the hash tag)", key)
	case hasControl(key):
		return invalidf("key %q contains a control character", key)
	}
	return nil
}

// validateHolder checks a holder string: printable UTF-8, at most 1024 bytes.
func validateHolder(holder string) error {
	switch {
	case holder == "":
		return invalidf("holder is empty")
	case len(holder) > maxHolderLen:
		return invalidf("holder is %d bytes, longer than %d", len(holder), maxHolderLen)
	case !utf8.ValidString(holder):
		return invalidf("holder %q is not valid UTF-8", holder)
	case hasControl(holder):
		return invalidf("holder %q contains a control character", holder)
	}
	return nil
}

func hasControl(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return true
		}
	}
	return false
}
