package lease_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockwarden/lockwarden/internal/etcdtest"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// Issue 10, item 12: etcd's definite refusals are returned at once, as
// themselves, not retried as "outcome unknown" until the context ends; and
// guards that cannot fit in a transaction are refused before anything is
// sent.
func TestRefusalsAreReturned(t *testing.T) {
	const ttl = 2 * time.Second
	// The server takes at most 8 operations per transaction; the engine is
	// not told (its default is 128), so etcd itself refuses.
	srv := etcdtest.Start(t, etcdtest.WithMaxTxnOps(8))
	gate := etcdtest.NewGate()
	eng := lease.NewEngine(srv.Client(t, gate.DialOptions()...), lease.WithPrefix(prefix(t)))
	s, err := eng.NewSession(ctx(t), ttl)
	if err != nil {
		t.Fatalf("NewSession = %v, want nil", err)
	}
	t.Cleanup(func() { _ = s.Close(ctx(t)) })
	guards := func(n int) lease.LockOption {
		cmps := make([]clientv3.Cmp, n)
		for i := range cmps {
			cmps[i] = clientv3.Compare(clientv3.CreateRevision(prefix(t)+"/none"), "=", 0)
		}
		return lease.WithGuard(cmps...)
	}
	big := lease.WithRecord(json.RawMessage(`"` + strings.Repeat("x", 1600<<10) + `"`))
	for _, tc := range []struct {
		name string
		call func(context.Context) error
		want error
	}{
		{"acquire, too many ops", func(c context.Context) error { _, err := s.Acquire(c, "a", "h", guards(6)); return err }, rpctypes.ErrTooManyOps},
		{"try acquire, too many ops", func(c context.Context) error { _, err := s.TryAcquire(c, "b", "h", guards(6)); return err }, rpctypes.ErrTooManyOps},
		{"acquire, request too large", func(c context.Context) error { _, err := s.Acquire(c, "c", "h", big); return err }, rpctypes.ErrRequestTooLarge},
		{"try acquire, request too large", func(c context.Context) error { _, err := s.TryAcquire(c, "d", "h", big); return err }, rpctypes.ErrRequestTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, cancel := context.WithTimeout(ctx(t), 5*time.Second)
			defer cancel()
			start := time.Now()
			err := tc.call(c)
			if !errors.Is(err, tc.want) || errors.Is(err, lease.ErrUnknownOutcome) {
				t.Fatalf("err = %v (after %v), want %v and not ErrUnknownOutcome", err, time.Since(start), tc.want)
			}
		})
	}

	// More guards than any transaction of the engine can carry: refused as
	// invalid input, nothing sent.
	def := lease.NewEngine(srv.Client(t, gate.DialOptions()...), lease.WithPrefix(prefix(t)))
	ds, err := def.NewSession(ctx(t), ttl)
	if err != nil {
		t.Fatalf("NewSession = %v, want nil", err)
	}
	t.Cleanup(func() { _ = ds.Close(ctx(t)) })
	sent := gate.Count("Txn")
	if _, err := ds.TryAcquire(ctx(t), "e", "h", guards(125)); !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("TryAcquire with 125 guards = %v, want ErrInvalid", err)
	}
	if got := gate.Count("Txn") - sent; got != 0 {
		t.Fatalf("transactions sent for a refused guard count = %d, want 0", got)
	}
}
