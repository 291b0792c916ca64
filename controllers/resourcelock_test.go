package controllers_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/pkg/leadership"
	"github.com/lockwarden/lockwarden/pkg/leadership/crmanager"
)

// incarnation is one manager built for one candidate: when it was elected, the last moment
// anything under its leader election ran (a reconcile or its runnable), and the newest
// validity its ResourceLock showed while it ran.
type incarnation struct {
	who                  string
	n                    int
	elected, last, until time.Time
	reconciles, invalid  int
	startErr             error
	stopped              bool
}

// ledger records every incarnation of the three managers.
type ledger struct {
	mu   sync.Mutex
	incs []*incarnation
}

func (l *ledger) add(who string, n int) *incarnation {
	l.mu.Lock()
	defer l.mu.Unlock()
	inc := &incarnation{who: who, n: n}
	l.incs = append(l.incs, inc)
	return inc
}

// touch records activity of inc at now, with the lock's validity as it reads now.
func (l *ledger) touch(inc *incarnation, lock *leadership.ResourceLock, reconcile bool) {
	until := lock.ValidUntil()
	l.mu.Lock()
	defer l.mu.Unlock()
	t := time.Now()
	if inc.elected.IsZero() {
		inc.elected = t
	}
	inc.last = t
	if until.After(inc.until) {
		inc.until = until
	}
	if reconcile {
		inc.reconciles++
		if !lock.Valid() {
			inc.invalid++
		}
	}
}

// electedCount counts the incarnations of who that ran under leader election and reconciled.
func (l *ledger) electedCount(who string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, inc := range l.incs {
		if inc.who == who && inc.reconciles > 0 {
			n++
		}
	}
	return n
}

func (l *ledger) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, i := range l.incs {
		fmt.Fprintf(&b, "\n  %s#%d elected %s last %s until %s reconciles %d (invalid %d) err %v",
			i.who, i.n, i.elected.Format("15:04:05.000"), i.last.Format("15:04:05.000"), i.until.Format("15:04:05.000"), i.reconciles, i.invalid, i.startErr)
	}
	return b.String()
}

// candidate runs one pod's managers: with recampaign through leadership.RunManager, else one
// manager's Start, as a plain controller-runtime program does.
type candidate struct {
	cancel context.CancelFunc
	done   chan error
	builds atomic.Int32
}

