package lease_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockwarden/lockwarden/pkg/lease"
)

// Bad input gets an error that says what is wrong, and leaves nothing in
// etcd: no key, no waiter entry, no lease.
func TestBadInput(t *testing.T) {
	e := newEnv(t)
	eng := lease.NewEngine(e.cli) // default prefix: this etcd is the test's own
	s := e.session(eng, 2*time.Second)
	held, err := s.TryAcquire(ctx(t), "held", "h")
	if err != nil {
		t.Fatalf("TryAcquire = %v, want nil", err)
	}
	before := leases(t, e.cli)
	keysBefore := keys(t, e.cli)

	cases := []struct {
		name string
		call func(ctx context.Context) error
		want error
		msg  string // in the error message
	}{
		{"ttl zero", func(c context.Context) error { _, err := eng.NewSession(c, 0); return err }, lease.ErrInvalid, "below the minimum"},
		{"ttl 1s", func(c context.Context) error { _, err := eng.NewSession(c, time.Second); return err }, lease.ErrInvalid, "below the minimum"},
		{"ttl negative", func(c context.Context) error { _, err := eng.NewSession(c, -time.Second); return err }, lease.ErrInvalid, "below the minimum"},
		{"ttl fraction", func(c context.Context) error { _, err := eng.NewSession(c, 2500*time.Millisecond); return err }, lease.ErrInvalid, "whole number of seconds"},
		{"margin too large", func(c context.Context) error {
			_, err := eng.NewSession(c, 2*time.Second, lease.WithMargin(time.Second))
			return err
		}, lease.ErrInvalid, "below TTL/2"},
		{"empty prefix", func(c context.Context) error {
			_, err := lease.NewEngine(e.cli, lease.WithPrefix("")).NewSession(c, 2*time.Second)
			return err
		}, lease.ErrInvalid, "prefix"},
		{"empty key", func(c context.Context) error { _, err := s.TryAcquire(c, "", "h"); return err }, lease.ErrInvalid, "key is empty"},
		{"absolute key", func(c context.Context) error { _, err := s.TryAcquire(c, "/etc/x", "h"); return err }, lease.ErrInvalid, "starts with /"},
		{"dot-dot key", func(c context.Context) error { _, err := s.TryAcquire(c, "..", "h"); return err }, lease.ErrInvalid, "escape the prefix"},
		{"dot-dot inside key", func(c context.Context) error { _, err := s.Acquire(c, "a/../../queue/x", "h"); return err }, lease.ErrInvalid, "escape the prefix"},
		{"dot key", func(c context.Context) error { _, err := s.TryAcquire(c, "a/./b", "h"); return err }, lease.ErrInvalid, "escape the prefix"},
		{"empty segment", func(c context.Context) error { _, err := s.TryAcquire(c, "a//b", "h"); return err }, lease.ErrInvalid, "empty path segment"},
		{"trailing slash", func(c context.Context) error { _, err := s.Acquire(c, "a/", "h"); return err }, lease.ErrInvalid, "empty path segment"},
		{"control character", func(c context.Context) error { _, err := s.TryAcquire(c, "a\x00b", "h"); return err }, lease.ErrInvalid, "control character"},
		{"not UTF-8", func(c context.Context) error { _, err := s.TryAcquire(c, "a\xffb", "h"); return err }, lease.ErrInvalid, "UTF-8"},
		{"empty holder", func(c context.Context) error { _, err := s.TryAcquire(c, "k", ""); return err }, lease.ErrInvalid, "holder is empty"},
		{"empty holder, blocking", func(c context.Context) error { _, err := s.Acquire(c, "k", ""); return err }, lease.ErrInvalid, "holder is empty"},
		{"record not JSON", func(c context.Context) error {
			_, err := s.TryAcquire(c, "k", "h", lease.WithRecord(json.RawMessage(`{phase:`)))
			return err
		}, lease.ErrInvalid, "not valid JSON"},
		{"update record not JSON", func(c context.Context) error { return held.Update(c, json.RawMessage(`nope`)) }, lease.ErrInvalid, "not valid JSON"},
		{"adopt token zero", func(c context.Context) error { _, err := s.Adopt(c, "k", 0); return err }, lease.ErrInvalid, "not positive"},
		{"force release token negative", func(c context.Context) error { return eng.ForceRelease(c, "k", -1) }, lease.ErrInvalid, "not positive"},
		{"force release bad key", func(c context.Context) error { return eng.ForceRelease(c, "../k", 5) }, lease.ErrInvalid, "escape the prefix"},
		{"inspect empty key", func(c context.Context) error { _, err := eng.Inspect(c, ""); return err }, lease.ErrInvalid, "key is empty"},
		{"acquire own key", func(c context.Context) error { _, err := s.Acquire(c, "held", "h"); return err }, lease.ErrLocked, "held by"},
		{"context cancelled before acquire", func(c context.Context) error {
			c, cancel := context.WithCancel(c)
			cancel()
			_, err := s.Acquire(c, "held-elsewhere", "h")
			return err
		}, context.Canceled, "acquire held-elsewhere"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call(ctx(t))
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v, want %v mentioning %q", err, tc.want, tc.msg)
			}
		})
	}

	t.Run("context cancelled mid-acquire", func(t *testing.T) {
		other := e.session(eng, 2*time.Second)
		c, cancel := context.WithCancel(ctx(t))
		res := make(chan error, 1)
		go func() {
			_, err := other.Acquire(c, "held", "waiter")
			res <- err
		}()
		waiters(t, eng, "held", 1)
		cancel()
		if err := <-res; !errors.Is(err, context.Canceled) {
			t.Fatalf("Acquire = %v, want context.Canceled", err)
		}
		// The waiter entry is deleted by the call itself, not left for the
		// lease: the session still lives.
		if got := holding(t, eng, "held").Waiters; got != 0 {
			t.Fatalf("waiters after cancel = %d, want 0", got)
		}
		if err := other.Close(ctx(t)); err != nil {
			t.Fatalf("Close = %v, want nil", err)
		}
	})

	// Nothing is left behind: the same keys and no new lease.
	if got := keys(t, e.cli); !slices.Equal(got, keysBefore) {
		t.Errorf("keys = %q, want %q", got, keysBefore)
	}
	for id := range leases(t, e.cli) {
		if !before[id] {
			t.Errorf("lease %x left behind", id)
		}
	}
}
