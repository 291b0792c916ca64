package leadership_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/lockwarden/lockwarden/internal/apiproxy"
	"github.com/lockwarden/lockwarden/pkg/leadership"
)

// newResourceLock is a ResourceLock for (name, uid) on h's lock, through h's proxy, for a
// manager with the given timings.
func newResourceLock(t *testing.T, h *harness, name string, uid types.UID, lease, renew, retry time.Duration) *leadership.ResourceLock {
	t.Helper()
	l, err := leadership.NewResourceLock(leadership.ResourceLockConfig{Config: h.proxy.Config(), Namespace: h.key.Namespace, Lock: h.key.Name,
		Identity: uid, Name: name, LeaseDuration: lease, RenewDeadline: renew, RetryPeriod: retry, ExactTimings: true})
	if err != nil {
		t.Fatalf("NewResourceLock: %v", err)
	}
	return l
}

// never fails with msg() as soon as cond holds within window (polled every 50 ms): for "this
// does not happen", where one check after a sleep would miss a moment in between.
func never(t *testing.T, window time.Duration, cond func() bool, msg func() string) {
	t.Helper()
	for end := time.Now().Add(window); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if cond() {
			t.Fatal(msg())
		}
	}
}

// leaderRun is what a manager's runnable saw while it ran under leader election.
type leaderRun struct {
	mu                   sync.Mutex
	started, last, until time.Time
}

func (r *leaderRun) touch(l *leadership.ResourceLock) {
	until := l.ValidUntil()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started.IsZero() {
		r.started = time.Now()
	}
	r.last = time.Now()
	if until.After(r.until) {
		r.until = until
	}
}

func (r *leaderRun) get() (started, last, until time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.started, r.last, r.until
}

// managerRun is one started manager: done is closed when Start returned, with err set.
type managerRun struct {
	done chan struct{}
	err  error
}

// startManager starts a controller-runtime manager electing with l under the given timings,
// with one runnable that records into r. Cleanup stops it.
func startManager(t *testing.T, l *leadership.ResourceLock, r *leaderRun, lease, renew, retry time.Duration) *managerRun {
	t.Helper()
	mgr, err := manager.New(env.Config, manager.Options{
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		LeaderElection: true, LeaderElectionResourceLockInterface: l,
		LeaseDuration: ptr.To(lease), RenewDeadline: ptr.To(renew), RetryPeriod: ptr.To(retry),
	})
	if err != nil {
		t.Fatalf("manager: %v", err)
	}
	err = mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			r.touch(l)
			select {
			case <-ctx.Done():
				r.touch(l)
				return nil
			case <-tick.C:
			}
		}
	}))
	if err != nil {
		t.Fatalf("add runnable: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &managerRun{done: make(chan struct{})}
	go func() { defer close(m.done); m.err = mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-m.done:
		case <-time.After(10 * time.Second):
			t.Errorf("manager did not stop 10s after its context was cancelled")
		}
	})
	return m
}

// TestResourceLockPartitionedLeader: a manager leading through a ResourceLock whose reads
// hang (the API server proxy holds them) loses the lock, and everything it ran under leader
// election has stopped before the validity its lock last showed; Start then returns
// controller-runtime's "leader election lost".
func TestResourceLockPartitionedLeader(t *testing.T) {
	h := newHarness(t, 8)
	setStatus(t, h.key, held("pod-a", "uid-a", 5, 8))
	l := newResourceLock(t, h, "pod-a", "uid-a", 4*time.Second, 3*time.Second, time.Second)
	r := &leaderRun{}
	m := startManager(t, l, r, 4*time.Second, 3*time.Second, time.Second)
	eventually(t, 15*time.Second, func() bool { s, _, _ := r.get(); return !s.IsZero() }, func() string { return "the manager never led" })
	if tok := l.Token(); tok != 5 || !l.Valid() {
		t.Fatalf("leading: Token() = %d, Valid() = %v, want 5, true", tok, l.Valid())
	}
	first := l.ValidUntil()
	eventually(t, 10*time.Second, func() bool { return l.ValidUntil().After(first.Add(time.Second)) },
		func() string { return "no renewal moved the validity on" })
	h.proxy.SetMode(apiproxy.Hold)
	held := time.Now()
	select {
	case <-m.done:
	case <-time.After(15 * time.Second):
		t.Fatalf("the manager still leads 15s after its reads began to hang")
	}
	h.proxy.SetMode(apiproxy.Pass)
	_, last, until := r.get()
	if m.err == nil || m.err.Error() != "leader election lost" {
		t.Errorf("Start = %v, want leader election lost", m.err)
	}
	if !last.Before(until) {
		t.Errorf("the runnable ran until %s, %v after the lock's validity %s", last.Format("15:04:05.000"), last.Sub(until), until.Format("15:04:05.000"))
	}
	t.Logf("reads held at %s; runnable stopped %v later, %v before the validity ended", held.Format("15:04:05.000"),
		last.Sub(held).Round(time.Millisecond), until.Sub(last).Round(time.Millisecond))
	time.Sleep(time.Until(until))
	if l.Valid() || l.Token() != 0 {
		t.Errorf("after the validity: Valid() = %v, Token() = %d, want false, 0", l.Valid(), l.Token())
	}
}

