package leadership_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/pkg/leadership"
)

// lingering is a leader-election runnable that goes on for linger after its context ended (a
// reconcile finishing its write), recording when it returned.
type lingering struct {
	linger time.Duration
	mu     sync.Mutex
	ran    bool
	ret    time.Time
}

func (r *lingering) Start(ctx context.Context) error {
	r.mu.Lock()
	r.ran = true
	r.mu.Unlock()
	<-ctx.Done()
	time.Sleep(r.linger)
	r.mu.Lock()
	r.ret = time.Now()
	r.mu.Unlock()
	return nil
}

// state says whether it ran, and whether it still runs.
func (r *lingering) state() (ran, running bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ran, r.ran && r.ret.IsZero()
}

// TestReview20ZeroGraceManagerReleasedWhileRunnableRuns: RunManager releases on a clean stop
// by default now. A manager built by hand (manager.Options with the ResourceLock as
// LeaderElectionResourceLockInterface, as the ResourceLock's documentation shows, not through
// crmanager.Options) with GracefulShutdownTimeout 0 returns nil from Start at once, without
// waiting for its runnables. RunManager cannot see the option, takes the nil as "every runnable
// returned", and sends the holder-release while a reconcile of the term still runs: the
// controller grants the next candidate without the lock delay. The documentation asks the user
// to set DisableReleaseOnStop for such a manager; the default does the unsafe thing.
func TestReview20ZeroGraceManagerReleasedWhileRunnableRuns(t *testing.T) {
	h := newHarness(t, 8)
	setStatus(t, h.key, held("pod-a", "uid-a", 5, 8))
	l := recordedResourceLock(t, h, "pod-a", "uid-a", leadership.ResourceLockConfig{LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: time.Second, ExactTimings: true})
	run := &lingering{linger: 5 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- leadership.RunManager(ctx, l, func() (leadership.Manager, error) {
			mgr, err := manager.New(env.Config, manager.Options{
				Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
				LeaderElection: true, LeaderElectionResourceLockInterface: l, Logger: logr.Discard(),
				LeaseDuration: ptr.To(4 * time.Second), RenewDeadline: ptr.To(3 * time.Second), RetryPeriod: ptr.To(time.Second),
				GracefulShutdownTimeout: ptr.To(time.Duration(0)),
			})
			if err != nil {
				return nil, err
			}
			return mgr, mgr.Add(run)
		})
	}()
	eventually(t, 20*time.Second, func() bool { ran, _ := run.state(); return ran }, func() string { return "never led" })
	time.Sleep(1500 * time.Millisecond) // a few renewals
	cancel()                            // SIGTERM
	select {
	case err := <-done:
		t.Logf("RunManager = %v", err)
	case <-time.After(30 * time.Second):
		t.Fatalf("RunManager did not return 30s after its context ended")
	}
	var lock lockv1.DistributedLock
	if err := k8s.Get(context.Background(), h.key, &lock); err != nil {
		t.Fatalf("get lock: %v", err)
	}
	v := lock.Annotations[lockv1.AnnotationHolderRelease]
	_, running := run.state()
	if v != "" && running {
		t.Errorf("holder-release %q sent while the term's runnable still runs (it returns %v after its context ended): the controller grants the next pod while this one works under token 5", v, run.linger)
	}
	eventually(t, 15*time.Second, func() bool { _, r := run.state(); return !r }, func() string { return "runnable never returned" })
}
