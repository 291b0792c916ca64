package leadership_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/lockwarden/lockwarden/internal/apiproxy"
	"github.com/lockwarden/lockwarden/pkg/leadership"
)

// Review 14 (adversarial review of d6663bf): schedules in which a manager electing through a
// leadership.ResourceLock runs its leader-election runnables after the validity its lock
// showed, or RunManager releases a term while they still run.

// recordedResourceLock is a ResourceLock whose consistent reads are recorded in h.reads.
func recordedResourceLock(t *testing.T, h *harness, name string, uid types.UID, cfg leadership.ResourceLockConfig) *leadership.ResourceLock {
	t.Helper()
	rc := h.proxy.Config()
	rc.Wrap(func(next http.RoundTripper) http.RoundTripper { return recordingTransport{next: next, r: h.reads} })
	cfg.Config, cfg.Namespace, cfg.Lock, cfg.Identity, cfg.Name = rc, h.key.Namespace, h.key.Name, uid, name
	l, err := leadership.NewResourceLock(cfg)
	if err != nil {
		t.Fatalf("NewResourceLock: %v", err)
	}
	return l
}

// started waits until r's runnable ran and returns when it first did.
func started(t *testing.T, r *leaderRun, who string) time.Time {
	t.Helper()
	eventually(t, 20*time.Second, func() bool { s, _, _ := r.get(); return !s.IsZero() }, func() string { return who + " never led" })
	s, _, _ := r.get()
	return s
}

const hms = "15:04:05.000"

// TestReview14RenewDeadlineLearntAfterAcquire (fixed): the manager's RenewDeadline (12 s) is
// longer than ResourceLockConfig's (3 s). Before, acquisition was judged with the configured
// 3 s + 1 s, so an 8 s lease (6 s of validity) was accepted and the longer RenewDeadline
// learnt only in the first renewal round, whose context let client-go lead for 12 s: pod-a ran
// 6 s past its validity and 2.2 s beside pod-b. Now a lock without ExactTimings judges by the
// most the manager's LeaseDuration (15 s) allows, and refuses the term: pod-a never leads.
func TestReview14RenewDeadlineLearntAfterAcquire(t *testing.T) {
	h := newHarness(t, 8)
	setStatus(t, h.key, held("pod-a", "uid-a", 5, 8))
	la := recordedResourceLock(t, h, "pod-a", "uid-a", leadership.ResourceLockConfig{RenewDeadline: 3 * time.Second, RetryPeriod: time.Second})
	ra := &leaderRun{}
	startManager(t, la, ra, 15*time.Second, 12*time.Second, 2*time.Second)
	never(t, 6*time.Second, func() bool { s, _, _ := ra.get(); return !s.IsZero() }, func() string {
		s, _, _ := ra.get()
		return fmt.Sprintf("pod-a led an 8 s lease from %s under undeclared timings of up to 12s + 2s", s.Format(hms))
	})
	if err := la.ReadyzCheck(nil); !errors.Is(err, leadership.ErrTimingsRefused) {
		t.Errorf("ReadyzCheck = %v, want ErrTimingsRefused", err)
	} else {
		t.Logf("ReadyzCheck: %v", err)
	}
}

// TestReview14RetryPeriodMismatch (fixed): the manager's RetryPeriod (5 s) is longer than
// ResourceLockConfig's default 2 s. Before, renewals were judged with 10 s + 2 s < 13 s of a
// 15 s lease and the runnable ran 2 s past its validity once the reads hung right after a
// renewal. Now a lock without ExactTimings refuses a 15 s lease under a 15 s LeaseDuration,
// and on a 32 s lease judges by the most that LeaseDuration allows (about 29.3 s), whatever
// RenewDeadline and RetryPeriod the manager has: the runnable stops within the validity.
func TestReview14RetryPeriodMismatch(t *testing.T) {
	h := newHarness(t, 32)
	setStatus(t, h.key, held("pod-a", "uid-a", 5, 32))
	l := recordedResourceLock(t, h, "pod-a", "uid-a", leadership.ResourceLockConfig{})
	r := &leaderRun{}
	m := startManager(t, l, r, 15*time.Second, 10*time.Second, 5*time.Second)
	started(t, r, "pod-a")
	n := h.reads.okCount()
	eventually(t, 10*time.Second, func() bool { return h.reads.okCount() > n }, func() string { return "no renewal" })
	h.proxy.SetMode(apiproxy.Hold)
	heldAt := time.Now()
	select {
	case <-m.done:
	case <-time.After(40 * time.Second):
		t.Fatalf("the manager still leads 40s after its reads began to hang")
	}
	h.proxy.SetMode(apiproxy.Pass)
	_, last, until := r.get()
	t.Logf("reads held at %s; validity %s; runnable ran until %s; ReadyzCheck: %v", heldAt.Format(hms), until.Format(hms), last.Format(hms), l.ReadyzCheck(nil))
	if last.After(until) {
		t.Errorf("the runnable ran %v past the newest validity its lock showed", last.Sub(until).Round(time.Millisecond))
	}
}

