package redislock_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwarden/lockwarden/internal/redistest"
	"github.com/lockwarden/lockwarden/pkg/redislock"
)

// addr is a redis-server shared by the Example functions, which cannot start
// one themselves. Tests start their own.
var addr string

func TestMain(m *testing.M) { os.Exit(redistest.RunTests(m, &addr)) }

// env is one test's redis-server and a direct client of it.
type env struct {
	t   *testing.T
	srv *redistest.Server
	rdb *redis.Client
}

func newEnv(t *testing.T, cfg redistest.Config) *env {
	t.Helper()
	srv := redistest.Start(t, cfg)
	return &env{t: t, srv: srv, rdb: srv.Client(t)}
}

// locks returns a lock client on rdb with cfg, closed at cleanup.
func (e *env) locks(rdb redis.UniversalClient, cfg redislock.Config) *redislock.Client {
	e.t.Helper()
	c, err := redislock.New(rdb, cfg)
	if err != nil {
		e.t.Fatalf("New(%+v) = %v, want nil", cfg, err)
	}
	e.t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = c.Close(cctx) // may fail on purpose-broken networks; keys expire
	})
	return c
}

// proxied returns a client of the server through a new fault proxy.
func (e *env) proxied() (*redistest.Proxy, *redis.Client) {
	p := redistest.StartProxy(e.t, e.srv.Addr())
	return p, redistest.ClientOf(e.t, p.Addr())
}

// dbsize returns the number of keys in the server.
func (e *env) dbsize() int64 {
	e.t.Helper()
	n, err := e.rdb.DBSize(ctx(e.t)).Result()
	if err != nil {
		e.t.Fatalf("DBSIZE: %v", err)
	}
	return n
}

// get returns the value of key, or "" if it does not exist.
func (e *env) get(key string) string {
	e.t.Helper()
	v, err := e.rdb.Get(ctx(e.t), key).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		e.t.Fatalf("GET %s: %v", key, err)
	}
	return v
}

// ctx returns a context for one test step.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// tryAcquire takes key for holder or fails the test.
func tryAcquire(t *testing.T, c *redislock.Client, key, holder string) *redislock.Lock {
	t.Helper()
	l, err := c.TryAcquire(ctx(t), key, holder)
	if err != nil {
		t.Fatalf("TryAcquire(%q, %q) = %v, want nil", key, holder, err)
	}
	return l
}

// lockKey is where the default prefix keeps the lock named key.
func lockKey(key string) string { return "lockwarden:{" + key + "}:lock" }

// eventually polls cond every 10 ms until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// closed reports whether ch is closed.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
