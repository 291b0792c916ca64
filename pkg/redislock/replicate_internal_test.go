package redislock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwarden/lockwarden/internal/redistest"
)

// ringOf returns a one-shard Ring on addr: a client without Conn, so the
// acquire script and WAIT go in one pipeline.
func ringOf(t *testing.T, addr string, read time.Duration) *redis.Ring {
	t.Helper()
	r := redis.NewRing(&redis.RingOptions{
		Addrs: map[string]string{"s": addr}, MaxRetries: -1,
		ReadTimeout: read, ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// Review 2, finding 4 on the pipelined path: the ctx deadline cuts the WAIT
// after the script's reply was read. go-redis sets the WAIT's error on the
// script's command too (setCmdsErr); the decoded reply still counts, so the
// grant is undone and the error is ErrNotReplicated, not an ambiguous one.
func TestReview2PipelinedWaitCutAfterScriptReplyIsNotReplicated(t *testing.T) {
	srv := redistest.Start(t, redistest.Config{})
	c, err := New(ringOf(t, srv.Addr(), 5*time.Second), Config{TTL: 10 * time.Second, WaitReplicas: 1, WaitTimeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	defer func() { _ = c.Close(context.Background()) }()
	k, nonce := newKeys(c.cfg.Prefix, "k"), newNonce()
	cctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	res, _, waitErr, err := c.runAcquire(cctx, []string{k.lock, k.token, k.queue},
		nonce, "a", c.ttlMillis(), "", k.waiter, k.gone+nonce)
	cancel()
	if err != nil || !grants(res) || waitErr == nil {
		t.Errorf("runAcquire with the WAIT cut by ctx = res %v, waitErr %v, err %v; want the decoded grant, a WAIT error and no script error", res, waitErr, err)
	}
	cctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = c.TryAcquire(cctx, "k2", "a")
	if !errors.Is(err, ErrNotReplicated) {
		t.Errorf("TryAcquire with the WAIT cut by ctx = %v, want ErrNotReplicated", err)
	}
	if n, _ := srv.Client(t).Exists(context.Background(), newKeys(c.cfg.Prefix, "k2").lock).Result(); n != 0 {
		t.Errorf("lock key k2 after the undone grant exists, want deleted")
	}
}

// New refuses a WaitTimeout that a pipeline's ReadTimeout would cut.
func TestNewRefusesWaitTimeoutAbovePipelineReadTimeout(t *testing.T) {
	r := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"s": "127.0.0.1:1"}, ReadTimeout: time.Second})
	t.Cleanup(func() { _ = r.Close() })
	_, err := New(r, Config{TTL: 10 * time.Second, WaitReplicas: 1, WaitTimeout: 1500 * time.Millisecond})
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("New(Ring with ReadTimeout 1s, WaitTimeout 1.5s) = %v, want ErrInvalid", err)
	}
}

func TestCheckWaitTimeout(t *testing.T) {
	tests := []struct {
		name     string
		replicas int
		wait     time.Duration
		read     time.Duration
		ok       bool
	}{
		{"below", 1, time.Second, 3 * time.Second, true},
		{"equal", 1, 3 * time.Second, 3 * time.Second, false},
		{"above", 1, 4 * time.Second, 3 * time.Second, false},
		{"no replicas", 0, 4 * time.Second, 3 * time.Second, true},
		{"no read deadline", 1, 4 * time.Second, -1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkWaitTimeout(Config{WaitReplicas: tt.replicas, WaitTimeout: tt.wait}, tt.read)
			if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrInvalid)) {
				t.Errorf("checkWaitTimeout(%d, %v, %v) = %v, want ok %v (else ErrInvalid)", tt.replicas, tt.wait, tt.read, err, tt.ok)
			}
		})
	}
}

func TestRingReadTimeout(t *testing.T) {
	for _, tc := range []struct{ set, want time.Duration }{
		{0, 5 * time.Second}, // go-redis's default for each shard
		{-1, 0},              // no deadline
		{2 * time.Second, 2 * time.Second},
	} {
		if got := ringReadTimeout(tc.set); got != tc.want {
			t.Errorf("ringReadTimeout(%v) = %v, want %v", tc.set, got, tc.want)
		}
	}
}
