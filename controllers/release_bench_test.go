package controllers_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/pkg/leadership"
)

// BenchmarkPlannedHandoff measures a planned handoff (a rolling update stops the leader's
// process cleanly) side by side on one API server: lockwarden's holder-confirmed release
// (pkg/leadership with ReleaseOnStop: the elector patches lockwarden.io/holder-release with
// its pod-bound token once its callback returned; the controller grants the standby at once)
// and client-go leader election with ReleaseOnCancel (the leader empties the Lease on its way
// out; the standby takes it at its next retry). Both use a 15 s lease; client-go the timings
// controller-runtime defaults to (RenewDeadline 10 s, RetryPeriod 2 s). Each iteration stops the
// current leader (its Run context is cancelled, as SIGTERM does) and times until the other
// candidate's OnStartedLeading runs; the stopped candidate then starts again as the standby.
// Run: go test -run '^$' -bench PlannedHandoff -benchtime 20x ./controllers/
func BenchmarkPlannedHandoff(b *testing.B) {
	b.Run("lockwarden-holder-release", benchHolderRelease)
	b.Run("client-go-ReleaseOnCancel", benchClientGoRelease)
}

// candidateRun is one running candidate: cancel stops it, done is closed when Run returned.
type candidateRun struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (c *candidateRun) stop() {
	c.cancel()
	<-c.done
}

func benchHolderRelease(b *testing.B) {
	f := newFixture(b)
	f.releaseSetup()
	var pods []*corev1.Pod
	for _, name := range []string{"a-0", "a-1"} {
		p, _ := f.workerPod(name, "a")
		pods = append(pods, p)
		secondApart()
	}
	f.lock("lock", "a", func(s *lockv1.DistributedLockSpec) { s.LeaseDurationSeconds = 15 })
	led := make(chan string, 16)
	start := func(p *corev1.Pod) *candidateRun {
		cfg, err := env.PodConfig(bg(), p)
		if err != nil {
			b.Fatalf("pod token: %v", err)
		}
		el, err := leadership.New(leadership.Config{Config: cfg, Namespace: f.ns, Lock: "lock", Identity: p.UID, Name: p.Name, ReleaseOnStop: true,
			Callbacks: leadership.Callbacks{OnStartedLeading: func(ctx context.Context, _ int64) {
				led <- p.Name
				<-ctx.Done()
			}}})
		if err != nil {
			b.Fatalf("elector: %v", err)
		}
		ctx, cancel := context.WithCancel(bg())
		c := &candidateRun{cancel: cancel, done: make(chan struct{})}
		go func() { defer close(c.done); _ = el.Run(ctx) }()
		return c
	}
	runs := map[string]*candidateRun{"a-0": start(pods[0]), "a-1": start(pods[1])}
	defer func() {
		for _, c := range runs {
			c.stop()
		}
	}()
	leader := waitLed(b, led, time.Minute)
	byName := map[string]*corev1.Pod{"a-0": pods[0], "a-1": pods[1]}
	var ds []time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		runs[leader].stop()
		next := waitLed(b, led, time.Minute)
		ds = append(ds, time.Since(t0))
		if next == leader {
			b.Fatalf("%s led again after its own release", next)
		}
		runs[leader] = start(byName[leader]) // the next standby
		leader = next
		time.Sleep(200 * time.Millisecond) // the restarted standby reads the status first
	}
	reportHandoffs(b, ds)
}

func benchClientGoRelease(b *testing.B) {
	f := newFixture(b)
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		b.Fatal(err)
	}
	led := make(chan string, 16)
	start := func(id string) *candidateRun {
		lock := &resourcelock.LeaseLock{LeaseMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "lease"}, Client: cs.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: id}}
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: lock, LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
			ReleaseOnCancel: true, Name: id,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) { led <- id; <-ctx.Done() },
				OnStoppedLeading: func() {},
			},
		})
		if err != nil {
			b.Fatalf("leader elector: %v", err)
		}
		ctx, cancel := context.WithCancel(bg())
		c := &candidateRun{cancel: cancel, done: make(chan struct{})}
		go func() { defer close(c.done); le.Run(ctx) }()
		return c
	}
	runs := map[string]*candidateRun{"a-0": start("a-0")}
	leader := waitLed(b, led, time.Minute)
	runs["a-1"] = start("a-1")
	defer func() {
		for _, c := range runs {
			c.stop()
		}
	}()
	var ds []time.Duration
	b.ResetTimer()
	for range b.N {
		time.Sleep(2500 * time.Millisecond) // the standby has tried and failed at least once
		t0 := time.Now()
		runs[leader].stop()
		next := waitLed(b, led, time.Minute)
		ds = append(ds, time.Since(t0))
		runs[leader] = start(leader)
		leader = next
	}
	var l coordinationv1.Lease
	_ = k8s.Get(bg(), objectKey(f.ns, "lease"), &l) // for the log: the Lease's last holder
	if l.Spec.HolderIdentity != nil {
		b.Logf("Lease holder at the end: %s", *l.Spec.HolderIdentity)
	}
	reportHandoffs(b, ds)
}

// waitLed waits for the next OnStartedLeading.
func waitLed(b *testing.B, led <-chan string, timeout time.Duration) string {
	b.Helper()
	select {
	case name := <-led:
		return name
	case <-time.After(timeout):
		b.Fatalf("no candidate started leading within %v", timeout)
		return ""
	}
}

// reportHandoffs reports p50 and p99 (ms) and logs the samples.
func reportHandoffs(b *testing.B, ds []time.Duration) {
	b.Helper()
	s := slices.Clone(ds)
	slices.Sort(s)
	q := func(p float64) float64 {
		return float64(s[min(len(s)-1, int(p*float64(len(s))))].Microseconds()) / 1000
	}
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(0, "ns/op")
	b.Logf("%d handoffs: %s", len(ds), fmt.Sprint(ds))
}
