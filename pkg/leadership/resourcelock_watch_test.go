package leadership_test

import (
	"context"
	"net/http"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/leaderelection"

	"github.com/lockwarden/lockwarden/pkg/leadership"
)

// TestResourceLockGetWaitsForGrant: while this pod is not the holder (client-go is not
// leading), Get waits on a watch of the lock until a grant to this pod shows up, then confirms
// it with a consistent read and names this pod, so that client-go goes on to Update at once
// instead of at its next poll. Without a grant it returns after about RetryPeriod, naming the
// holder. It writes nothing.
func TestResourceLockGetWaitsForGrant(t *testing.T) {
	h := newHarness(t, 10)
	const me, other = types.UID("uid-standby"), types.UID("uid-holder")
	setStatus(t, h.key, held("worker-1", other, 5, 10))
	cfg := leadership.ResourceLockConfig{Config: h.proxy.Config(), Namespace: h.key.Namespace, Lock: h.key.Name,
		// RetryPeriod 3 s: Get waits up to min(RetryPeriod, read limit/4) = 2 s, time enough for
		// the grant below to land inside the wait on a loaded machine (with 1 s it did not).
		Identity: me, Name: "worker-0", LeaseDuration: 5 * time.Second, RenewDeadline: 4 * time.Second, RetryPeriod: 3 * time.Second, ExactTimings: true}
	var writes atomic.Int32
	cfg.Config.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method != http.MethodGet {
				writes.Add(1)
			}
			return next.RoundTrip(req)
		})
	})
	l, err := leadership.NewResourceLock(cfg)
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	rec, _, err := l.Get(t.Context())
	if err != nil || rec.HolderIdentity != string(other) {
		t.Fatalf("Get while another pod holds the lock = %+v, %v; want the holder %s", rec, err, other)
	}
	t.Logf("Get without a grant returned after %v (RetryPeriod 3s)", time.Since(start).Round(time.Millisecond))

	type result struct {
		holder string
		err    error
		at     time.Time
	}
	got := make(chan result, 1)
	go func() {
		rec, _, err := l.Get(t.Context())
		r := result{err: err, at: time.Now()}
		if rec != nil {
			r.holder = rec.HolderIdentity
		}
		got <- r
	}()
	time.Sleep(300 * time.Millisecond) // Get is waiting on its watch
	granted := time.Now()
	setStatus(t, h.key, held("worker-0", me, 7, 10))
	r := <-got
	if r.err != nil || r.holder != string(me) {
		t.Fatalf("Get during which the lock was granted to this pod = %q, %v; want %s (it should wait for the grant, not answer the holder it read first)", r.holder, r.err, me)
	}
	t.Logf("Get returned %v after the grant's status write was acknowledged", r.at.Sub(granted).Round(time.Millisecond))
	if n := writes.Load(); n != 0 {
		t.Errorf("the lock sent %d requests other than GETs and watches, want none", n)
	}
}

// BenchmarkResourceLockGrantToLead measures how long a standby's client-go elector, on a
// ResourceLock with RetryPeriod 1 s, takes from the acknowledged status write that grants it
// the lock to OnStartedLeading, with grants at random moments of its poll cycle. ns/op is the
// mean; p50-ms and max-ms are reported too.
func BenchmarkResourceLockGrantToLead(b *testing.B) {
	var took []time.Duration
	for i := range b.N {
		took = append(took, grantToLead(b, i))
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	var sum time.Duration
	for _, d := range took {
		sum += d
	}
	b.ReportMetric(float64(sum.Nanoseconds())/float64(len(took)), "ns/op")
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(took[len(took)-1].Microseconds())/1000, "max-ms")
}

// grantToLead runs one standby elector, grants it the lock after a pseudo-random delay and
// returns the time from the grant to its OnStartedLeading.
func grantToLead(b *testing.B, i int) time.Duration {
	b.Helper()
	b.StopTimer()
	defer b.StartTimer()
	h := newHarness(b, 10)
	uid := types.UID("uid-bench")
	l, err := leadership.NewResourceLock(leadership.ResourceLockConfig{Config: h.proxy.Config(), Namespace: h.key.Namespace, Lock: h.key.Name,
		Identity: uid, Name: "worker-0", LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: time.Second, ExactTimings: true})
	if err != nil {
		b.Fatal(err)
	}
	led := make(chan time.Time, 1)
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: l, LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: time.Second,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) { led <- time.Now() },
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); le.Run(ctx) }()
	defer func() { cancel(); <-done }()
	time.Sleep(time.Duration(1500+(i*7919)%2000) * time.Millisecond) // somewhere in its poll cycle
	granted := time.Now()
	setStatus(b, h.key, held("worker-0", uid, int64(100+i), 10))
	select {
	case at := <-led:
		return at.Sub(granted)
	case <-time.After(30 * time.Second):
		b.Fatal("never led")
	}
	return 0
}
