package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/controllers"
	"github.com/lockwarden/lockwarden/internal/testenv"
)

// startWithRegistry runs the fixture's controller as controllertest.Start does, with its
// metrics on reg, and returns the func that stops it and waits.
func (f *fixture) startWithRegistry(reg *prometheus.Registry) func() {
	f.t.Helper()
	sch, err := testenv.Scheme()
	if err != nil {
		f.t.Fatal(err)
	}
	mgr, err := manager.New(env.Config, manager.Options{
		Scheme: sch, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		Cache:      cache.Options{DefaultNamespaces: map[string]cache.Config{f.ns: {}}},
	})
	if err != nil {
		f.t.Fatalf("manager: %v", err)
	}
	active, err := controllers.NewActive(controllers.ActiveConfig{
		Engine: f.engine, Manager: mgr, Identity: "metrics", ElectionTTL: 3 * time.Second, GrantTTL: 13 * time.Second,
		MaxConcurrentReconciles: 2, Metrics: controllers.NewMetrics(reg), Retry: 100 * time.Millisecond,
	})
	if err != nil {
		f.t.Fatalf("controller config: %v", err)
	}
	if err := active.AddToManager(bg()); err != nil {
		f.t.Fatalf("add controller: %v", err)
	}
	ctx, cancel := context.WithCancel(bg())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil && !strings.Contains(err.Error(), "context canceled") {
			f.t.Errorf("manager stopped: %v", err)
		}
	}
}

// lockGauges reads lockwarden_locks by phase from reg.
func lockGauges(t testing.TB, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "lockwarden_locks" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "phase" {
					out[l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	return out
}

// TestReview22LocksGaugeAfterShrink: lockwarden_locks ("DistributedLocks by published
// phase") after a lock of three slots is lowered to one and its slots 1 and 2 have ended and
// left status: one lock, Held. The gauge is kept per engine key, and a removed slot's key is
// never forgotten (forget runs only when the lock is deleted), so the removed slots stay
// counted in the phase of their last turn for as long as the lock exists.
func TestReview22LocksGaugeAfterShrink(t *testing.T) {
	f := newFixture(t)
	f.stop() // this test's controller reports to a registry it can read
	reg := prometheus.NewRegistry()
	stop := f.startWithRegistry(reg)
	t.Cleanup(stop)
	for i := range 3 {
		f.pod(fmt.Sprintf("a-%d", i), "a")
		secondApart()
	}
	f.lock("lock", "a", func(s *lockv1.DistributedLockSpec) { s.Slots = 3; s.LockDelaySeconds = ptrTo[int32](2) })
	f.waitFor("lock", 30*time.Second, "3 slots held", slotsHeld(3))
	eventually(t, 5*time.Second, func() bool { return lockGauges(t, reg)["Held"] > 0 }, func() string { return fmt.Sprint(lockGauges(t, reg)) })
	t.Logf("lockwarden_locks with one lock of 3 Held slots: %v", lockGauges(t, reg))

	f.editLock("lock", func(l *lockv1.DistributedLock) { l.Spec.Slots = 1 })
	f.waitFor("lock", 20*time.Second, "slots 1, 2 removed", func(l *lockv1.DistributedLock) bool {
		return len(l.Status.Slots) == 0 && l.Status.Phase == lockv1.PhaseHeld
	})
	var got map[string]float64
	eventually(t, 5*time.Second, func() bool {
		got = lockGauges(t, reg)
		return got["Held"] == 1 && got["Releasing"] == 0 && got["Suspended"] == 0 && got["Pending"] == 0
	}, func() string {
		return fmt.Sprintf("lockwarden_locks = %v, want Held 1 and nothing else: one lock of one slot, Held (lock %s)", got, describeSlots(f.get("lock")))
	})
}
