package leadership

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Manager is what RunManager runs: a controller-runtime manager.Manager satisfies it.
type Manager interface {
	Start(ctx context.Context) error
}

// errLeaderElectionLost is the message controller-runtime's manager (v0.25) returns from
// Start when its leader election lost the lock.
const errLeaderElectionLost = "leader election lost"

// ErrLost is returned by RunManager when ctx ended while it waited to campaign again.
var ErrLost = errors.New("leadership: the manager lost the lock")

// RunManager runs managers built by build, one at a time, until ctx ends: when a manager loses
// the lock (its Start returns controller-runtime's "leader election lost"), RunManager waits
// until the lost term's validity has passed, by when its controllers must have returned (the
// rule that makes a lost lock safe at all: reconcilers return promptly once their context is
// cancelled), then builds a new manager, which campaigns again. This is the option to
// re-campaign instead of exiting; without it a manager that lost the lock returns from Start
// and the process should exit, as controller-runtime documents. Each manager must use lock as
// its LeaderElectionResourceLockInterface. Any other error from Start is returned, and so is an
// error from build (after a lost lock, only once retries for 30 s failed: the lost manager's
// servers may still hold their ports for a moment).
// When ctx ends, RunManager returns what Start returned; with ResourceLockConfig.ReleaseOnStop
// and a nil return (every runnable returned), it first confirms the end of the term to the
// controller, which then grants the next candidate without the lock delay.
func RunManager(ctx context.Context, lock *ResourceLock, build func() (Manager, error)) error {
	lost := false
	for {
		m, err := buildManager(ctx, lock, build, lost)
		if err != nil {
			return err
		}
		err = m.Start(ctx)
		if ctx.Err() != nil {
			if err == nil && lock.cfg.ReleaseOnStop {
				lock.releaseAfterStop(context.WithoutCancel(ctx))
			}
			return err
		}
		if err == nil || err.Error() != errLeaderElectionLost {
			return err
		}
		if err := lock.waitOutTerm(ctx); err != nil {
			return err
		}
		lost = true
	}
}

// rebuildFor bounds how long RunManager retries building a manager after a lost lock.
const rebuildFor = 30 * time.Second

// buildManager builds the next manager. After a lost lock (again) a failure is retried every
// half second for up to rebuildFor, because the lost manager's servers may still hold their
// ports: controller-runtime does not wait for them after a lost lock.
func buildManager(ctx context.Context, lock *ResourceLock, build func() (Manager, error), again bool) (Manager, error) {
	until := time.Now().Add(rebuildFor)
	for {
		m, err := build()
		if err == nil {
			return m, nil
		}
		if !again || time.Now().After(until) {
			return nil, fmt.Errorf("leadership: build manager: %w", err)
		}
		lock.e.log().Info("building the next manager failed; retrying", "error", err.Error())
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("leadership: build manager: %w (then %w)", err, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// waitOutTerm waits until the newest confirmed term's validity has passed, and logs why.
func (l *ResourceLock) waitOutTerm(ctx context.Context) error {
	left := time.Duration(0)
	if t := l.lastTerm(); t != nil {
		left = max(t.deadline.sub(now()), 0)
	}
	l.e.log().Info("lost the lock; campaigning again once the term's validity has passed", "wait", left.Round(time.Millisecond))
	timer := time.NewTimer(left)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrLost, ctx.Err())
	case <-timer.C:
		return nil
	}
}

// releaseAfterStop releases the newest confirmed term once the manager has stopped, if the
// lock still names this pod with it; failures are logged (the controller then ends the term
// after the lock delay).
func (l *ResourceLock) releaseAfterStop(ctx context.Context) {
	if err := l.Release(ctx); err != nil && !errors.Is(err, ErrNotLeading) {
		l.e.log().Info("release after the manager stopped failed", "error", err.Error())
	}
}

// Release confirms to the controller that this pod's work under its newest term has
// stopped: it patches the holder-release annotation (as Elector.Release does) when a
// consistent read still shows the lock naming this pod with that token, Held or Releasing,
// and returns ErrNotLeading otherwise. Call it only once nothing acts under the token any
// more: after the manager's Start returned nil (RunManager with ReleaseOnStop does this).
// Valid() is false from the call on, and the token is never led again.
func (l *ResourceLock) Release(ctx context.Context) error {
	t := l.lastTerm()
	if t == nil {
		return ErrNotLeading
	}
	l.led.Store(nil)
	lock, err := l.e.get(ctx)
	if err != nil {
		return err
	}
	if lock == nil {
		return ErrNotLeading
	}
	st := &lock.Status
	if !(view{uid: st.HolderUID, token: st.FencingToken, phase: st.Phase}).names(l.cfg.Identity, t.token) {
		return ErrNotLeading
	}
	l.e.released.Store(max(l.e.released.Load(), t.token))
	return l.e.sendRelease(ctx, t.token)
}
