package redislock

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Client takes locks on one Redis deployment (a server, a Sentinel-managed
// primary, or a Cluster: anything behind a redis.UniversalClient). All locks
// of a Client share its Config. It is safe for concurrent use.
type Client struct {
	rdb redis.UniversalClient
	cfg Config
	id  string // names this client's waiters and its wake channel
	seq atomic.Uint64

	subMu     sync.Mutex    // serialises the first subscription
	closing   chan struct{} // closed by Close: waiters leave and return ErrClosed
	abandoned chan struct{} // closed when the first Close stops waiting: clean-up retries end
	abandon   sync.Once

	mu      sync.Mutex
	closed  bool
	locks   map[*Lock]struct{}
	waiters map[string]chan string // waiter ID -> its newest channel message (buffered 1)
	ps      *redis.PubSub          // subscribed on first wait; nil before
	wg      group                  // watchdogs, calls, deletes, waiters and the wake dispatcher
}

// New returns a Client on rdb with cfg (see Config for defaults). It writes
// nothing and starts no goroutine; a nil rdb (also a nil *redis.Client,
// *redis.ClusterClient or *redis.Ring in the interface) or an invalid cfg is
// an ErrInvalid, and so is a WaitTimeout (with WaitReplicas) not below the
// ReadTimeout of a *redis.ClusterClient or *redis.Ring, which read the WAIT
// in a pipeline.
func New(rdb redis.UniversalClient, cfg Config) (*Client, error) {
	if isNil(rdb) {
		return nil, fmt.Errorf("new client: %w: redis client is nil (%T)", ErrInvalid, rdb)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("new client: %w", err)
	}
	if read, ok := pipelineReadTimeout(rdb); ok {
		if err := checkWaitTimeout(cfg.withDefaults(), read); err != nil {
			return nil, fmt.Errorf("new client: %w", err)
		}
	}
	return &Client{
		rdb: rdb, cfg: cfg.withDefaults(), id: newNonce()[:16],
		closing: make(chan struct{}), abandoned: make(chan struct{}),
		locks: make(map[*Lock]struct{}), waiters: make(map[string]chan string),
	}, nil
}

// Config returns the client's configuration with defaults filled in.
func (c *Client) Config() Config { return c.cfg }

// Close releases every lock the client holds (best effort, within ctx; a
// lock whose release fails expires by its TTL), makes every blocked Acquire
// leave its queue and return ErrClosed, stops the wake subscription and
// waits, within ctx, for the client's goroutines and for those Acquire calls
// to have left: once Close returns nil, no waiter of this client is queued,
// so the redis client can be closed without leaving one that a release
// would grant (and everyone behind it would wait a TTL for). A leave or
// other clean-up whose reply is lost is retried meanwhile, until ctx ends.
// Acquires after Close fail with ErrClosed. The redis client is the
// caller's and stays open.
//
// Close returns when ctx ends even if a call is stuck in go-redis (a
// connection without a read deadline, ReadTimeout -1, on a network that
// swallows requests): it then returns ctx.Err() wrapped, and the stuck call
// is left to go-redis; its goroutine ends when that connection does (its
// read deadline, the redis client's Close, the peer closing it). A later
// Close waits for such goroutines again, within its own ctx.
func (c *Client) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		if err := c.wg.wait(ctx); err != nil {
			return fmt.Errorf("close client: wait for goroutines: %w", err)
		}
		return nil
	}
	c.closed = true
	close(c.closing)
	locks := make([]*Lock, 0, len(c.locks))
	for l := range c.locks {
		locks = append(locks, l)
	}
	ps := c.ps
	c.mu.Unlock()
	var errs []error
	for _, l := range locks {
		if err := l.Release(ctx); err != nil && !errors.Is(err, ErrNotHeld) {
			errs = append(errs, err)
		}
	}
	if ps != nil {
		_ = ps.Close()
	}
	err := c.wg.wait(ctx)
	c.abandon.Do(func() { close(c.abandoned) }) // clean-up retries stop: the caller's ctx is over
	if err != nil {
		errs = append(errs, fmt.Errorf("wait for goroutines: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close client: %w", err)
	}
	return nil
}

