package redislock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwarden/lockwarden/internal/redistest"
	"github.com/lockwarden/lockwarden/pkg/redislock"
)

// setIfHeld writes ARGV[1] to KEYS[1]; the guard runs it only while the lock
// is this grant.
var setIfHeld = redislock.NewScript(`
redis.call('SET', KEYS[1], ARGV[1])
return #KEYS + #ARGV
`)

// Guarded writes apply only while the lock key is this grant: a write from
// an ex-holder, however late, changes nothing and says ErrNotHeld.
func TestGuardedWrites(t *testing.T) {
	e := newEnv(t, redistest.Config{})
	ca := e.locks(e.rdb, redislock.Config{TTL: 5 * time.Second})
	cb := e.locks(e.rdb, redislock.Config{TTL: 5 * time.Second})
	data := "app:{k}:data"
	a := tryAcquire(t, ca, "k", "a")
	res, err := a.Eval(ctx(t), setIfHeld, []string{data}, "from-a")
	if err != nil || res != int64(2) {
		t.Fatalf("Eval while held = %v, %v; want 2 (the script sees its own KEYS and ARGV), nil", res, err)
	}
	if err := a.Watch(ctx(t), func(p redis.Pipeliner) error {
		p.Append(ctx(t), data, "+watch")
		return nil
	}, data); err != nil {
		t.Fatalf("Watch while held = %v", err)
	}
	if v := e.get(data); v != "from-a+watch" {
		t.Fatalf("data = %q, want from-a+watch", v)
	}

	// A's key disappears (say, it expired during a pause) and B takes over,
	// while A's Lock still believes it is valid.
	e.rdb.Del(ctx(t), lockKey("k"))
	b := tryAcquire(t, cb, "k", "b")
	if !a.Valid() {
		t.Fatal("A noticed too early: the test needs A to still believe it holds")
	}
	if _, err := a.Eval(ctx(t), setIfHeld, []string{data}, "late-a"); !errors.Is(err, redislock.ErrNotHeld) {
		t.Errorf("A's Eval after B took over = %v, want ErrNotHeld", err)
	}
	err = a.Watch(ctx(t), func(p redis.Pipeliner) error {
		p.Set(ctx(t), data, "late-a-watch", 0)
		return nil
	}, data)
	if !errors.Is(err, redislock.ErrNotHeld) {
		t.Errorf("A's Watch after B took over = %v, want ErrNotHeld", err)
	}
	if v := e.get(data); v != "from-a+watch" {
		t.Errorf("data after A's late writes = %q, want unchanged", v)
	}
	if _, err := b.Eval(ctx(t), setIfHeld, []string{data}, "from-b"); err != nil {
		t.Errorf("B's Eval = %v", err)
	}
	_ = b.Release(ctx(t))
	if _, err := b.Eval(ctx(t), setIfHeld, []string{data}, "after-release"); !errors.Is(err, redislock.ErrReleased) {
		t.Errorf("Eval after Release = %v, want ErrReleased without a round trip", err)
	}
}

// With WaitReplicas, an acquire that no replica confirms is released again
// and fails with ErrNotReplicated; with a replica it is granted and the
// replica has the key and the token.
func TestWaitReplicas(t *testing.T) {
	e := newEnv(t, redistest.Config{})
	cfg := redislock.Config{TTL: 2 * time.Second, WaitReplicas: 1, WaitTimeout: 200 * time.Millisecond}
	c := e.locks(e.rdb, cfg)
	if _, err := c.TryAcquire(ctx(t), "k", "w"); !errors.Is(err, redislock.ErrNotReplicated) {
		t.Fatalf("TryAcquire without replicas = %v, want ErrNotReplicated", err)
	}
	if v := e.get(lockKey("k")); v != "" {
		t.Errorf("lock key after an unreplicated acquire = %q, want released", v)
	}
	// A blocking Acquire reports it too, at once, instead of retrying until
	// its context ends.
	actx, cancel := context.WithTimeout(ctx(t), 5*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := c.Acquire(actx, "k", "w"); !errors.Is(err, redislock.ErrNotReplicated) || time.Since(start) > 2*time.Second {
		t.Fatalf("Acquire without replicas = %v after %v, want ErrNotReplicated within the WAIT timeout", err, time.Since(start))
	}
	if v := e.get(lockKey("k")); v != "" {
		t.Errorf("lock key after an unreplicated Acquire = %q, want released", v)
	}
	replica := redistest.Start(t, redistest.Config{ReplicaOf: e.srv.Addr()})
	rr := replica.Client(t)
	eventually(t, 10*time.Second, "replica in sync", func() bool {
		info, _ := rr.Info(ctx(t), "replication").Result()
		return strings.Contains(info, "master_link_status:up")
	})
	// A generous WAIT timeout: the replica answers the primary's GETACK, which
	// can take a while on a loaded machine.
	patient := e.locks(e.rdb, redislock.Config{TTL: 2 * time.Second, WaitReplicas: 1, WaitTimeout: 5 * time.Second})
	l := tryAcquire(t, patient, "k", "w")
	if v, _ := rr.Get(ctx(t), lockKey("k")).Result(); v == "" {
		t.Error("replica lacks the lock key right after a WAITed acquire")
	}
	if n, _ := rr.Get(ctx(t), tokenKey).Int64(); n != l.Token() {
		t.Errorf("replica's token counter %d, want %d", n, l.Token())
	}
}
