package lease_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockwarden/lockwarden/internal/etcdtest"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// endpoints is an etcd shared by the Example functions, which cannot start
// one themselves.
var endpoints []string

func TestMain(m *testing.M) { os.Exit(etcdtest.RunTests(m, &endpoints)) }

// env is one test's etcd and a direct client of it.
type env struct {
	t   *testing.T
	srv *etcdtest.Server
	cli *clientv3.Client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	srv := etcdtest.Start(t)
	return &env{t: t, srv: srv, cli: srv.Client(t)}
}

// prefix is the test's own key prefix.
func prefix(t *testing.T) string {
	return "/t/" + strings.ReplaceAll(t.Name(), "/", "_")
}

// engine returns an engine on cli under the test's prefix.
func (e *env) engine(cli *clientv3.Client) *lease.Engine {
	return lease.NewEngine(cli, lease.WithPrefix(prefix(e.t)))
}

// session opens a session of ttl on eng, closed at cleanup.
func (e *env) session(eng *lease.Engine, ttl time.Duration, opts ...lease.SessionOption) *lease.Session {
	e.t.Helper()
	s, err := eng.NewSession(ctx(e.t), ttl, opts...)
	if err != nil {
		e.t.Fatalf("NewSession(%v) = %v, want nil", ttl, err)
	}
	e.t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = s.Close(cctx) // may fail on purpose-broken networks; the lease expires
	})
	return s
}

// ctx returns a context bounded by the test's deadline budget.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// eventually polls cond every 10 ms until it returns nil, and fails the test
// with cond's last error if timeout passes first.
func eventually(t *testing.T, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", timeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waiters polls until key has want queued waiters.
func waiters(t *testing.T, eng *lease.Engine, key string, want int64) {
	t.Helper()
	eventually(t, 5*time.Second, func() error {
		if got := holding(t, eng, key).Waiters; got != want {
			return fmt.Errorf("waiters of %q = %d, want %d", key, got, want)
		}
		return nil
	})
}

// waitClosed waits for c to close and returns when it did.
func waitClosed(t *testing.T, c <-chan struct{}, timeout time.Duration, what string) time.Time {
	t.Helper()
	select {
	case <-c:
		return time.Now()
	case <-time.After(timeout):
		t.Fatalf("%s not closed after %v", what, timeout)
		return time.Time{}
	}
}

// holding reads key with Inspect.
func holding(t *testing.T, eng *lease.Engine, key string) lease.Holding {
	t.Helper()
	h, err := eng.Inspect(ctx(t), key)
	if err != nil {
		t.Fatalf("Inspect(%q) = %v, want nil", key, err)
	}
	return h
}

// asHeld returns err as a *lease.HeldError, failing the test if it is not one.
func asHeld(t *testing.T, err error) *lease.HeldError {
	t.Helper()
	var he *lease.HeldError
	if !errors.As(err, &he) || !errors.Is(err, lease.ErrLocked) {
		t.Fatalf("err = %v, want a *HeldError wrapping ErrLocked", err)
	}
	return he
}

// leases returns the IDs of the leases etcd knows.
func leases(t *testing.T, cli *clientv3.Client) map[clientv3.LeaseID]bool {
	t.Helper()
	resp, err := cli.Leases(ctx(t))
	if err != nil {
		t.Fatalf("Leases = %v, want nil", err)
	}
	ids := make(map[clientv3.LeaseID]bool)
	for _, l := range resp.Leases {
		ids[l.ID] = true
	}
	return ids
}

// keys returns every key in etcd.
func keys(t *testing.T, cli *clientv3.Client) []string {
	t.Helper()
	resp, err := cli.Get(ctx(t), "\x00", clientv3.WithFromKey(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatalf("Get all = %v, want nil", err)
	}
	var ks []string
	for _, kv := range resp.Kvs {
		ks = append(ks, string(kv.Key))
	}
	return ks
}
