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

var (
	// ErrStillLeading is returned by ResourceLock.Release while client-go leads with the lock.
	ErrStillLeading = errors.New("leadership: a manager still leads with this lock: release after its Start returned")
	// ErrUncleanStop is returned by ResourceLock.Release when client-go stopped leading after a
	// read that did not confirm the term: the runnables may still run, and the controller ends
	// the term after the lock delay.
	ErrUncleanStop = errors.New("leadership: client-go stopped leading after a read that did not confirm the term, so controller-runtime may not have waited for the runnables: no release; the controller ends the term after the lock delay")
)

// RunManager runs managers built by build, one at a time, until ctx ends. When a manager loses
// the lock (its Start returns controller-runtime's "leader election lost"), RunManager builds
// a new manager at once, which campaigns again: this is the option to re-campaign instead of
// exiting. Without it, a manager that lost the lock returns from Start and the process should
// exit, as controller-runtime documents. The new manager serves its probes and syncs its caches
// at once, but lock confirms no term to it before the lost term's validity has passed, by when
// the lost manager's controllers must have returned: that is the rule that makes a lost lock
// safe at all (reconcilers return promptly once their context is cancelled; controller-runtime
// does not wait for them after a lost lock). Each manager must use lock as its
// LeaderElectionResourceLockInterface. Any other error from Start is returned, and so is an
// error from build (after a lost lock, only once retries for 30 s failed: the lost manager's
// servers may still hold their ports for a moment). A build that fails after it created its
// manager leaves that manager's probe and metrics ports bound for good (controller-runtime
// binds them in New and frees them only in Start), so every retry fails: let build fail
// only before it calls ctrl.NewManager, and use crmanager.Options, which sets
// SkipNameValidation (controller-runtime otherwise refuses the same controller names in the
// rebuilt manager).
//
// When ctx ends, RunManager returns what Start returned. With lock.ReleasesOnStop() it first
// confirms the end of the term to the controller (Release), which then grants the next
// candidate without the lock delay, but only when Start returned nil and client-go stopped
// leading because the manager stopped it (its newest read had confirmed the term): a read
// that did not, first, means controller-runtime may not have waited for the runnables. The
// release is off for a lock made by NewResourceLock (RunManager cannot see the manager's
// GracefulShutdownTimeout, and with 0 Start returns before the runnables did): set
// ResourceLockConfig.ReleaseOnStop for a manager whose timeout is not 0, or make manager
// options and lock with crmanager.Options, which does so.
//
// controller-runtime reports a lost lock only by that error's text (v0.25); a wrapped or
// reworded error is returned instead of re-campaigning, which fails safe.
func RunManager(ctx context.Context, lock *ResourceLock, build func() (Manager, error)) error {
	lost := false
	for {
		m, err := buildManager(ctx, lock, build, lost)
		if err != nil {
			return err
		}
		err = m.Start(ctx)
		if ctx.Err() != nil {
			if err == nil && lock.ReleasesOnStop() {
				lock.releaseAfterStop(context.WithoutCancel(ctx))
			}
			return err
		}
		if err == nil || err.Error() != errLeaderElectionLost {
			return err
		}
		lock.waitOutTerm()
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

// waitOutTerm makes the lock confirm no term before the newest confirmed term's validity has
// passed, and logs the wait.
func (l *ResourceLock) waitOutTerm() {
	t := l.lastTerm()
	if t == nil {
		return
	}
	l.notBefore.Store(int64(t.deadline))
	l.e.log().Info("lost the lock; campaigning again, leading no sooner than the lost term's validity allows",
		"wait", max(t.deadline.Sub(now()), 0).Round(time.Millisecond))
}

// releaseAfterStop releases the newest confirmed term once the manager has stopped, if the
// lock still names this pod with it; failures are logged (the controller then ends the term
// after the lock delay).
func (l *ResourceLock) releaseAfterStop(ctx context.Context) {
	if err := l.Release(ctx); err != nil && !errors.Is(err, ErrNotLeading) {
		l.e.log().Info("release not sent", "error", err.Error())
	}
}

// Release confirms to the controller that this pod's work under its newest term has
// stopped: it patches the holder-release annotation (as Elector.Release does) when a
// consistent read still shows the lock naming this pod with that token, Held or Releasing,
// and returns ErrNotLeading otherwise. The controller then grants the next candidate without
// the lock delay. Call it once the manager's Start returned nil after its context ended
// (RunManager does this when ReleasesOnStop); it refuses, with ErrStillLeading, while client-go
// leads with the lock (it cannot end the manager's term, and client-go would go on leading
// for up to RenewDeadline + RetryPeriod), and with ErrUncleanStop when client-go stopped
// leading after a read that did not confirm the term: controller-runtime then stops waiting
// for the runnables, so Start's nil does not mean they returned. Release and Update exclude
// each other: a term an Update confirms is not released under it, and a released token is
// never led again. Valid() is false from the call on. The patch applies only to the object
// (UID) the read showed: a lock deleted and created again under its name after that read is
// left as it is, and Release returns an error wrapping ErrNotLeading.
func (l *ResourceLock) Release(ctx context.Context) error {
	l.rw.Lock()
	defer l.rw.Unlock()
	switch {
	case l.claimed.Load():
		return ErrStillLeading
	case !l.cleanStop.Load():
		return ErrUncleanStop
	}
	t := l.lastTerm()
	if t == nil || t.token <= l.e.abandoned.load(t.lin) {
		return ErrNotLeading // an abandoned term is never released
	}
	l.led.Store(nil)
	lock, err := l.e.get(ctx)
	if err != nil {
		return err
	}
	if lock == nil {
		return ErrNotLeading
	}
	st := &inClusterView(lock).Status
	if !(view{uid: st.HolderUID, token: st.FencingToken, lin: lineageOf(lock), phase: st.Phase}).names(t.lin, l.cfg.Identity, t.token) {
		return ErrNotLeading // another lineage's token is another grant, whatever its number
	}
	l.e.released.raise(t.lin, t.token)
	return l.e.sendRelease(ctx, t.lin, t.token, lock.UID) // on the object this read showed only
}
