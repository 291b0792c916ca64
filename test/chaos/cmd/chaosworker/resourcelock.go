package main

import (
	"context"
	"os"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/lockwarden/lockwarden/pkg/leadership"
	"github.com/lockwarden/lockwarden/pkg/leadership/crmanager"
)

// The managers' leader election timings on the suite's 3 s lock: a renewal must leave more
// than RenewDeadline + RetryPeriod (1.4 s) of the term's validity (3 s - 0.75 s margin), so a
// renewal's read may take up to 0.85 s.
const (
	managerLeaseDuration = 2 * time.Second
	managerRenewDeadline = time.Second
	managerRetryPeriod   = 400 * time.Millisecond
)

// runManager is --mode resourcelock: controller-runtime managers elected through lockwarden
// (crmanager.Options: one set of timings on both sides), run by leadership.RunManager, which
// builds a new manager after a lost lock. Each manager's one leader-election runnable writes
// the ledger with the lock's Token() and Writer() while the term is valid. No release on
// stop: a holder-confirmed release ends the term while this process still runs, which
// CheckHandoffs reads as an unproven attestation.
func (w *worker) runManager(ctx context.Context, cfg *rest.Config, probe, lockName string) error {
	opts, lock, err := crmanager.Options(leadership.ResourceLockConfig{
		Config: cfg, Namespace: os.Getenv("LOCK_NAMESPACE"), Lock: lockName, DisableReleaseOnStop: true,
	}, manager.Options{
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		LeaseDuration: ptr.To(managerLeaseDuration), RenewDeadline: ptr.To(managerRenewDeadline), RetryPeriod: ptr.To(managerRetryPeriod),
	})
	if err != nil {
		return err
	}
	defer w.serve(probe, lock.ReadyzCheck)()
	return leadership.RunManager(ctx, lock, func() (leadership.Manager, error) {
		mgr, err := manager.New(cfg, opts)
		if err != nil {
			return nil, err
		}
		return mgr, mgr.Add(manager.RunnableFunc(func(ctx context.Context) error { // leader election: runs while the manager leads
			w.leadTerms(ctx, lock)
			return nil
		}))
	})
}

// leadTerms is the runnable's work: each term the lock confirms (a token not led before by
// this runnable) is led as the Elector's terms are, with the writer the lock draws for it.
// A runnable that outlives its manager's lost lock (controller-runtime does not wait for it)
// stops when the term's validity ends.
func (w *worker) leadTerms(ctx context.Context, lock *leadership.ResourceLock) {
	var last int64
	for ctx.Err() == nil {
		if token := lock.Token(); token != 0 && token != last {
			last = token
			w.lead(ctx, token, 0, lock.Writer(), lockTerm{lock, token}, lock.Abandon) // ResourceLock refuses a lock of several slots
			continue
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// lockTerm is one term of a ResourceLock: valid while the lock confirms that very token.
type lockTerm struct {
	l     *leadership.ResourceLock
	token int64
}

func (t lockTerm) Valid() bool { return t.l.Token() == t.token }

func (t lockTerm) ValidUntil() time.Time {
	if !t.Valid() {
		return time.Time{}
	}
	return t.l.ValidUntil()
}