// TestResourceLockManagers runs three controller-runtime managers, each with LeaderElection
// and a leadership.ResourceLock for its own pod, against the real controller, and moves the
// lock between them by making its holder's pod NotReady. Exactly one manager runs its
// controllers at a time; each loser's controllers stop within the validity its lock showed;
// a manager run by RunManager re-campaigns after it lost the lock and leads again, while a
// plain manager's Start returns "leader election lost"; and a RunManager whose context ends
// releases the term, so the next holder starts without the lock delay.
func TestResourceLockManagers(t *testing.T) {
	f := newFixture(t)
	f.releaseSetup()
	pods := map[string]*corev1.Pod{}
	for _, n := range []string{"m-0", "m-1", "m-2"} {
		pods[n], _ = f.workerPod(n, "m")
		secondApart() // OldestReady: m-0 first
	}
	f.lock("op", "m", func(s *lockv1.DistributedLockSpec) { s.LeaseDurationSeconds = 8 })
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "work", Namespace: f.ns}}
	if err := k8s.Create(bg(), cm); err != nil {
		t.Fatalf("create configmap: %v", err)
	}
	touchCtx, stopTouch := context.WithCancel(bg())
	touched := make(chan struct{})
	go func() { // a reconcile every 200 ms for whoever leads
		defer close(touched)
		for i := 0; touchCtx.Err() == nil; i++ {
			cm.Data = map[string]string{"i": fmt.Sprint(i)}
			_ = k8s.Update(touchCtx, cm)
			select {
			case <-touchCtx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	defer func() { stopTouch(); <-touched }()

	led := &ledger{}
	run := map[string]*candidate{}
	for name, recampaign := range map[string]bool{"m-0": true, "m-1": true, "m-2": false} {
		run[name] = f.runCandidate(led, pods[name], recampaign)
	}
	stopAll := func() {
		for _, c := range run {
			c.cancel()
		}
		for name, c := range run {
			if err := <-c.done; err != nil && (name != "m-2" || err.Error() != "leader election lost") {
				t.Errorf("%s: %v", name, err)
			}
			c.done <- nil // later readers see it stopped
		}
	}
	defer func() {
		stopAll()
		checkOneAtATime(t, led)
	}()

	leads := func(who string, n int) {
		t.Helper()
		eventually(t, 60*time.Second, func() bool { return led.electedCount(who) >= n }, func() string {
			return fmt.Sprintf("%s never led (time %d): lock %s; incarnations:%s", who, n, describe(f.get("op")), led)
		})
	}
	leads("m-0", 1)
	f.setReady(pods["m-0"], false)
	leads("m-1", 1)
	f.setReady(pods["m-0"], true)
	eventually(t, 30*time.Second, func() bool { return run["m-0"].builds.Load() >= 2 }, func() string { return "m-0 did not re-campaign" + led.String() })
	f.setReady(pods["m-1"], false)
	leads("m-0", 2)                // the re-campaigned manager
	f.setReady(pods["m-0"], false) // m-1 stays NotReady: m-2 is the only candidate

	leads("m-2", 1)
	f.setReady(pods["m-0"], true)
	f.setReady(pods["m-2"], false)
	leads("m-0", 3)
	select {
	case err := <-run["m-2"].done:
		if err == nil || err.Error() != "leader election lost" {
			t.Errorf("plain manager m-2 after losing the lock: Start = %v, want leader election lost", err)
		}
		run["m-2"].done <- err
	case <-time.After(30 * time.Second):
		t.Errorf("plain manager m-2 still runs after losing the lock")
	}
	if b := run["m-2"].builds.Load(); b != 1 {
		t.Errorf("plain manager m-2 was built %d times, want 1", b)
	}

	// A planned stop with ReleaseOnStop: m-0's context ends, its manager stops, the release is
	// sent, and m-1 leads without waiting out the 8 s lock delay.
	f.setReady(pods["m-1"], true)
	secondApart()
	stopped := time.Now()
	run["m-0"].cancel()
	if err := <-run["m-0"].done; err != nil {
		t.Errorf("m-0 stopped: %v", err)
	}
	run["m-0"].done <- nil
	leads("m-1", 2)
	if took := time.Since(stopped); took > 6*time.Second {
		t.Errorf("next holder led %v after the released stop, want less than the 8 s lock delay", took.Round(time.Millisecond))
	}
	t.Logf("incarnations:%s", led)
}

// checkOneAtATime fails when two incarnations ran under leader election at overlapping times,
// or one ran past the validity its lock showed.
func checkOneAtATime(t *testing.T, led *ledger) {
	t.Helper()
	led.mu.Lock()
	defer led.mu.Unlock()
	var ran []*incarnation
	for _, inc := range led.incs {
		if inc.elected.IsZero() {
			continue
		}
		ran = append(ran, inc)
		if inc.reconciles == 0 {
			t.Errorf("%s#%d led but never reconciled", inc.who, inc.n)
		}
		if inc.last.After(inc.until) {
			t.Errorf("%s#%d ran until %s, %v after its validity %s", inc.who, inc.n,
				inc.last.Format("15:04:05.000"), inc.last.Sub(inc.until).Round(time.Millisecond), inc.until.Format("15:04:05.000"))
		}
	}
	for i, a := range ran {
		for _, b := range ran[i+1:] {
			if a.elected.Before(b.last) && b.elected.Before(a.last) {
				t.Errorf("%s#%d [%s, %s] and %s#%d [%s, %s] ran at the same time", a.who, a.n, a.elected.Format("15:04:05.000"), a.last.Format("15:04:05.000"),
					b.who, b.n, b.elected.Format("15:04:05.000"), b.last.Format("15:04:05.000"))
			}
		}
	}
}

// runCandidate starts p's managers on p's own token (the lock's reads and release), each with
// a ConfigMap controller and a runnable that record into led.
func (f *fixture) runCandidate(led *ledger, p *corev1.Pod, recampaign bool) *candidate {
	f.t.Helper()
	podCfg, err := env.PodConfig(bg(), p)
	if err != nil {
		f.t.Fatalf("pod token: %v", err)
	}
	// crmanager.Options gives the manager and the lock one set of timings (ExactTimings).
	opts, lock, err := crmanager.Options(leadership.ResourceLockConfig{Config: podCfg, Namespace: f.ns, Lock: "op",
		Identity: p.UID, Name: p.Name, DisableReleaseOnStop: !recampaign}, manager.Options{
		Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: config.Controller{SkipNameValidation: ptr.To(true)}, Cache: cacheFor(f.ns),
		LeaseDuration: ptr.To(4 * time.Second), RenewDeadline: ptr.To(3 * time.Second), RetryPeriod: ptr.To(time.Second),
	})
	if err != nil {
		f.t.Fatalf("manager options: %v", err)
	}
	c := &candidate{done: make(chan error, 1)}
	build := func() (leadership.Manager, error) {
		inc := led.add(p.Name, int(c.builds.Add(1)))
		mgr, err := manager.New(env.Config, opts)
		if err != nil {
			return nil, err
		}
		err = ctrl.NewControllerManagedBy(mgr).Named("work-" + p.Name).For(&corev1.ConfigMap{}).
			Complete(reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
				led.touch(inc, lock, true)
				return reconcile.Result{}, nil
			}))
		if err != nil {
			return nil, err
		}
		err = mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for {
				led.touch(inc, lock, false)
				select {
				case <-ctx.Done():
					led.touch(inc, lock, false)
					return nil
				case <-tick.C:
				}
			}
		}))
		return &recordStart{Manager: mgr, inc: inc, led: led}, err
	}
	ctx, cancel := context.WithCancel(bg())
	c.cancel = cancel
	go func() {
		if recampaign {
			c.done <- leadership.RunManager(ctx, lock, build)
			return
		}
		m, err := build()
		if err == nil {
			err = m.Start(ctx)
		}
		c.done <- err
	}()
	return c
}

// recordStart records what Start returned.
type recordStart struct {
	manager.Manager
	inc *incarnation
	led *ledger
}

func (r *recordStart) Start(ctx context.Context) error {
	err := r.Manager.Start(ctx)
	r.led.mu.Lock()
	r.inc.startErr, r.inc.stopped = err, true
	r.led.mu.Unlock()
	if err != nil && errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
