//go:build !race

package leadership_test

// Built without -race for the reason review14_norace_test.go gives: the schedule makes
// controller-runtime v0.25.2 write gracefulShutdownTimeout from OnStoppedLeading while
// engageStopProcedure reads it, an upstream data race that -race reports whatever RunManager
// does.

import (
	"context"
	"testing"
	"time"

	"github.com/lockwarden/lockwarden/internal/apiproxy"
	"github.com/lockwarden/lockwarden/pkg/leadership"
)

// TestReview14bCleanStopAfterGetOnlyRoundNoRace: RunManager's cleanStop is "client-go
// stopped leading with its newest Update successful", taken as "the manager stopped it". But a
// failed renewal round need not call Update at all: tryAcquireOrRenew takes the fast path
// (Update first) only while isLeaseValid, i.e. within LeaseDurationSeconds (whole seconds,
// truncated) of the last renewal; after that it calls Get first and returns false when Get
// fails. With LeaseDuration 1.9 s (records carry 1 s), RenewDeadline 1.8 s and RetryPeriod
// 1.2 s (client-go and the lock accept them), every round starts 1.2 s after the last
// renewal, past the observed 1 s: Get first. The pod gets SIGTERM right after a renewal and
// the API server stops answering: the round's only call is a Get that hangs; client-go gives
// up, updateOK is still true from the renewal, so cleanStop is set. controller-runtime's
// OnStoppedLeading zeroes gracefulShutdownTimeout, so the runnable that needs 8 s is
// abandoned at the 5 s grace period and Start returns nil. The API answers again and
// RunManager sends the holder-release while the runnable still runs.
func TestReview14bCleanStopAfterGetOnlyRoundNoRace(t *testing.T) {
	h := newHarness(t, 8)
	setStatus(t, h.key, held("pod-a", "uid-a", 5, 8))
	log, released := releaseLog()
	const ld, rd, rp = 1900 * time.Millisecond, 1800 * time.Millisecond, 1200 * time.Millisecond
	// ReleaseOnStop: the manager's GracefulShutdownTimeout is 5 s (see above).
	l := recordedResourceLock(t, h, "pod-a", "uid-a", leadership.ResourceLockConfig{LeaseDuration: ld, RenewDeadline: rd, RetryPeriod: rp, ExactTimings: true, ReleaseOnStop: true, Log: log})
	run := &slowStop{linger: 8 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- leadership.RunManager(ctx, l, func() (leadership.Manager, error) {
			return slowStopManager(l, run, ld, rd, rp, 5*time.Second)
		})
	}()
	eventually(t, 20*time.Second, func() bool { ran, _, _ := run.get(); return ran }, func() string { return "never led" })
	time.Sleep(3 * time.Second) // a few renewal rounds (Get, then Update)
	// Right after a renewal round: a read completed and none followed for 300 ms.
	eventually(t, 10*time.Second, func() bool {
		all := h.reads.snapshot()
		return len(all) > 0 && all[len(all)-1].ok && time.Since(all[len(all)-1].done) > 300*time.Millisecond && time.Since(all[len(all)-1].done) < 700*time.Millisecond
	}, func() string { return "no quiet moment after a renewal" })
	h.proxy.SetMode(apiproxy.Hold) // the API server stops answering...
	cancel()                       // ...and the pod gets SIGTERM
	heldAt := time.Now()
	time.Sleep(4 * time.Second) // client-go's round (1.2 s + 1.8 s) has failed by now
	h.proxy.SetMode(apiproxy.Pass)
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("RunManager did not return 30s after its context ended")
	}
	returned := time.Now()
	v, ctxEnd, running := releaseAnnotation(t, h, run)
	t.Logf("held+SIGTERM %s; RunManager = %v at %s; runnable's context ended %s; release logged %s; holder-release annotation %q; runnable still running: %v",
		heldAt.Format(hms), err, returned.Format(hms), ctxEnd.Format(hms), released().Format(hms), v, running)
	if v != "" && running {
		t.Errorf("holder-release %q was sent while a runnable of the released term still ran (it returns %v after its context ended)", v, run.linger)
	}
	awaitReturn(t, run)
}

// TestReview14bReleaseAfterStartNilNoRace: ResourceLock.Release's doc says "Call it only once
// nothing acts under the token any more: after the manager's Start returned nil". That is the
// rule review 14 found false inside RunManager (fixed there with cleanStop), but Release itself
// does not check cleanStop, so a program without RunManager that follows the doc
// (`if mgr.Start(ctx) == nil { lock.Release(ctx) }`) sends the holder-release while a runnable
// still runs: the pod is being deleted (Releasing), SIGTERM arrives while client-go's failing
// round runs, OnStoppedLeading zeroes gracefulShutdownTimeout, Start returns nil at the 3 s
// grace period although the runnable needs 8 s.
func TestReview14bReleaseAfterStartNilNoRace(t *testing.T) {
	h := newHarness(t, 8)
	setStatus(t, h.key, held("pod-a", "uid-a", 5, 8))
	l := recordedResourceLock(t, h, "pod-a", "uid-a", leadership.ResourceLockConfig{LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: time.Second, ExactTimings: true})
	run := &slowStop{linger: 8 * time.Second}
	mgr, err := slowStopManager(l, run, 4*time.Second, 3*time.Second, time.Second, 3*time.Second)
	if err != nil {
		t.Fatalf("manager: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	eventually(t, 20*time.Second, func() bool { ran, _, _ := run.get(); return ran }, func() string { return "never led" })
	time.Sleep(1500 * time.Millisecond)
	setStatus(t, h.key, releasing) // the pod is terminating
	time.Sleep(2500 * time.Millisecond)
	cancel() // SIGTERM
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("Start did not return 30s after its context ended")
	}
	if err != nil {
		t.Fatalf("Start = %v: the schedule did not happen (want nil)", err)
	}
	rerr := l.Release(context.Background()) // as Release's doc says: Start returned nil
	v, ctxEnd, running := releaseAnnotation(t, h, run)
	t.Logf("Start = nil; Release = %v; runnable's context ended %s; holder-release annotation %q; runnable still running: %v",
		rerr, ctxEnd.Format(hms), v, running)
	if v != "" && running {
		t.Errorf("Release after Start returned nil sent holder-release %q while a runnable of the term still ran", v)
	}
	awaitReturn(t, run)
}
