package lease_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/lockwarden/lockwarden/internal/etcdtest"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// One session holding more keys than etcd takes operations in a
// transaction (compares count) keeps all of them: the ownership checks are
// batched. If they were not, etcd would refuse the check and every lock
// would expire.
func TestOwnershipCheckBatches(t *testing.T) {
	const ttl = 2 * time.Second
	cases := []struct {
		name  string
		ops   uint // the server's --max-txn-ops, and the engine's
		locks int
	}{
		{"etcd default 128", 128, 300},
		{"lowered to 16", 16, 40},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := etcdtest.Start(t, etcdtest.WithMaxTxnOps(tc.ops))
			cli := srv.Client(t)
			eng := lease.NewEngine(cli, lease.WithPrefix(prefix(t)), lease.WithMaxTxnOps(int(tc.ops)))
			s, err := eng.NewSession(ctx(t), ttl)
			if err != nil {
				t.Fatalf("NewSession = %v, want nil", err)
			}
			t.Cleanup(func() { _ = s.Close(ctx(t)) })
			locks := make([]*lease.Lock, tc.locks)
			for i := range locks {
				if locks[i], err = s.TryAcquire(ctx(t), fmt.Sprintf("grant/%03d", i), fmt.Sprintf("pod-%d", i)); err != nil {
					t.Fatalf("TryAcquire #%d = %v, want nil", i, err)
				}
			}
			// Every lock is confirmed by a check sent after the last acquire.
			acquired := time.Now()
			eventually(t, 2*ttl, func() error {
				for i, l := range locks {
					if reach := l.ValidUntil().Sub(acquired); reach <= ttl-s.Margin() {
						return fmt.Errorf("lock %d valid until %v after the acquires, want > TTL - margin (%v); Err() = %w",
							i, reach, ttl-s.Margin(), l.Err())
					}
				}
				return nil
			})
			// A key deleted in the last batch ends its lock only.
			victim := locks[len(locks)-1]
			if _, err := cli.Delete(ctx(t), victim.Path()); err != nil {
				t.Fatalf("Delete = %v, want nil", err)
			}
			waitClosed(t, victim.Done(), ttl, "deleted key's Done")
			for i, l := range locks[:len(locks)-1] {
				if !l.Valid() {
					t.Fatalf("lock %d Valid() = false (Err %v), want true", i, l.Err())
				}
			}
		})
	}
}
