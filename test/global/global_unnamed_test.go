package global_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/internal/testenv/controllertest"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// TestGlobalLocksUnnamedDeleted: a Global lock held under a manager with --cluster-name is
// deleted while a manager WITHOUT one runs (its cluster name removed by a rollout). That
// manager grants nothing, but the holder pod's last reads keep it valid by R5 up to
// S + D - m: the lock may go only after the published delay, counted from the unnamed
// manager's first read of it (before the fix it went at once).
func TestGlobalLocksUnnamedDeleted(t *testing.T) {
	ns := fixtureNamespace(t, "unnamed-").Name
	b := controllertest.NewBackend(t, etcd.Endpoint)
	g, err := lease.NewGlobal(b.Client, fmt.Sprintf("/lockwarden-test-global/%d", globalPrefixes.Add(1)))
	if err != nil {
		t.Fatal(err)
	}
	s := &clusterSide{t: t, name: "east", cfg: env, c: k8s, ns: ns, backend: b, global: g}
	p1 := s.pod("p1", "app")
	s.lock("x", "app", "unnamed.example.com")
	s.start()

	var (
		mu    sync.Mutex
		reads []podRead
		gone  time.Time
	)
	stopPoll, polled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(polled)
		for {
			select {
			case <-stopPoll:
				return
			case <-time.After(50 * time.Millisecond):
			}
			sent := time.Now()
			l, err := s.get("x")
			mu.Lock()
			switch {
			case apierrors.IsNotFound(err):
				if gone.IsZero() {
					gone = sent
				}
			case err == nil && gone.IsZero():
				reads = append(reads, podRead{sent: sent, uid: l.UID, st: *l.Status.DeepCopy()})
			}
			mu.Unlock()
		}
	}()
	defer func() { close(stopPoll); <-polled }()

	held := waitSide(t, s, "x", 15*time.Second, "held with round 4", func(st *lockv1.DistributedLockStatus) bool {
		return heldHereBy(p1)(st) && st.GlobalRound >= 4
	})
	s.stop()
	if err := k8s.Delete(bg(), held); err != nil {
		t.Fatalf("delete the lock: %v", err)
	}
	time.Sleep(200 * time.Millisecond) // a read of the deleted, still Held lock
	mu.Lock()
	bound, ok := r5Bound(reads)
	mu.Unlock()
	if !ok {
		t.Fatalf("the holder pod's reads give no R5 bound: %s", describeGlobal(&held.Status))
	}
	s.stop = controllertest.Start(t, s.cfg.Config, controllertest.Config{Namespace: ns, Engine: b.Engine, Identity: "east-unnamed"})
	t.Cleanup(s.stop)
	eventually(t, 25*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return !gone.IsZero()
	}, func() string { return "the deleted lock is never let go" })
	mu.Lock()
	goneAt := gone
	mu.Unlock()
	if goneAt.Before(bound) {
		t.Errorf("the deleted lock was gone at %s, %v before the end of pod p1's term by R5 (%s; D %d s): the unnamed manager dropped the finalizer while the term could be valid",
			goneAt.Format("15:04:05.000"), bound.Sub(goneAt).Round(time.Millisecond), bound.Format("15:04:05.000"), held.Status.GlobalLockDelaySeconds)
	}
}