// TestReview14CallerDeadlineTakenForRenewDeadline: the ResourceLock is a client-go
// resourcelock.Interface, so a program may run client-go's LeaderElector with it directly.
// Acquisition runs under the caller's context; noteDeadline ignores it only while no term is
// confirmed, but the Get that client-go sends before its first Update has already confirmed
// one. A caller's context with a deadline an hour away (a job with a time limit) is then
// taken for a one-hour RenewDeadline: every renewal is refused and the pod never leads.
func TestReview14CallerDeadlineTakenForRenewDeadline(t *testing.T) {
	h := newHarness(t, 8)
	setStatus(t, h.key, held("pod-a", "uid-a", 5, 8))
	l := newResourceLock(t, h, "pod-a", "uid-a", 4*time.Second, 3*time.Second, time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	leading := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
			Lock: l, LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: time.Second,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(context.Context) { close(leading) },
				OnStoppedLeading: func() {},
			},
		})
	}()
	defer func() { cancel(); <-done }()
	select {
	case <-leading:
	case <-time.After(10 * time.Second):
		t.Errorf("client-go never led a granted 8 s lease with RenewDeadline 3s + RetryPeriod 1s under a caller's 1h deadline; ReadyzCheck: %v", l.ReadyzCheck(nil))
	}
}

// TestReview14RecampaignTakesDownProbes (fixed: RunManager now builds the next manager at once
// and the lock refuses it terms until the lost term's validity passed; the probe may miss
// for the moment between two managers' servers, under a second): RunManager's re-campaign "instead of exiting" (the
// migration guide: "the container is not restarted, so the pod stays Ready and a candidate")
// leaves no manager, hence no health probe server, while it waits out the lost term's
// validity: the kubelet's readiness and liveness probes get connection refused for up to
// termLeaseSeconds - margin, and a liveness probe with failureThreshold x periodSeconds below
// that restarts the container.
func TestReview14RecampaignTakesDownProbes(t *testing.T) {
	h := newHarness(t, 20) // 18 s of validity to wait out
	setStatus(t, h.key, held("pod-a", "uid-a", 5, 20))
	l := newResourceLock(t, h, "pod-a", "uid-a", 4*time.Second, 3*time.Second, time.Second)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	var mu sync.Mutex
	var builds []time.Time
	ran := make(chan struct{}, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- leadership.RunManager(ctx, l, func() (leadership.Manager, error) {
			mu.Lock()
			builds = append(builds, time.Now())
			mu.Unlock()
			mgr, err := manager.New(env.Config, manager.Options{
				Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: addr,
				LeaderElection: true, LeaderElectionResourceLockInterface: l, Logger: logr.Discard(),
				LeaseDuration: ptr.To(4 * time.Second), RenewDeadline: ptr.To(3 * time.Second), RetryPeriod: ptr.To(time.Second),
			})
			if err != nil {
				return nil, err
			}
			if err := mgr.AddReadyzCheck("lock", l.ReadyzCheck); err != nil {
				return nil, err
			}
			return mgr, mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
				ran <- struct{}{}
				<-ctx.Done()
				return nil
			}))
		})
	}()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("RunManager = %v, want nil", err)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("RunManager did not return")
		}
	}()
	probe := func() error {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	select {
	case <-ran:
	case <-time.After(20 * time.Second):
		t.Fatalf("never led")
	}
	if err := probe(); err != nil {
		t.Fatalf("readyz while leading: %v", err)
	}
	setStatus(t, h.key, held("pod-b", "uid-b", 6, 20)) // the controller moved the lock (Preferred, say)
	moved := time.Now()
	var firstFail, lastFail time.Time
	var failErr error
	for time.Since(moved) < 15*time.Second {
		mu.Lock()
		n := len(builds)
		mu.Unlock()
		if n >= 2 && probe() == nil {
			break
		}
		if err := probe(); err != nil {
			if firstFail.IsZero() {
				firstFail, failErr = time.Now(), err
			}
			lastFail = time.Now()
		}
		time.Sleep(50 * time.Millisecond)
	}
	mu.Lock()
	t.Logf("lock moved %s; builds %v", moved.Format(hms), builds)
	mu.Unlock()
	if !firstFail.IsZero() && lastFail.Sub(firstFail) > time.Second {
		t.Errorf("the pod's readiness probe failed for %v while RunManager re-campaigned (%s to %s): %v",
			lastFail.Sub(firstFail).Round(time.Millisecond), firstFail.Format(hms), lastFail.Format(hms), failErr)
	}
}
