package leadership_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/pkg/leadership"
	"github.com/lockwarden/lockwarden/pkg/leadership/crmanager"
)

// Review 14b (second adversarial review, after 8163655 and 9300ebd): schedules that break
// ResourceLock's claims with client-go v0.37.2 and controller-runtime v0.25.2 as they really
// run.

// TestReview14bRetryPeriodNeverLearnt (fixed: the longest recent gap is kept): with
// ExactTimings the lock promises that "a renewal
// round whose ... start shows a longer ... RetryPeriod makes later renewals assume the
// longer, and ReadyzCheck fails from then on". noteRound keeps the SHORTEST gap from a
// successful Update to the next round's start. But client-go's renew loop
// (wait.UntilWithContext, sliding) runs its first round at once after acquire, whose Update
// is the newest success: that gap is a few milliseconds, retrySeen keeps it for good, and
// every later gap (the real RetryPeriod) is longer, so none is ever stored. The unit test TestResourceLockLearnsTimings calls Update by hand without that
// immediate first round. Here the manager runs RetryPeriod 2.4 s against a declared 1 s:
// ReadyzCheck never reports it, renewals are judged with 3 s + 1 s, and once the reads hang
// right after a renewal the runnable runs on past the validity the lock showed.
func TestReview14bRetryPeriodNeverLearnt(t *testing.T) {
	h := newHarness(t, 6) // 6 s - margin 1.5 s = 4.5 s of validity: more than the declared 4 s
	setStatus(t, h.key, held("pod-a", "uid-a", 5, 6))
	l := recordedResourceLock(t, h, "pod-a", "uid-a", leadership.ResourceLockConfig{
		LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: time.Second, ExactTimings: true})
	r := &leaderRun{}
	m := startManager(t, l, r, 4*time.Second, 3*time.Second, 2400*time.Millisecond)
	started(t, r, "pod-a")
	// Let client-go run three renewal rounds 2.4 s apart: each shows the longer RetryPeriod.
	n := h.reads.okCount()
	eventually(t, 15*time.Second, func() bool { return h.reads.okCount() >= n+3 }, func() string { return "fewer than 3 renewals" })
	if err := l.ReadyzCheck(nil); !errors.Is(err, leadership.ErrTimingsMismatch) {
		t.Errorf("after 3 renewal rounds 2.4 s apart under a declared RetryPeriod of 1 s: ReadyzCheck = %v, want ErrTimingsMismatch", err)
	}
	// Since the fix the lock judges by the RetryPeriod it saw (2.4 s + 3 s > 4.5 s of validity)
	// and refuses the renewals, so the manager loses the lock with the API server answering.
	// The term confirmed before the longer RetryPeriod showed is not protected: the runnable
	// may run on until client-go gives up (documented on ExactTimings).
	select {
	case <-m.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("the manager still leads 20s after the lock saw a RetryPeriod of 2.4 s where 1 s was declared")
	}
	_, last, until := r.get()
	t.Logf("validity %s; runnable ran until %s; Start = %v; ReadyzCheck: %v", until.Format(hms), last.Format(hms), m.err, l.ReadyzCheck(nil))
	if m.err == nil || m.err.Error() != "leader election lost" {
		t.Errorf("Start = %v, want leader election lost", m.err)
	}
}

