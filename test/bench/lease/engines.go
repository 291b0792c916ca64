package main

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/lockwarden/lockwarden/pkg/lease"
)

// engine is one lock implementation under test.
type engine interface {
	// name is the engine's column heading.
	name() string
	// newContender opens contender i's own session on cli, for the lock
	// named key under prefix (a prefix of this measurement and engine only).
	// ctx is the session's lifetime; setup calls are bounded by setupTimeout.
	newContender(ctx context.Context, cli *clientv3.Client, prefix, key string, i int) (contender, error)
}

// contender is one session taking one lock over and over.
type contender interface {
	// acquire blocks until the lock is held or ctx ends.
	acquire(ctx context.Context) error
	// release gives up the lock taken by the last acquire.
	release(ctx context.Context) error
	// close ends the session and revokes its lease.
	close(ctx context.Context) error
}

// lockwardenEngine is pkg/lease: one Session per contender, blocking Acquire
// (FIFO queue), Lock.Release.
type lockwardenEngine struct{ ttl time.Duration }

func (lockwardenEngine) name() string { return "lockwarden" }

func (e lockwardenEngine) newContender(ctx context.Context, cli *clientv3.Client, prefix, key string, i int) (contender, error) {
	sctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	s, err := lease.NewEngine(cli, lease.WithPrefix(prefix)).NewSession(sctx, e.ttl) // sctx bounds the grant only
	if err != nil {
		return nil, err
	}
	return &lockwardenContender{s: s, key: key, holder: fmt.Sprintf("contender-%02d", i)}, nil
}

type lockwardenContender struct {
	s      *lease.Session
	key    string
	holder string
	l      *lease.Lock
}

func (c *lockwardenContender) acquire(ctx context.Context) error {
	l, err := c.s.Acquire(ctx, c.key, c.holder)
	if err != nil {
		return err
	}
	c.l = l
	return nil
}

func (c *lockwardenContender) release(ctx context.Context) error {
	l := c.l
	c.l = nil
	return l.Release(ctx)
}

func (c *lockwardenContender) close(ctx context.Context) error { return c.s.Close(ctx) }

// mutexEngine is go.etcd.io/etcd/client/v3/concurrency: one Session per
// contender, Mutex.Lock and Mutex.Unlock.
type mutexEngine struct{ ttl time.Duration }

func (mutexEngine) name() string { return "etcd Mutex" }

func (e mutexEngine) newContender(ctx context.Context, cli *clientv3.Client, prefix, key string, _ int) (contender, error) {
	// The session's context also bounds its keepalive and its Close, so the
	// grant gets its own deadline and the session a context that only Close
	// ends (an interrupted run still revokes its leases).
	sctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	g, err := cli.Grant(sctx, int64(e.ttl/time.Second))
	if err != nil {
		return nil, fmt.Errorf("grant: %w", err)
	}
	s, err := concurrency.NewSession(cli, concurrency.WithLease(g.ID), concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		return nil, fmt.Errorf("new session: %w", err)
	}
	return &mutexContender{s: s, m: concurrency.NewMutex(s, prefix+"/"+key)}, nil
}

type mutexContender struct {
	s *concurrency.Session
	m *concurrency.Mutex
}

func (c *mutexContender) acquire(ctx context.Context) error {
	if err := c.m.Lock(ctx); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	return nil
}

func (c *mutexContender) release(ctx context.Context) error {
	if err := c.m.Unlock(ctx); err != nil {
		return fmt.Errorf("unlock: %w", err)
	}
	return nil
}

// close revokes the lease; concurrency.Session.Close bounds that by the TTL
// itself and takes no context.
func (c *mutexContender) close(context.Context) error {
	if err := c.s.Close(); err != nil {
		return fmt.Errorf("close session: %w", err)
	}
	return nil
}

// floorRun names the floor measurement: one client's bare put loop.
const floorRun = "floor"

// floorEngine is no lock: each "acquire" is one put of a small key, each
// "release" nothing. A handoff needs at least one durable write (the release
// that names the next owner), so its loop of puts, each sent after the
// previous one's answer, is the ceiling of any lock's handoffs per second on
// this etcd.
type floorEngine struct{}

func (floorEngine) name() string { return floorName }

func (floorEngine) newContender(_ context.Context, cli *clientv3.Client, prefix, key string, _ int) (contender, error) {
	return &floorContender{cli: cli, key: prefix + "/" + key}, nil
}

type floorContender struct {
	cli *clientv3.Client
	key string
}

func (c *floorContender) acquire(ctx context.Context) error {
	if _, err := c.cli.Put(ctx, c.key, "x"); err != nil {
		return fmt.Errorf("put: %w", err)
	}
	return nil
}

func (*floorContender) release(context.Context) error { return nil }

func (*floorContender) close(context.Context) error { return nil }
