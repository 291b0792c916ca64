package lease

import (
	"encoding/json"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// SessionOption configures a Session.
type SessionOption func(*sessionConfig)

type sessionConfig struct {
	margin    time.Duration
	hasMargin bool
}

// WithMargin sets the safety margin subtracted from every validity: a
// session is valid until S + TTL - margin, where S is the send time of its
// last confirmed renewal. The margin absorbs the rate difference between this
// machine's clock and etcd's. It must be at least 0 and below TTL/2. Default:
// min(max(2s, TTL/50), TTL/4), as for pods (DESIGN.md).
func WithMargin(d time.Duration) SessionOption {
	return func(c *sessionConfig) { c.margin, c.hasMargin = d, true }
}

// defaultMargin returns min(max(2s, ttl/50), ttl/4).
func defaultMargin(ttl time.Duration) time.Duration {
	return min(max(2*time.Second, ttl/50), ttl/4)
}

// resolve returns the margin for a session of ttl, or an ErrInvalid.
func (c sessionConfig) resolve(ttl time.Duration) (time.Duration, error) {
	if !c.hasMargin {
		return defaultMargin(ttl), nil
	}
	if c.margin < 0 || c.margin >= ttl/2 {
		return 0, invalidf("margin %v must be at least 0 and below TTL/2 (%v)", c.margin, ttl/2)
	}
	return c.margin, nil
}

// LockOption configures one lock operation: an acquire, an adopt, a release,
// a record update or a forced release. Options that do not apply to an
// operation are ignored by it.
type LockOption func(*lockConfig)

type lockConfig struct {
	guards    []clientv3.Cmp
	record    json.RawMessage
	hasRecord bool
}

// WithGuard adds compares that must hold, in the same transaction, for the
// operation to write anything: the controller passes its election lock's
// IsOwner() so that a deposed replica cannot grant, release or update. When
// the lock compare holds but a guard does not, the operation fails with
// ErrGuardFailed. Guards count towards etcd's operations per transaction
// (its --max-txn-ops, 128 by default; WithMaxTxnOps): a lock's operations
// take up to that less the engine's own 5 compares (123 at 128), a slot's
// grant (AcquireSlot, TryAcquireSlot) about half that, since it repeats them
// in a nested transaction: at a limit of M, (M-8)/2 for AcquireSlot and
// (M-7)/2 for TryAcquireSlot, rounded down (60 at 128; at 8, a slot's grant
// takes no guards). More fail with ErrInvalid, saying how many fit, before
// anything is sent.
func WithGuard(cmps ...clientv3.Cmp) LockOption {
	return func(c *lockConfig) { c.guards = append(c.guards, cmps...) }
}

// WithRecord sets the record stored with the holder on acquire (default
// none). It must be valid JSON; it is opaque to the engine. Lock.Update
// replaces it on a held key.
func WithRecord(r json.RawMessage) LockOption {
	return func(c *lockConfig) { c.record, c.hasRecord = r, true }
}

// engineCmps is the most compares the engine puts in one transaction of its
// own (an outrun waiter's regrant: lock free, tombstone absent, own entry,
// oldest entry, the call's tombstone absent; TryAcquire's: lock free,
// tombstone absent, queue empty, the call's tombstone absent); the caller's
// guards come on top.
const engineCmps = 5

// lockConfig applies opts and checks them: the record must be valid JSON,
// and the guards must fit in one transaction with the engine's own compares,
// so that etcd never refuses a transaction for its size. A slot's grant
// fits fewer (checkSlotGuards).
func (e *Engine) lockConfig(opts []LockOption) (lockConfig, error) {
	c, err := applyLockOptions(opts)
	if err != nil {
		return c, err
	}
	if n := len(c.guards); n+engineCmps > e.maxTxnOps {
		return c, invalidf("%d guard compares and the engine's %d exceed the %d operations per transaction", n, engineCmps, e.maxTxnOps)
	}
	return c, nil
}

// applyLockOptions applies opts and checks the record, which must be valid
// JSON.
func applyLockOptions(opts []LockOption) (lockConfig, error) {
	var c lockConfig
	for _, o := range opts {
		o(&c)
	}
	return c, validateRecord(c.record)
}
