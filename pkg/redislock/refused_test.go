package redislock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lockwarden/lockwarden/internal/redistest"
	"github.com/lockwarden/lockwarden/pkg/redislock"
)

// A blocking Acquire whose queue request meets an error reply that refused
// the script for a passing reason (here READONLY: the server is made a
// replica of an address nobody answers, and a primary again 300 ms later)
// keeps waiting instead of failing, and gets the lock when the holder
// releases it. Its wake-up makes it look while the server refuses writes.
func TestAcquireRetriesRefusedRequest(t *testing.T) {
	e := newEnv(t, redistest.Config{})
	cfg := redislock.Config{TTL: 4 * time.Second}
	holders := e.locks(e.rdb, cfg)
	cw := e.locks(e.srv.Client(t), cfg)
	warmUp(t, cw)
	h := tryAcquire(t, holders, "k", "holder")
	res := make(chan acquired, 1)
	go func() {
		l, err := cw.Acquire(ctx(t), "k", "waiter")
		res <- acquired{l, err}
	}()
	eventually(t, 2*time.Second, "waiter queued", func() bool { return e.rdb.LLen(ctx(t), queueKey).Val() == 1 })
	id := e.rdb.LIndex(ctx(t), queueKey, 0).Val()
	clientID, _, _ := strings.Cut(id, "/")

	e.readOnly(true)
	if err := e.rdb.Publish(ctx(t), "lockwarden:wake:"+clientID, id).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the waiter looks and meets READONLY
	e.readOnly(false)
	select {
	case r := <-res:
		t.Fatalf("Acquire returned while the lock was held: (%v, %v); want it to keep waiting through READONLY", r.l, r.err)
	default:
	}
	if err := h.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-res:
		if r.err != nil {
			t.Fatalf("Acquire after the holder released = %v, want the lock", r.err)
		}
		_ = r.l.Release(ctx(t))
	case <-time.After(2 * cfg.TTL):
		t.Fatal("the waiter never got the lock")
	}
}

// Close waits for a blocked Acquire's leave also when the leave's first
// attempt is refused (READONLY): the retry runs within Close's ctx, and
// once Close returns nil the waiter is out of the queue.
func TestCloseRetriesRefusedLeave(t *testing.T) {
	e := newEnv(t, redistest.Config{})
	cfg := redislock.Config{TTL: 4 * time.Second}
	holders := e.locks(e.rdb, cfg)
	wrdb := e.srv.Client(t)
	cw := e.locks(wrdb, cfg)
	warmUp(t, cw)
	h := tryAcquire(t, holders, "k", "holder")
	defer func() { _ = h.Release(ctx(t)) }()
	gone := make(chan error, 1)
	go func() {
		_, err := cw.Acquire(context.Background(), "k", "closer")
		gone <- err
	}()
	eventually(t, 2*time.Second, "closer queued", func() bool { return e.rdb.LLen(ctx(t), queueKey).Val() == 1 })

	e.readOnly(true)
	cctx, cancel := context.WithTimeout(ctx(t), 5*time.Second)
	defer cancel()
	cerr := make(chan error, 1)
	go func() { cerr <- cw.Close(cctx) }()
	time.Sleep(300 * time.Millisecond) // the leave meets READONLY
	e.readOnly(false)
	if err := <-cerr; err != nil {
		t.Errorf("Close = %v, want nil once the leave's retry was answered", err)
	}
	_ = wrdb.Close()
	if q := e.rdb.LRange(ctx(t), queueKey, 0, -1).Val(); len(q) != 0 {
		t.Errorf("queue after Close = %v, want empty (the closed client's waiter left)", q)
	}
	if err := <-gone; err == nil {
		t.Error("the closed client's Acquire = nil, want ErrClosed")
	}
}

// readOnly makes the server a replica of an address nobody answers (it
// keeps its data, answers reads and refuses writes with READONLY), or a
// primary again.
func (e *env) readOnly(on bool) {
	e.t.Helper()
	args := []any{"REPLICAOF", "NO", "ONE"}
	if on {
		args = []any{"REPLICAOF", "127.0.0.1", "1"}
	}
	if err := e.rdb.Do(ctx(e.t), args...).Err(); err != nil {
		e.t.Fatalf("%v: %v", args, err)
	}
}
