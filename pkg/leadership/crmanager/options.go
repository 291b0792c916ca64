// Package crmanager sets up a controller-runtime manager to elect through lockwarden: one call
// gives the manager and its leadership.ResourceLock one set of leader election timings, which
// the lock's safety rests on (see leadership.ResourceLockConfig). It is a separate package so
// that pkg/leadership does not import controller-runtime.
package crmanager

import (
	"errors"
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/lockwarden/lockwarden/pkg/leadership"
)

// ErrConflict is wrapped by every error Options returns; the message names the fields.
var ErrConflict = errors.New("crmanager: the manager's options conflict with the lock's")

// Options returns opts set to elect through a new leadership.ResourceLock made from cfg:
// LeaderElection true, the lock as LeaderElectionResourceLockInterface, LeaderElectionID the
// lock's name when unset (it names the election in logs and leader_election_master_status),
// Controller.SkipNameValidation true when unset (leadership.RunManager builds managers with
// the same controllers again in one process), and LeaseDuration, RenewDeadline and RetryPeriod equal on both sides: each is taken from
// whichever of opts and cfg sets it (both: they must be equal), else controller-runtime's
// default (15 s, 10 s, 2 s), checked as client-go checks them (LeaseDuration > RenewDeadline >
// 1.2 x RetryPeriod). It refuses opts that elect otherwise (a lock interface of their
// own) and LeaderElectionReleaseOnCancel (the lock ignores client-go's release:
// leadership.RunManager releases after the runnables stopped). It sets cfg.ReleaseOnStop, so
// that leadership.RunManager releases the term on a clean stop, when opts.GracefulShutdownTimeout
// is unset (controller-runtime's 30 s) or not 0, unless cfg.DisableReleaseOnStop: with 0, Start
// returns before the runnables stopped and the release would promise what nobody waited for,
// so ReleaseOnStop stays false (and cfg.ReleaseOnStop set by hand with 0 is refused). The
// error wraps ErrConflict, or leadership.ErrInvalidConfig for a bad cfg.
func Options(cfg leadership.ResourceLockConfig, opts manager.Options) (manager.Options, *leadership.ResourceLock, error) {
	if opts.LeaderElectionResourceLockInterface != nil {
		return opts, nil, fmt.Errorf("%w: LeaderElectionResourceLockInterface is already set", ErrConflict)
	}
	if opts.LeaderElectionReleaseOnCancel {
		return opts, nil, fmt.Errorf("%w: LeaderElectionReleaseOnCancel: the lock ignores client-go's release (sent before controller-runtime stopped the controllers of a lost lease); run the manager with leadership.RunManager, which releases once they stopped", ErrConflict)
	}
	waits := opts.GracefulShutdownTimeout == nil || *opts.GracefulShutdownTimeout != 0
	if cfg.ReleaseOnStop && !waits && !cfg.DisableReleaseOnStop {
		return opts, nil, fmt.Errorf("%w: ResourceLockConfig.ReleaseOnStop with manager.Options.GracefulShutdownTimeout 0: Start returns before the runnables stopped, so the release would promise what nobody waited for", ErrConflict)
	}
	cfg.ReleaseOnStop = waits && !cfg.DisableReleaseOnStop
	var err error
	if opts.LeaseDuration, cfg.LeaseDuration, err = same("LeaseDuration", opts.LeaseDuration, cfg.LeaseDuration, leadership.DefaultLeaseDuration); err != nil {
		return opts, nil, err
	}
	if opts.RenewDeadline, cfg.RenewDeadline, err = same("RenewDeadline", opts.RenewDeadline, cfg.RenewDeadline, leadership.DefaultRenewDeadline); err != nil {
		return opts, nil, err
	}
	if opts.RetryPeriod, cfg.RetryPeriod, err = same("RetryPeriod", opts.RetryPeriod, cfg.RetryPeriod, leadership.DefaultRetryPeriod); err != nil {
		return opts, nil, err
	}
	cfg.ExactTimings = true
	lock, err := leadership.NewResourceLock(cfg)
	if err != nil {
		return opts, nil, err
	}
	opts.LeaderElection = true
	opts.LeaderElectionResourceLockInterface = lock
	if opts.Controller.SkipNameValidation == nil {
		// leadership.RunManager builds a new manager with the same controllers in the same
		// process after a lost lock: controller-runtime's process-wide name check would refuse
		// them (and the refused manager would keep its probe port).
		skip := true
		opts.Controller.SkipNameValidation = &skip
	}
	if opts.LeaderElectionID == "" {
		opts.LeaderElectionID = cfg.Lock
	}
	return opts, lock, nil
}

// same settles one timing: the manager's value m (nil: unset) and the lock's l (0: unset). The
// manager gets its own copy, so that changing the caller's variable later cannot part them.
func same(field string, m *time.Duration, l, def time.Duration) (*time.Duration, time.Duration, error) {
	switch {
	case m != nil && *m <= 0:
		return m, l, fmt.Errorf("%w: manager.Options.%s %v is not positive", ErrConflict, field, *m)
	case m != nil && l != 0 && *m != l:
		return m, l, fmt.Errorf("%w: manager.Options.%s %v, ResourceLockConfig.%s %v: set one of them", ErrConflict, field, *m, field, l)
	case m != nil:
		v := *m
		return &v, v, nil
	case l != 0:
		return &l, l, nil
	default:
		d := def
		return &d, d, nil
	}
}
