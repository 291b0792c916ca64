//go:build !race

package leadership_test

// This test's schedule makes controller-runtime v0.25.2 write gracefulShutdownTimeout from its
// OnStoppedLeading (internal.go:637) while engageStopProcedure reads it (internal.go:513, 605):
// an upstream data race that -race reports whatever the code under test does. So it is built
// without -race only; make test runs it in a separate `go test -run NoRace` step.

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/pkg/leadership"
)

// slowStop is a runnable that goes on working for linger after its context is cancelled (a
// reconcile finishing), recording when it really returned.
type slowStop struct {
	linger time.Duration
	mu     sync.Mutex
	ran    bool
	ctxEnd time.Time
	ret    time.Time
}

func (s *slowStop) Start(ctx context.Context) error {
	s.mu.Lock()
	s.ran = true
	s.mu.Unlock()
	<-ctx.Done()
	s.mu.Lock()
	s.ctxEnd = time.Now()
	s.mu.Unlock()
	time.Sleep(s.linger)
	s.mu.Lock()
	s.ret = time.Now()
	s.mu.Unlock()
	return nil
}

func (s *slowStop) get() (ran bool, ctxEnd, ret time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ran, s.ctxEnd, s.ret
}

// TestReview14ReleaseWhileRunnableRunsNoRace (fixed: RunManager releases only when client-go
// stopped leading with its newest renewal successful): RunManager with ReleaseOnStop releases after the
// manager's Start returned nil, taken as "every runnable returned". The pod is being deleted:
// the controller records Releasing and the process's context ends while client-go's failing
// renewal round still runs. The manager waits GracefulShutdownTimeout (3 s) for a runnable
// that needs 8 s; meanwhile client-go gives up the lease and controller-runtime's
// OnStoppedLeading sets gracefulShutdownTimeout to 0, so the expired grace period is not an
// error and Start returns nil. RunManager then sends the holder-release while the runnable
// still runs, and the controller would grant the next candidate without the lock delay.
// Under -race this schedule also reports controller-runtime's own unsynchronized write of
// gracefulShutdownTimeout (internal.go:637 against the reads at 513 and 605), whatever
// RunManager does: run it without -race to see RunManager's defect alone.
func TestReview14ReleaseWhileRunnableRunsNoRace(t *testing.T) {
	h := newHarness(t, 8)
	setStatus(t, h.key, held("pod-a", "uid-a", 5, 8))
	var logMu sync.Mutex
	var released time.Time
	log := funcr.New(func(prefix, args string) {
		logMu.Lock()
		defer logMu.Unlock()
		if released.IsZero() && strings.Contains(args, `"msg"="released"`) {
			released = time.Now()
		}
	}, funcr.Options{})
	l := recordedResourceLock(t, h, "pod-a", "uid-a", leadership.ResourceLockConfig{LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: time.Second, ExactTimings: true, ReleaseOnStop: true, Log: log})
	run := &slowStop{linger: 8 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- leadership.RunManager(ctx, l, func() (leadership.Manager, error) {
			mgr, err := manager.New(env.Config, manager.Options{
				Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
				LeaderElection: true, LeaderElectionResourceLockInterface: l, Logger: logr.Discard(),
				LeaseDuration: ptr.To(4 * time.Second), RenewDeadline: ptr.To(3 * time.Second), RetryPeriod: ptr.To(time.Second),
				GracefulShutdownTimeout: ptr.To(3 * time.Second),
			})
			if err != nil {
				return nil, err
			}
			return mgr, mgr.Add(run)
		})
	}()
	eventually(t, 20*time.Second, func() bool { ran, _, _ := run.get(); return ran }, func() string { return "never led" })
	time.Sleep(1500 * time.Millisecond)
	setStatus(t, h.key, releasing) // the pod is terminating
	time.Sleep(2500 * time.Millisecond)
	cancel() // SIGTERM
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("RunManager did not return 30s after its context ended")
	}
	returned := time.Now()
	var lock lockv1.DistributedLock
	if gerr := k8s.Get(context.Background(), h.key, &lock); gerr != nil {
		t.Fatalf("get lock: %v", gerr)
	}
	_, ctxEnd, ret := run.get()
	logMu.Lock()
	rel := released
	logMu.Unlock()
	t.Logf("RunManager = %v at %s; runnable's context ended %s; release logged %s; holder-release annotation %q; runnable still running: %v",
		err, returned.Format(hms), ctxEnd.Format(hms), rel.Format(hms), lock.Annotations[lockv1.AnnotationHolderRelease], ret.IsZero())
	if v, ok := lock.Annotations[lockv1.AnnotationHolderRelease]; ok && ret.IsZero() {
		t.Errorf("holder-release %q was sent while a runnable of the released term still ran (it returns %v after its context ended)", v, run.linger)
	}
	eventually(t, 15*time.Second, func() bool { _, _, r := run.get(); return !r.IsZero() }, func() string { return "runnable never returned" })
}
