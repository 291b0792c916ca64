package redislock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwarden/lockwarden/internal/redistest"
	"github.com/lockwarden/lockwarden/pkg/redislock"
)

// requests counts the commands (and pipelines) a go-redis client sends, by
// name.
type requests struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *requests) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *requests) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.mu.Lock()
		r.n[cmd.Name()]++
		r.mu.Unlock()
		return next(ctx, cmd)
	}
}
func (r *requests) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.mu.Lock()
		r.n["pipeline"]++
		r.mu.Unlock()
		return next(ctx, cmds)
	}
}

// snapshot returns the counts so far.
func (r *requests) snapshot() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := make(map[string]int, len(r.n))
	for k, v := range r.n {
		m[k] = v
	}
	return m
}

// counted returns a client of the env's server whose requests are counted.
func (e *env) counted() (*redis.Client, *requests) {
	rdb := redistest.ClientOf(e.t, e.srv.Addr())
	r := &requests{n: map[string]int{}}
	rdb.AddHook(r)
	return rdb, r
}

// sum is the number of requests in m.
func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// After SCRIPT FLUSH (as after a restart without the scripts, or a
// failover to a replica that never ran them), the first renewal costs one
// request: it sends the script's body, not EVALSHA, NOSCRIPT and EVAL.
func TestRenewAfterScriptFlushIsOneRoundTrip(t *testing.T) {
	e := newEnv(t, redistest.Config{})
	rdb, reqs := e.counted()
	c := e.locks(rdb, redislock.Config{TTL: 3 * time.Second}) // renew interval 1 s
	l := tryAcquire(t, c, "k", "holder")
	first := l.ValidUntil()
	eventually(t, 3*time.Second, "first renewal", func() bool { return l.ValidUntil().After(first.Add(500 * time.Millisecond)) })
	if err := e.rdb.ScriptFlush(ctx(t)).Err(); err != nil {
		t.Fatal(err)
	}
	before, renewed := reqs.snapshot(), l.ValidUntil()
	eventually(t, 3*time.Second, "renewal after the flush", func() bool { return l.ValidUntil().After(renewed.Add(500 * time.Millisecond)) })
	after := reqs.snapshot()
	if n := sum(after) - sum(before); n != 1 {
		t.Errorf("requests of the first renewal after SCRIPT FLUSH = %d (%v before, %v after), want 1", n, before, after)
	}
	if !l.Valid() {
		t.Error("lock not valid after the renewal")
	}
}
