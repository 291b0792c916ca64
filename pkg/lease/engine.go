package lease

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// DefaultPrefix is the etcd key prefix of an Engine without WithPrefix.
const DefaultPrefix = "/lockwarden"

// MinTTL is the shortest session TTL the engine accepts: below it the renewal
// period (TTL/3) and the margin leave no room for a single slow round trip.
const MinTTL = 2 * time.Second

// maxKeyLen bounds lock names; etcd itself allows more, but a name this long
// is a bug in the caller.
const maxKeyLen = 1024

// Engine creates sessions on one etcd client and answers questions about
// locks under one key prefix. It is safe for concurrent use.
//
// Key layout under the prefix P, for the lock named k:
//
//	P/locks/k                        the lock; value = holder and record (JSON)
//	P/queue/<escaped k>/<lease hex>  blocking waiters, FIFO by CreateRevision;
//	                                 the oldest is the grant when P/locks/k and
//	                                 the tombstone are absent (owner.go)
//	P/tombstones/k                   lock-delay after ForceRelease
//	P/semaphores/<escaped s>/<lease hex>  blocking AcquireSlot waiters of the
//	                                 semaphore s, FIFO by CreateRevision; never
//	                                 a grant: a slot's grant is the lock key of
//	                                 SlotKey(s, i) (semaphore.go)
//	P/gone/<call id>                 the tombstone of an Acquire, TryAcquire,
//	                                 AcquireSlot or TryAcquireSlot call that
//	                                 lost a write's answer (put when it gave
//	                                 up, or when it got the lock after all), on
//	                                 its session's lease: that write, if it
//	                                 lands later, fails
//	P/fences/k                       a ForceRelease's freshness marker (seconds)
//	P/idle                           never written: waiting sessions keep one
//	                                 idle watch on it (keepWatchStream)
//
// In the queue path, k is escaped with url.PathEscape so that it contains no
// "/": the queue range of "a" must not contain the waiters of "a/b".
type Engine struct {
	cli       *clientv3.Client
	prefix    string
	maxTxnOps int
	err       error // invalid option, reported by every call

	mu   sync.Mutex
	live map[clientv3.LeaseID]bool // leases a live session of this engine renews
}

// Option configures an Engine.
type Option func(*Engine)

// WithPrefix sets the etcd key prefix (default DefaultPrefix). It must be
// non-empty and must not end in "/"; an invalid prefix makes every call of the
// engine fail with ErrInvalid.
func WithPrefix(p string) Option {
	return func(e *Engine) {
		if p == "" || strings.HasSuffix(p, "/") {
			e.err = invalidf("prefix %q must be non-empty and must not end in /", p)
			return
		}
		e.prefix = p
	}
}

// WithMaxTxnOps sets the most operations the engine puts in one transaction
// (default 128, etcd's default --max-txn-ops; compares count). Set it to the
// server's value if that was lowered. It must be at least 8.
func WithMaxTxnOps(n int) Option {
	return func(e *Engine) {
		if n < 8 {
			e.err = invalidf("max txn ops %d is below 8", n)
			return
		}
		e.maxTxnOps = n
	}
}

// NewEngine returns an engine using cli. The client's lifetime is the
// caller's: closing it ends every session of the engine.
func NewEngine(cli *clientv3.Client, opts ...Option) *Engine {
	e := &Engine{cli: cli, prefix: DefaultPrefix, maxTxnOps: 128, live: make(map[clientv3.LeaseID]bool)}
	for _, o := range opts {
		o(e)
	}
	if cli == nil && e.err == nil {
		e.err = invalidf("nil etcd client")
	}
	return e
}

// reserve records that a session of this engine renews lease id; it reports
// false if one does already.
func (e *Engine) reserve(id clientv3.LeaseID) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.live[id] {
		return false
	}
	e.live[id] = true
	return true
}

// forget records that no session of this engine renews lease id any more.
func (e *Engine) forget(id clientv3.LeaseID) {
	e.mu.Lock()
	delete(e.live, id)
	e.mu.Unlock()
}

// Client returns the engine's etcd client.
func (e *Engine) Client() *clientv3.Client { return e.cli }

// Prefix returns the engine's etcd key prefix.
func (e *Engine) Prefix() string { return e.prefix }

// Path returns the etcd key of the lock named key.
func (e *Engine) Path(key string) string { return e.prefix + "/locks/" + key }

func (e *Engine) tombPath(key string) string { return e.prefix + "/tombstones/" + key }

func (e *Engine) fencePath(key string) string { return e.prefix + "/fences/" + key }

// queueDir is the range prefix of key's waiters, ending in "/".
func (e *Engine) queueDir(key string) string {
	return e.prefix + "/queue/" + url.PathEscape(key) + "/"
}

