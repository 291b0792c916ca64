package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	bsm "github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"

	"github.com/lockwarden/lockwarden/pkg/redislock"
)

// peerRetry is the retry interval given to the peers that poll (bsm/redislock
// and redsync): shorter than either's usual setting, which favours their
// throughput and costs them commands.
const peerRetry = 10 * time.Millisecond

// contender is one process's view of a lock library: it takes a lock and
// keeps it alive (with the library's watchdog, or the loop a user must write
// for libraries without one) until unlock.
type contender interface {
	lock(ctx context.Context, key string) (unlock func(context.Context) error, err error)
	close()
}

// engine is a lock library under test on one redis-server.
type engine struct {
	name     string
	version  string
	renewal  string // how a held lock is kept alive
	validity string // what the holder knows about its lock's end
	// newContender returns a contender with its own client state.
	newContender func(ttl time.Duration) (contender, error)
	requests     atomic.Int64 // client requests sent (each a round trip unless pipelined)
	stalls       atomic.Int64 // acquires abandoned after stallAfter without a grant and tried again
}

// counter is a go-redis hook counting requests: a command or a pipeline.
type counter struct{ n *atomic.Int64 }

func (c counter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { c.n.Add(1); return next(ctx, cmd) }
}
func (c counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { c.n.Add(1); return next(ctx, cmds) }
}

func goRedis(addr string, n *atomic.Int64) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64})
	rdb.AddHook(counter{n})
	return rdb
}

func engines(addr string) []*engine {
	var es []*engine
	ours := &engine{name: "lockwarden pkg/redislock", version: "this tree",
		renewal: "engine watchdog, TTL/3", validity: "Valid()/ValidUntil() from send times, Done, Context; fencing token"}
	ours.newContender = func(ttl time.Duration) (contender, error) {
		rdb := goRedis(addr, &ours.requests)
		c, err := redislock.New(rdb, redislock.Config{TTL: ttl})
		if err != nil {
			return nil, err
		}
		return &oursC{c: c, rdb: rdb}, nil
	}
	es = append(es, ours)

	b := &engine{name: "bsm/redislock", version: "v0.9.4 (newest served)",
		renewal: "none built in: a user loop calls Refresh every TTL/3", validity: "none (Refresh errors, if the user loop checks them)"}
	b.newContender = func(ttl time.Duration) (contender, error) {
		rdb := goRedis(addr, &b.requests)
		return &bsmC{l: bsm.New(rdb), rdb: rdb, ttl: ttl}, nil
	}
	es = append(es, b)

	r := &engine{name: "go-redsync/redsync", version: "v4.18.1",
		renewal: "none built in: a user loop calls Extend every TTL/3", validity: "Until() (wall clock at acquire); no loss signal"}
	r.newContender = func(ttl time.Duration) (contender, error) {
		rdb := goRedis(addr, &r.requests)
		return &redsyncC{rs: redsync.New(goredis.NewPool(rdb)), rdb: rdb, ttl: ttl}, nil
	}
	es = append(es, r)

	q := &engine{name: "rueidis rueidislock", version: "v1.0.79 (KeyMajority 1, NoLoopTracking, TryNextAfter 1s)",
		renewal: "built in, every KeyValidity/2", validity: "context cancelled when an extension fails or KeyValidity passes"}
	q.newContender = func(ttl time.Duration) (contender, error) {
		l, err := rueidislock.NewLocker(rueidislock.LockerOption{
			ClientOption:   rueidis.ClientOption{InitAddress: []string{addr}},
			ClientBuilder:  func(o rueidis.ClientOption) (rueidis.Client, error) { return countingRueidis(o, &q.requests) },
			KeyMajority:    1,
			KeyValidity:    ttl,
			NoLoopTracking: true,
			TryNextAfter:   time.Second,
		})
		if err != nil {
			return nil, err
		}
		return &rueidisC{l: l, stalls: &q.stalls}, nil
	}
	es = append(es, q)
	return es
}

type oursC struct {
	c   *redislock.Client
	rdb *redis.Client
	n   atomic.Int64
}