// track registers a held lock so that Close releases it; false if closed.
func (c *Client) track(l *Lock) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.locks[l] = struct{}{}
	c.wg.add()
	return true
}

func (c *Client) untrack(l *Lock) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.locks, l)
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// ttlMillis is the TTL as the scripts take it.
func (c *Client) ttlMillis() string { return strconv.FormatInt(c.cfg.TTL.Milliseconds(), 10) }

// goneMillis is the life of a nonce's tombstone as the scripts take it: TTL
// + margin, as long as a key of that nonce could live and a Release retries.
func (c *Client) goneMillis() string {
	return strconv.FormatInt((c.cfg.TTL + c.cfg.Margin).Milliseconds(), 10)
}

// ambiguous reports whether err leaves unknown whether a script ran: a
// timeout, a cancellation, a broken connection or a pool timeout may have
// lost the reply of a script that did run (or never sent it), and the
// package cannot tell which. Only an error reply from the server
// (redis.Error) says the script applied nothing; redis.Nil is an answer.
//
// The package's own outcomes are definite too: an acquire whose grant was
// deleted again (undoneError: a failed WAIT, an unreadable reply, a Client
// closed meanwhile), ErrNotReplicated and ErrClosed.
func ambiguous(err error) bool {
	if err == nil || errors.Is(err, redis.Nil) || errors.Is(err, ErrNotReplicated) || errors.Is(err, ErrClosed) {
		return false
	}
	var u *undoneError
	if errors.As(err, &u) {
		return false
	}
	var re redis.Error
	return !errors.As(err, &re)
}

// refusedCodes are the error codes with which a server refuses to run a
// command, or stops a script before its first write, for a reason that
// passes: a replica or a primary being demoted (READONLY), a server
// loading its data (LOADING), a script running too long (BUSY), maxmemory
// (OOM), a replica that lost its primary (MASTERDOWN), a slot being moved
// (TRYAGAIN, CLUSTERDOWN) and min-replicas-to-write (NOREPLICAS).
var refusedCodes = []string{"READONLY", "LOADING", "BUSY", "OOM", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "NOREPLICAS"}

// refused reports whether err is an error reply that refused the script
// for a passing reason (refusedCodes): it applied nothing, and the same
// call may succeed in a moment. Callers that must reach Redis (a leave, a
// clean-up, a blocking Acquire) retry it; ambiguous stays false for it,
// since nothing ran. Redis 7 puts the code first ("READONLY You can't
// write ... script: <sha>, on @user_script:1."); Redis 6 wraps an error
// raised inside a script ("ERR Error running script (call to f_<sha>):
// @user_script:1: -READONLY You can't ...").
//
// A grant that grab deleted again (undoneError) and ErrNotReplicated are
// not refusals, whatever they wrap: the script ran.
func refused(err error) bool {
	var u *undoneError
	if errors.As(err, &u) || errors.Is(err, ErrNotReplicated) {
		return false
	}
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	if strings.HasPrefix(msg, "ERR Error running script") {
		if _, inner, ok := strings.Cut(msg, ": -"); ok {
			msg = inner
		}
	}
	code, _, _ := strings.Cut(msg, " ")
	return slices.Contains(refusedCodes, code)
}

// isNil reports whether rdb is nil, also when it is a typed nil pointer (a
// nil *redis.Client in the interface is not == nil, and would panic at the
// first call instead of being reported by New).
func isNil(rdb redis.UniversalClient) bool {
	if rdb == nil {
		return true
	}
	v := reflect.ValueOf(rdb)
	switch v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		return v.IsNil()
	}
	return false
}
