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

// releaseLog is a logger that notes when the lock logs "released", and a reader of that time.
func releaseLog() (logr.Logger, func() time.Time) {
	var mu sync.Mutex
	var released time.Time
	log := funcr.New(func(_, args string) {
		mu.Lock()
		defer mu.Unlock()
		if released.IsZero() && strings.Contains(args, `"msg"="released"`) {
			released = time.Now()
		}
	}, funcr.Options{})
	return log, func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return released
	}
}

// slowStopManager is a manager electing with l under the timings ld, rd, rp and the graceful
// shutdown timeout grace, with run as its one leader-election runnable.
func slowStopManager(l *leadership.ResourceLock, run *slowStop, ld, rd, rp, grace time.Duration) (manager.Manager, error) {
	mgr, err := manager.New(env.Config, manager.Options{
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		LeaderElection: true, LeaderElectionResourceLockInterface: l, Logger: logr.Discard(),
		LeaseDuration: ptr.To(ld), RenewDeadline: ptr.To(rd), RetryPeriod: ptr.To(rp),
		GracefulShutdownTimeout: ptr.To(grace),
	})
	if err != nil {
		return nil, err
	}
	return mgr, mgr.Add(run)
}

// releaseAnnotation reads the lock's holder-release annotation ("" when absent) and what run
// saw: when its context ended, and whether it still runs.
func releaseAnnotation(t *testing.T, h *harness, run *slowStop) (annotation string, ctxEnd time.Time, running bool) {
	t.Helper()
	var lock lockv1.DistributedLock
	if err := k8s.Get(context.Background(), h.key, &lock); err != nil {
		t.Fatalf("get lock: %v", err)
	}
	_, ctxEnd, ret := run.get()
	return lock.Annotations[lockv1.AnnotationHolderRelease], ctxEnd, ret.IsZero()
}

// awaitReturn waits until run has returned, so that no test leaves it running.
func awaitReturn(t *testing.T, run *slowStop) {
	t.Helper()
	eventually(t, 15*time.Second, func() bool { _, _, r := run.get(); return !r.IsZero() }, func() string { return "runnable never returned" })
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
	log, released := releaseLog()
	// ReleaseOnStop: the manager's GracefulShutdownTimeout is 3 s, so the opt-in is legitimate; the
	// test is about RunManager's clean-stop rule under it.
	l := recordedResourceLock(t, h, "pod-a", "uid-a", leadership.ResourceLockConfig{LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: time.Second, ExactTimings: true, ReleaseOnStop: true, Log: log})
	run := &slowStop{linger: 8 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- leadership.RunManager(ctx, l, func() (leadership.Manager, error) {
			return slowStopManager(l, run, 4*time.Second, 3*time.Second, time.Second, 3*time.Second)
		})
	}()
	eventually(t, 20*time.Second, func() bool { ran, _, _ := run.get(); return ran }, func() string { return "never led" })
	time.Sleep(1500 * time.Millisecond) // the schedule: a few renewals,
	setStatus(t, h.key, releasing)      // then the pod is terminating,
	time.Sleep(2500 * time.Millisecond) // and client-go's renewal round is failing
	cancel()                            // when SIGTERM comes
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("RunManager did not return 30s after its context ended")
	}
	returned := time.Now()
	v, ctxEnd, running := releaseAnnotation(t, h, run)
	t.Logf("RunManager = %v at %s; runnable's context ended %s; release logged %s; holder-release annotation %q; runnable still running: %v",
		err, returned.Format(hms), ctxEnd.Format(hms), released().Format(hms), v, running)
	if v != "" && running {
		t.Errorf("holder-release %q was sent while a runnable of the released term still ran (it returns %v after its context ended)", v, run.linger)
	}
	awaitReturn(t, run)
}