// TestResourceLockRefusesShortLease: a term whose lease minus the margin does not exceed the
// manager's RenewDeadline + RetryPeriod is refused: Update fails with ErrTimingsRefused, Get
// does not name this pod (so client-go waits instead of updating), ReadyzCheck fails, and a
// manager with those timings never leads.
func TestResourceLockRefusesShortLease(t *testing.T) {
	const lease = 7
	h := newHarness(t, 8)
	setStatus(t, h.key, held("pod-a", "uid-a", 5, 8)) // 8 s - 2 s margin = 6 s: not more than 5 s + 1 s
	l := newResourceLock(t, h, "pod-a", "uid-a", 7*time.Second, 5*time.Second, time.Second)
	err := l.Update(t.Context(), resourcelock.LeaderElectionRecord{HolderIdentity: "uid-a", LeaseDurationSeconds: lease})
	if !errors.Is(err, leadership.ErrTimingsRefused) {
		t.Fatalf("Update = %v, want ErrTimingsRefused", err)
	}
	t.Logf("Update: %v", err)
	rec, _, err := l.Get(t.Context())
	if err != nil || rec.HolderIdentity == "uid-a" {
		t.Fatalf("Get = %+v, %v: want a record not naming uid-a", rec, err)
	}
	if err := l.ReadyzCheck(nil); !errors.Is(err, leadership.ErrTimingsRefused) {
		t.Errorf("ReadyzCheck = %v, want ErrTimingsRefused", err)
	}
	r := &leaderRun{}
	m := startManager(t, l, r, 7*time.Second, 5*time.Second, time.Second)
	never(t, 5*time.Second, func() bool { s, _, _ := r.get(); return !s.IsZero() }, func() string {
		s, _, _ := r.get()
		return fmt.Sprintf("a manager with RenewDeadline 5s + RetryPeriod 1s led an 8 s lease from %s", s.Format("15:04:05.000"))
	})
	select {
	case <-m.done:
		t.Errorf("Start returned %v while campaigning", m.err)
	default:
	}
}

// TestResourceLockNotGranted: a lock held by another pod makes Update fail with ErrNotGranted
// and Get name that pod; Create always fails; a record with another identity is refused.
func TestResourceLockNotGranted(t *testing.T) {
	const lease = 4
	h := newHarness(t, 8)
	setStatus(t, h.key, held("pod-b", "uid-b", 5, 8))
	l := newResourceLock(t, h, "pod-a", "uid-a", 4*time.Second, 3*time.Second, time.Second)
	if err := l.Update(t.Context(), resourcelock.LeaderElectionRecord{HolderIdentity: "uid-a", LeaseDurationSeconds: lease}); !errors.Is(err, leadership.ErrNotGranted) {
		t.Errorf("Update = %v, want ErrNotGranted", err)
	}
	if rec, _, err := l.Get(t.Context()); err != nil || rec.HolderIdentity != "uid-b" {
		t.Errorf("Get = %+v, %v: want holder uid-b", rec, err)
	}
	if err := l.Create(t.Context(), resourcelock.LeaderElectionRecord{HolderIdentity: "uid-a", LeaseDurationSeconds: lease}); err == nil {
		t.Errorf("Create = nil, want an error")
	}
	if err := l.Update(t.Context(), resourcelock.LeaderElectionRecord{HolderIdentity: "uid-b", LeaseDurationSeconds: 4}); err == nil {
		t.Errorf("Update naming another identity = nil, want an error")
	}
	if l.Valid() || l.Token() != 0 {
		t.Errorf("Valid() = %v, Token() = %d, want false, 0", l.Valid(), l.Token())
	}
}

// TestResourceLockConfig: bad timings are refused by NewResourceLock, naming the field.
func TestResourceLockConfig(t *testing.T) {
	base := leadership.ResourceLockConfig{Config: env.Config, Namespace: "ns", Lock: "op", Identity: "uid-a"}
	for _, c := range []struct {
		name  string
		edit  func(*leadership.ResourceLockConfig)
		field string
	}{
		{"negative RenewDeadline", func(c *leadership.ResourceLockConfig) { c.RenewDeadline = -time.Second }, "RenewDeadline"},
		{"negative RetryPeriod", func(c *leadership.ResourceLockConfig) { c.RetryPeriod = -time.Second }, "RetryPeriod"},
		{"RenewDeadline not above RetryPeriod", func(c *leadership.ResourceLockConfig) { c.RenewDeadline, c.RetryPeriod = time.Second, time.Second }, "RenewDeadline"},
		{"no identity", func(c *leadership.ResourceLockConfig) { c.Identity = "" }, "Identity"},
		{"no lock", func(c *leadership.ResourceLockConfig) { c.Lock = "" }, "Lock"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("POD_UID", "")
			cfg := base
			c.edit(&cfg)
			_, err := leadership.NewResourceLock(cfg)
			if !errors.Is(err, leadership.ErrInvalidConfig) || !containsField(err, c.field) {
				t.Errorf("NewResourceLock = %v, want ErrInvalidConfig naming %s", err, c.field)
			}
		})
	}
}

func containsField(err error, field string) bool {
	return err != nil && strings.Contains(err.Error(), field+":")
}
