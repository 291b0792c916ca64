package redislock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockwarden/lockwarden/internal/redistest"
	"github.com/lockwarden/lockwarden/pkg/redislock"
)

// Bad input is rejected with an ErrInvalid that names the problem, and
// writes nothing.
func TestBadInputWritesNothing(t *testing.T) {
	e := newEnv(t, redistest.Config{})
	if _, err := redislock.New(nil, redislock.Config{}); !errors.Is(err, redislock.ErrInvalid) || !strings.Contains(err.Error(), "nil") {
		t.Errorf("New(nil) = %v, want ErrInvalid naming the nil client", err)
	}
	if _, err := redislock.New(e.rdb, redislock.Config{TTL: 100 * time.Millisecond}); !errors.Is(err, redislock.ErrInvalid) ||
		!strings.Contains(err.Error(), "below the minimum") {
		t.Errorf("New(TTL 100ms) = %v, want ErrInvalid: below the minimum", err)
	}
	c := e.locks(e.rdb, redislock.Config{TTL: 2 * time.Second})
	tests := []struct {
		name, key, holder, want string
	}{
		{"empty key", "", "w", "key is empty"},
		{"brace in key", "a{b}", "w", "brace"},
		{"control in key", "a\x00b", "w", "control character"},
		{"long key", strings.Repeat("k", 600), "w", "longer than"},
		{"empty holder", "k", "", "holder is empty"},
		{"bad UTF-8 holder", "k", "\xff", "not valid UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.TryAcquire(ctx(t), tt.key, tt.holder)
			if !errors.Is(err, redislock.ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("TryAcquire(%q, %q) = %v, want ErrInvalid containing %q", tt.key, tt.holder, err, tt.want)
			}
			_, err = c.Acquire(ctx(t), tt.key, tt.holder)
			if !errors.Is(err, redislock.ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Acquire(%q, %q) = %v, want ErrInvalid containing %q", tt.key, tt.holder, err, tt.want)
			}
		})
	}
	if n := e.dbsize(); n != 0 {
		keys, _ := e.rdb.Keys(ctx(t), "*").Result()
		t.Errorf("DBSIZE after bad input = %d (%v), want 0", n, keys)
	}
}
