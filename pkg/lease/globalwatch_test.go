package lease_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/lockwarden/lockwarden/pkg/lease"
)

func TestGlobalWatch(t *testing.T) {
	e := newGlobalEnv(t)
	// The etcd client's own goroutines run already; the watch must leave none of its own.
	leakBase := goleak.IgnoreCurrent()
	var mu sync.Mutex
	var changed []string
	resyncs := 0
	c, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		errc <- e.g.Watch(c,
			func(name string) { mu.Lock(); changed = append(changed, name); mu.Unlock() },
			func() { mu.Lock(); resyncs++; mu.Unlock() })
	}()
	// expect waits until the names reported since the last expect are want, in order.
	seen := 0
	expect := func(t *testing.T, step string, want ...string) {
		t.Helper()
		eventually(t, 5*time.Second, func() error {
			mu.Lock()
			defer mu.Unlock()
			if got := changed[seen:]; !slices.Equal(got, want) {
				return fmt.Errorf("%s: changed %q, want %q", step, got, want)
			}
			return nil
		})
		mu.Lock()
		seen = len(changed)
		mu.Unlock()
	}
	eventually(t, 5*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if resyncs == 0 {
			return errors.New("no resync after the watch was created")
		}
		return nil
	})

	token, id := e.first(t, "a", record("east", "p", 30), 5*time.Second)
	expect(t, "grant (K and T put)", "a", "a")
	if ok, err := e.g.Delete(ctx(t), "a", token, id, e.guard); !ok || err != nil {
		t.Fatalf("Delete = %v, %v", ok, err)
	}
	expect(t, "delete of K", "a")
	e.waitNow(t, "b", waiting("west", 30))
	expect(t, "waiting record (T put)", "b")
	// Neither a registration nor a key outside the global prefix is a change of a global lock;
	// the marker grant after them shows that they were delivered and skipped.
	if err := e.g.Register(ctx(t), lease.ClusterID{Name: "east", UID: "u"}, "/lw"); err != nil {
		t.Fatalf("Register = %v", err)
	}
	if _, err := e.cli.Put(ctx(t), e.g.Prefix()+"x/grants/c", "v"); err != nil {
		t.Fatalf("Put = %v", err)
	}
	_, lid := e.first(t, "marker", record("east", "p", 30), 5*time.Second)
	expect(t, "registration, other prefix, marker grant", "marker", "marker")
	// The grant lease's expiry deletes K, as any delete does.
	if _, err := e.cli.Revoke(ctx(t), lid); err != nil {
		t.Fatalf("Revoke = %v", err)
	}
	expect(t, "lease revoke", "marker")

	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Watch = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Watch did not return after its context ended")
	}
	eventually(t, 5*time.Second, func() error { return goleak.Find(leakBase) })
}
