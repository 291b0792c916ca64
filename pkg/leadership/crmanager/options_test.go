package crmanager_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/lockwarden/lockwarden/pkg/leadership"
	"github.com/lockwarden/lockwarden/pkg/leadership/crmanager"
)

func lockConfig(edit func(*leadership.ResourceLockConfig)) leadership.ResourceLockConfig {
	c := leadership.ResourceLockConfig{Config: &rest.Config{Host: "https://127.0.0.1:1"}, Namespace: "ns", Lock: "op", Identity: "uid-a"}
	if edit != nil {
		edit(&c)
	}
	return c
}

func TestOptions(t *testing.T) {
	const s = time.Second
	cases := []struct {
		name              string
		cfg               leadership.ResourceLockConfig
		opts              manager.Options
		lease, renew, try time.Duration
		err               string // substring of the error; "" for none
		noRelease         bool   // RunManager does not release on a clean stop
	}{
		{name: "defaults on both sides", cfg: lockConfig(nil), lease: 15 * s, renew: 10 * s, try: 2 * s},
		{name: "the manager's timings go to the lock", cfg: lockConfig(nil),
			opts:  manager.Options{LeaseDuration: ptr.To(30 * s), RenewDeadline: ptr.To(20 * s), RetryPeriod: ptr.To(4 * s)},
			lease: 30 * s, renew: 20 * s, try: 4 * s},
		{name: "the lock's timings go to the manager", cfg: lockConfig(func(c *leadership.ResourceLockConfig) { c.RenewDeadline, c.RetryPeriod = 3*s, s }),
			lease: 15 * s, renew: 3 * s, try: s},
		{name: "equal on both sides", cfg: lockConfig(func(c *leadership.ResourceLockConfig) { c.RenewDeadline = 12 * s }),
			opts: manager.Options{RenewDeadline: ptr.To(12 * s)}, lease: 15 * s, renew: 12 * s, try: 2 * s},
		{name: "different RenewDeadline", cfg: lockConfig(func(c *leadership.ResourceLockConfig) { c.RenewDeadline = 3 * s }),
			opts: manager.Options{RenewDeadline: ptr.To(12 * s)}, err: "manager.Options.RenewDeadline 12s, ResourceLockConfig.RenewDeadline 3s"},
		{name: "ReleaseOnCancel", cfg: lockConfig(nil), opts: manager.Options{LeaderElectionReleaseOnCancel: true}, err: "LeaderElectionReleaseOnCancel"},
		{name: "no graceful shutdown: no release", cfg: lockConfig(nil), opts: manager.Options{GracefulShutdownTimeout: ptr.To(time.Duration(0))},
			lease: 15 * s, renew: 10 * s, try: 2 * s, noRelease: true},
		{name: "a graceful shutdown: the release", cfg: lockConfig(nil), opts: manager.Options{GracefulShutdownTimeout: ptr.To(time.Second)},
			lease: 15 * s, renew: 10 * s, try: 2 * s},
		{name: "no bound on the graceful shutdown: the release", cfg: lockConfig(nil), opts: manager.Options{GracefulShutdownTimeout: ptr.To(-time.Second)},
			lease: 15 * s, renew: 10 * s, try: 2 * s},
		{name: "release turned off", cfg: lockConfig(func(c *leadership.ResourceLockConfig) { c.DisableReleaseOnStop = true }),
			lease: 15 * s, renew: 10 * s, try: 2 * s, noRelease: true},
		{name: "release asked for with no graceful shutdown", cfg: lockConfig(func(c *leadership.ResourceLockConfig) { c.ReleaseOnStop = true }),
			opts: manager.Options{GracefulShutdownTimeout: ptr.To(time.Duration(0))}, err: "ReleaseOnStop with manager.Options.GracefulShutdownTimeout 0"},
		{name: "release asked for and turned off, no graceful shutdown", cfg: lockConfig(func(c *leadership.ResourceLockConfig) { c.ReleaseOnStop, c.DisableReleaseOnStop = true, true }),
			opts: manager.Options{GracefulShutdownTimeout: ptr.To(time.Duration(0))}, lease: 15 * s, renew: 10 * s, try: 2 * s, noRelease: true},
		{name: "timings client-go refuses", cfg: lockConfig(nil), opts: manager.Options{LeaseDuration: ptr.To(5 * s)}, err: "LeaseDuration: 5s is not longer than RenewDeadline 10s"},
		{name: "RetryPeriod above RenewDeadline/1.2", cfg: lockConfig(nil), opts: manager.Options{RetryPeriod: ptr.To(9 * s)}, err: "not longer than 1.2 x RetryPeriod 9s"},
		{name: "a pointer to zero", cfg: lockConfig(nil), opts: manager.Options{RenewDeadline: ptr.To(time.Duration(0))}, err: "RenewDeadline 0s is not positive"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			opts, lock, err := crmanager.Options(c.cfg, c.opts)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) || lock != nil {
					t.Fatalf("Options = %v, %v: want an error containing %q", lock, err, c.err)
				}
				if !errors.Is(err, crmanager.ErrConflict) && !errors.Is(err, leadership.ErrInvalidConfig) {
					t.Errorf("error %v wraps neither ErrConflict nor ErrInvalidConfig", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Options: %v", err)
			}
			if !opts.LeaderElection || opts.LeaderElectionResourceLockInterface != lock || opts.LeaderElectionID != "op" {
				t.Errorf("LeaderElection %v, lock interface set %v, ID %q: want true, the lock, \"op\"",
					opts.LeaderElection, opts.LeaderElectionResourceLockInterface == lock, opts.LeaderElectionID)
			}
			if opts.Controller.SkipNameValidation == nil || !*opts.Controller.SkipNameValidation {
				t.Errorf("Controller.SkipNameValidation = %v, want true (RunManager builds the same controllers again)", opts.Controller.SkipNameValidation)
			}
			if c.opts.RenewDeadline != nil && opts.RenewDeadline == c.opts.RenewDeadline {
				t.Errorf("the manager shares the caller's RenewDeadline pointer: a later change would part manager and lock")
			}
			if lock.ReleasesOnStop() == c.noRelease {
				t.Errorf("ReleasesOnStop() = %v, want %v", lock.ReleasesOnStop(), !c.noRelease)
			}
			if *opts.LeaseDuration != c.lease || *opts.RenewDeadline != c.renew || *opts.RetryPeriod != c.try {
				t.Errorf("manager timings %v/%v/%v, want %v/%v/%v", *opts.LeaseDuration, *opts.RenewDeadline, *opts.RetryPeriod, c.lease, c.renew, c.try)
			}
		})
	}
}

// TestBareResourceLockReleasesOnlyWhenAsked: a lock made by NewResourceLock cannot see its
// manager's GracefulShutdownTimeout (with 0, Start returns before the runnables stopped), so
// RunManager's release is off unless the caller opts in with ReleaseOnStop;
// DisableReleaseOnStop overrides it.
func TestBareResourceLockReleasesOnlyWhenAsked(t *testing.T) {
	for _, c := range []struct {
		name         string
		edit         func(*leadership.ResourceLockConfig)
		wantReleases bool
	}{
		{"default", nil, false},
		{"opted in", func(c *leadership.ResourceLockConfig) { c.ReleaseOnStop = true }, true},
		{"opted in and turned off", func(c *leadership.ResourceLockConfig) { c.ReleaseOnStop, c.DisableReleaseOnStop = true, true }, false},
	} {
		lock, err := leadership.NewResourceLock(lockConfig(c.edit))
		if err != nil {
			t.Fatalf("%s: NewResourceLock: %v", c.name, err)
		}
		if got := lock.ReleasesOnStop(); got != c.wantReleases {
			t.Errorf("%s: ReleasesOnStop() = %v, want %v", c.name, got, c.wantReleases)
		}
	}
}