func (e *Engine) queuePath(key string, id clientv3.LeaseID) string {
	return fmt.Sprintf("%s%016x", e.queueDir(key), int64(id))
}

// semDir is the range prefix of the semaphore name's waiters, ending in "/";
// the name is escaped as in queueDir.
func (e *Engine) semDir(name string) string {
	return e.prefix + "/semaphores/" + url.PathEscape(name) + "/"
}

func (e *Engine) semPath(name string, id clientv3.LeaseID) string {
	return fmt.Sprintf("%s%016x", e.semDir(name), int64(id))
}

// gonePath is the tombstone of the call whose random ID is call (semaphore.go).
func (e *Engine) gonePath(call string) string { return e.prefix + "/gone/" + call }

// validateKey checks a lock name: a relative, clean, printable path that
// cannot escape the prefix.
func validateKey(key string) error {
	switch {
	case key == "":
		return invalidf("key is empty")
	case len(key) > maxKeyLen:
		return invalidf("key is %d bytes, longer than %d", len(key), maxKeyLen)
	case !utf8.ValidString(key):
		return invalidf("key %q is not valid UTF-8", key)
	case strings.HasPrefix(key, "/"):
		return invalidf("key %q starts with /: keys are relative to the prefix", key)
	}
	for _, r := range key {
		if r < 0x20 || r == 0x7f {
			return invalidf("key %q contains a control character", key)
		}
	}
	for _, seg := range strings.Split(key, "/") {
		switch seg {
		case "":
			return invalidf("key %q has an empty path segment", key)
		case ".", "..":
			return invalidf("key %q has a %q segment: keys must not escape the prefix", key, seg)
		}
	}
	return nil
}

func validateHolder(holder string) error {
	if holder == "" {
		return invalidf("holder is empty")
	}
	if !utf8.ValidString(holder) {
		return invalidf("holder %q is not valid UTF-8", holder)
	}
	return nil
}

// Holding is a linearizable view of one lock.
type Holding struct {
	// Key is the lock name.
	Key string
	// Holder and Record are what the holder stored; empty when free.
	Holder string
	Record json.RawMessage
	// Token is the fencing token of the current grant, 0 when free.
	Token int64
	// Lease is the holder's etcd lease, 0 when free.
	Lease clientv3.LeaseID
	// TTL is the time left on the holder's lease as reported by etcd, in
	// whole seconds. It is etcd's view, not a bound: see doc.go.
	TTL time.Duration
	// Waiters is the number of blocking Acquire calls queued.
	Waiters int64
	// LockDelay is true while a ForceRelease tombstone bars new holders.
	LockDelay bool
	// Revision is the etcd revision the view was read at.
	Revision int64
	// ClusterID is the etcd cluster that answered: a restore from a snapshot makes a new
	// cluster, whose revisions and keys are the snapshot's.
	ClusterID uint64
}

// Inspect reads the lock named key with one linearizable transaction, then
// the holder's lease TTL. A free lock is not an error: Token is 0. The holder
// is the grant of the ownership rule (owner.go): the lock key, or a blocking
// Acquire's queue entry that became the grant.
func (e *Engine) Inspect(ctx context.Context, key string) (Holding, error) {
	if err := e.check(key); err != nil {
		return Holding{}, fmt.Errorf("inspect %s: %w", key, err)
	}
	resp, err := e.cli.Txn(ctx).Then(append(e.stateReads(key),
		clientv3.OpGet(e.queueDir(key), clientv3.WithPrefix(), clientv3.WithCountOnly()))...).Commit()
	if err != nil {
		return Holding{}, fmt.Errorf("inspect %s: %w", key, err)
	}
	st := readState(resp.Responses)
	h := Holding{
		Key:       key,
		Revision:  resp.Header.Revision,
		ClusterID: resp.Header.ClusterId,
		LockDelay: st.tomb != nil,
		Waiters:   resp.Responses[3].GetResponseRange().Count,
	}
	kv := st.owner()
	if kv == nil {
		return h, nil
	}
	if kv != st.lock {
		h.Waiters-- // the grant is an entry, not a waiter
	}
	v := decodeValue(kv.Value)
	h.Holder, h.Record = v.Holder, v.Record
	h.Token, h.Lease = kv.CreateRevision, clientv3.LeaseID(kv.Lease)
	if h.Lease != clientv3.NoLease {
		ttl, err := e.cli.TimeToLive(ctx, h.Lease)
		if err != nil {
			return Holding{}, fmt.Errorf("inspect %s: lease %x: %w", key, int64(h.Lease), err)
		}
		if ttl.TTL > 0 {
			h.TTL = time.Duration(ttl.TTL) * time.Second
		}
	}
	return h, nil
}

// check reports a bad engine option or a bad key.
func (e *Engine) check(key string) error {
	if e.err != nil {
		return e.err
	}
	return validateKey(key)
}
