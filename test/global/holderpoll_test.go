package global_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/internal/testenv/controllertest"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// oneCluster is cluster east alone, for the tests of a deleted lock: a fresh namespace
// (prefix nsPrefix), its own engine and global prefix, one candidate pod p1 with label app,
// the Global lock x of globalName, and its manager started.
func oneCluster(t *testing.T, nsPrefix, app, globalName string) (*clusterSide, *controllertest.Backend, *lease.Global, *corev1.Pod) {
	t.Helper()
	ns := fixtureNamespace(t, nsPrefix).Name
	b := controllertest.NewBackend(t, etcd.Endpoint)
	g, err := lease.NewGlobal(b.Client, fmt.Sprintf("/lockwarden-test-global/%d", globalPrefixes.Add(1)))
	if err != nil {
		t.Fatal(err)
	}
	s := &clusterSide{t: t, name: "east", cfg: env, c: k8s, ns: ns, backend: b, global: g}
	p1 := s.pod("p1", app)
	s.lock("x", app, globalName)
	s.start()
	return s, b, g, p1
}

// holderPoll reads a lock as its holder pod would (an uncached GET every 50 ms) until the
// test ends, and notes when a read first found it gone.
type holderPoll struct {
	mu    sync.Mutex
	reads []podRead
	gone  time.Time
}

func pollHolder(t *testing.T, s *clusterSide, name string) *holderPoll {
	h := &holderPoll{}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			sent := time.Now()
			l, err := s.get(name)
			h.mu.Lock()
			switch {
			case apierrors.IsNotFound(err):
				if h.gone.IsZero() {
					h.gone = sent
				}
			case err == nil && h.gone.IsZero():
				h.reads = append(h.reads, podRead{sent: sent, uid: l.UID, st: *l.Status.DeepCopy()})
			}
			h.mu.Unlock()
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return h
}

// bound is the end, by R5, of the term the reads so far show (after one more read of the
// deleted, still Held lock).
func (h *holderPoll) bound(t *testing.T, held *lockv1.DistributedLock) time.Time {
	t.Helper()
	time.Sleep(200 * time.Millisecond)
	h.mu.Lock()
	bound, ok := r5Bound(h.reads)
	h.mu.Unlock()
	if !ok {
		t.Fatalf("the holder pod's reads give no R5 bound: %s", describeGlobal(&held.Status))
	}
	return bound
}

// waitGone waits until a read found the lock gone, and returns when.
func (h *holderPoll) waitGone(t *testing.T, timeout time.Duration) time.Time {
	t.Helper()
	eventually(t, timeout, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return !h.gone.IsZero()
	}, func() string { return "the deleted lock is never let go" })
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.gone
}