// TestReview14bBareLockGuessBlocksShortLeaseDuration: without ExactTimings the lock judges by
// "the LeaseDuration client-go's records carry", but before any record it judges by
// ResourceLockConfig.LeaseDuration, whose doc says it counts only with ExactTimings (default
// 15 s: a bound of 29.3 s). client-go's acquire starts with Get (IsLeader is false, so no fast
// path), and Get refuses the term under that guess: the record names "lockwarden:Held", not
// this pod, so client-go waits and never calls Update, whose record would have shown
// LeaseDuration 5 s (bound 11 s, well inside the 18 s of validity a 20 s lock gives). A
// correctly configured manager with a short LeaseDuration never leads, and ReadyzCheck tells
// it to shorten the LeaseDuration it already has short.
func TestReview14bBareLockGuessBlocksShortLeaseDuration(t *testing.T) {
	h := newHarness(t, 20)
	setStatus(t, h.key, held("pod-a", "uid-a", 5, 20))
	l := recordedResourceLock(t, h, "pod-a", "uid-a", leadership.ResourceLockConfig{}) // the bare option: timings unknown
	r := &leaderRun{}
	startManager(t, l, r, 5*time.Second, 4*time.Second, time.Second)
	eventually(t, 10*time.Second, func() bool { s, _, _ := r.get(); return !s.IsZero() }, func() string {
		return fmt.Sprintf("a manager with LeaseDuration 5 s (at most 11 s of belief) never led a 20 s lease (18 s of validity) in 10 s; ReadyzCheck: %v", l.ReadyzCheck(nil))
	})
}

// TestReview14bOptionsBadTimingsAccepted: crmanager.Options promises one set of timings for
// manager and lock and a clear error for conflicts, but a manager timing given as a pointer to
// 0 is taken as set (the manager gets 0) while NewResourceLock turns the lock's 0 into the
// default; and RetryPeriod is checked only against RenewDeadline, not client-go's
// RenewDeadline > 1.2 x RetryPeriod. Both return no error, and the manager fails only at Start
// (client-go's NewLeaderElector).
func TestReview14bOptionsBadTimingsAccepted(t *testing.T) {
	cfg := leadership.ResourceLockConfig{Config: &rest.Config{Host: "https://127.0.0.1:1"}, Namespace: "ns", Lock: "op", Identity: "uid-a"}
	for _, c := range []struct {
		name string
		opts manager.Options
	}{
		{"RenewDeadline pointer to 0", manager.Options{RenewDeadline: ptr.To(time.Duration(0))}},
		{"RetryPeriod above RenewDeadline/1.2", manager.Options{RenewDeadline: ptr.To(10 * time.Second), RetryPeriod: ptr.To(9 * time.Second)}},
	} {
		opts, _, err := crmanager.Options(cfg, c.opts)
		if err == nil {
			t.Errorf("%s: Options = nil error; the manager gets LeaseDuration %v, RenewDeadline %v, RetryPeriod %v, which client-go refuses at Start",
				c.name, *opts.LeaseDuration, *opts.RenewDeadline, *opts.RetryPeriod)
		}
	}
}

// gatedTransport holds the first request of method (GET when empty) sent while armed until
// open is closed; held is closed when that request arrived.
type gatedTransport struct {
	next       http.RoundTripper
	method     string
	armed      *atomic.Bool
	held, open chan struct{}
}

func (g gatedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == cmp.Or(g.method, http.MethodGet) && g.armed.CompareAndSwap(true, false) {
		close(g.held)
		<-g.open
	}
	return g.next.RoundTrip(req)
}