func (o *oursC) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	l, err := o.c.Acquire(ctx, key, fmt.Sprintf("bench-%d", o.n.Add(1)))
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

func (o *oursC) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = o.c.Close(ctx)
	_ = o.rdb.Close()
}

// keepAlive runs refresh every interval until the returned stop is called:
// the loop a user writes for a library without a watchdog.
func keepAlive(interval time.Duration, refresh func(context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				_ = refresh(ctx)
			}
		}
	}()
	return func() { cancel(); wg.Wait() }
}

type bsmC struct {
	l   *bsm.Client
	rdb *redis.Client
	ttl time.Duration
}

func (b *bsmC) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	l, err := b.l.Obtain(ctx, key, b.ttl, &bsm.Options{RetryStrategy: bsm.LinearBackoff(peerRetry)})
	if err != nil {
		return nil, err
	}
	stop := keepAlive(b.ttl/3, func(ctx context.Context) error { return l.Refresh(ctx, b.ttl, nil) })
	return func(ctx context.Context) error { stop(); return l.Release(ctx) }, nil
}

func (b *bsmC) close() { _ = b.rdb.Close() }

type redsyncC struct {
	rs  *redsync.Redsync
	rdb *redis.Client
	ttl time.Duration
}

func (r *redsyncC) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	m := r.rs.NewMutex(key, redsync.WithExpiry(r.ttl), redsync.WithTries(math.MaxInt32), redsync.WithRetryDelay(peerRetry))
	if err := m.LockContext(ctx); err != nil {
		return nil, err
	}
	stop := keepAlive(r.ttl/3, func(ctx context.Context) error { _, err := m.ExtendContext(ctx); return err })
	return func(ctx context.Context) error { stop(); _, err := m.UnlockContext(ctx); return err }, nil
}

func (r *redsyncC) close() { _ = r.rdb.Close() }

// stallAfter is how long a rueidislock acquire may wait before the benchmark
// abandons it and tries again. rueidislock's waiter sleeps until a
// client-side-caching invalidation of the key, with no timeout: when its
// acquire script's reply is late (TryNextAfter, 20 ms by default, on a loaded
// machine) or the invalidation is missed, it waits forever, and a run of
// make bench-redis hung in its uncontended loop. The retries are counted and
// reported (stalls).
const stallAfter = 2 * time.Second

type rueidisC struct {
	l      rueidislock.Locker
	stalls *atomic.Int64
}

func (q *rueidisC) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	for {
		// A cancel, not a deadline: rueidislock shortens the lock's validity
		// to a deadline of the ctx it is given.
		cctx, stop := context.WithCancel(ctx)
		stalled := time.AfterFunc(stallAfter, stop)
		_, cancel, err := q.l.WithContext(cctx, key)
		if stalled.Stop() && err == nil {
			return func(context.Context) error { cancel(); stop(); return nil }, nil
		}
		if err == nil {
			cancel() // granted just as the stall timer cancelled it
		}
		stop()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !errors.Is(err, context.Canceled) && err != nil {
			return nil, err
		}
		q.stalls.Add(1)
	}
}

func (q *rueidisC) close() { q.l.Close() }

// countingClient counts rueidis requests (a command or a pipeline of them).
type countingClient struct {
	rueidis.Client
	n *atomic.Int64
}

func countingRueidis(o rueidis.ClientOption, n *atomic.Int64) (rueidis.Client, error) {
	c, err := rueidis.NewClient(o)
	if err != nil {
		return nil, err
	}
	return countingClient{Client: c, n: n}, nil
}

func (c countingClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.n.Add(1)
	return c.Client.Do(ctx, cmd)
}

func (c countingClient) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	c.n.Add(1)
	return c.Client.DoMulti(ctx, cmds...)
}

func (c countingClient) DoCache(ctx context.Context, cmd rueidis.Cacheable, ttl time.Duration) rueidis.RedisResult {
	c.n.Add(1)
	return c.Client.DoCache(ctx, cmd, ttl)
}

func (c countingClient) DoMultiCache(ctx context.Context, multi ...rueidis.CacheableTTL) []rueidis.RedisResult {
	c.n.Add(1)
	return c.Client.DoMultiCache(ctx, multi...)
}