// TestReview14bReleaseRacesAcquire: Release "returns ErrStillLeading while client-go leads
// with this lock", but it checks renewing once, before its consistent read; the acquisition
// that runs meanwhile (client-go's Update, then "became leader") is not excluded. A Release
// called while the pod is a candidate (a shutdown hook, say) whose read is slower than
// client-go's acquisition sends the holder-release of the very term client-go now leads:
// the controller grants the next candidate at once while this manager runs its controllers
// for up to RenewDeadline + RetryPeriod.
func TestReview14bReleaseRacesAcquire(t *testing.T) {
	h := newHarness(t, 8)
	setStatus(t, h.key, held("pod-a", "uid-a", 5, 8))
	g := gatedTransport{armed: &atomic.Bool{}, held: make(chan struct{}), open: make(chan struct{})}
	rc := h.proxy.Config()
	rc.Wrap(func(next http.RoundTripper) http.RoundTripper { g.next = next; return g })
	l, err := leadership.NewResourceLock(leadership.ResourceLockConfig{Config: rc, Namespace: h.key.Namespace, Lock: h.key.Name,
		Identity: "uid-a", Name: "pod-a", LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: time.Second, ExactTimings: true})
	if err != nil {
		t.Fatal(err)
	}
	me := resourcelock.LeaderElectionRecord{HolderIdentity: "uid-a", LeaseDurationSeconds: 4}
	// client-go's acquire loop, as a candidate: Get (the grant shows up).
	if _, _, err := l.Get(t.Context()); err != nil {
		t.Fatal(err)
	}
	g.armed.Store(true)
	relErr := make(chan error, 1)
	go func() { relErr <- l.Release(context.Background()) }() // not leading yet: allowed
	<-g.held
	// Meanwhile client-go's acquire: Update confirms the grant, and it becomes leader. Since the
	// fix, Update waits for the Release in progress, so exactly one of them wins.
	updErr := make(chan error, 1)
	go func() { updErr <- l.Update(t.Context(), me) }()
	time.Sleep(300 * time.Millisecond) // let the Update reach the lock
	close(g.open)
	rerr, uerr := <-relErr, <-updErr
	var lock lockv1.DistributedLock
	if gerr := k8s.Get(context.Background(), h.key, &lock); gerr != nil {
		t.Fatalf("get lock: %v", gerr)
	}
	_, annotated := lock.Annotations[lockv1.AnnotationHolderRelease]
	t.Logf("Release = %v; Update = %v; holder-release annotation %q; Valid() = %v, Token() = %d", rerr, uerr, lock.Annotations[lockv1.AnnotationHolderRelease], l.Valid(), l.Token())
	switch {
	case rerr == nil && uerr == nil:
		t.Errorf("both Release and the acquiring Update succeeded: client-go leads a released term")
	case rerr == nil && (l.Valid() || !annotated):
		t.Errorf("Release = nil but Valid() = %v, annotated = %v: want false, true", l.Valid(), annotated)
	case uerr == nil && annotated:
		t.Errorf("the Update won, yet the release was sent")
	}
}

// TestReview14bRetryPeriodFirstRoundHidesIt is TestResourceLockLearnsTimings' RetryPeriod
// case with client-go's real order: renew's first round runs at once after "became leader"
// (wait.UntilWithContext is sliding: f first, then the period). That round's gap from the
// acquiring Update is a few milliseconds and becomes retrySeen for good; the next round,
// 3.5 s later, is not learnt.
func TestReview14bRetryPeriodFirstRoundHidesIt(t *testing.T) {
	h := newHarness(t, 8)
	setStatus(t, h.key, held("pod-a", "uid-a", 5, 8))
	l := newResourceLock(t, h, "pod-a", "uid-a", 4*time.Second, 3*time.Second, time.Second)
	me := resourcelock.LeaderElectionRecord{HolderIdentity: "uid-a", LeaseDurationSeconds: 4}
	round := func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second) // a renewal round of RenewDeadline 3 s
		defer cancel()
		return l.Update(ctx, me)
	}
	if err := l.Update(t.Context(), me); err != nil {
		t.Fatalf("acquire: Update = %v", err)
	}
	l.RecordEvent("became leader")
	if err := round(); err != nil { // renew's first round, at once
		t.Fatalf("first renewal round: %v", err)
	}
	time.Sleep(3500 * time.Millisecond) // RetryPeriod about 3.5 s
	err := round()
	if err == nil || l.Valid() {
		t.Errorf("renewal with RetryPeriod about 3.5 s + RenewDeadline 3 s of a 6 s validity: Update = %v, Valid() = %v; want an error", err, l.Valid())
	}
	if rerr := l.ReadyzCheck(nil); !errors.Is(rerr, leadership.ErrTimingsMismatch) {
		t.Errorf("ReadyzCheck = %v, want ErrTimingsMismatch naming RetryPeriod", rerr)
	}
	l.RecordEvent("stopped leading")
}
