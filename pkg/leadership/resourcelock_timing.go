package leadership

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// What client-go shows of the manager's timings, and what the lock does with it. client-go's
// renewal loop (leaderelection.go renew) runs rounds: each round has a context of RenewDeadline
// and polls every RetryPeriod until an Update succeeds; the next round starts RetryPeriod after
// a round returned. So while client-go renews (between its "became leader" and "stopped
// leading" events), what is left of a context's deadline is a lower bound of RenewDeadline,
// and the gap from a successful Update to the start of the next round (its deadline minus
// RenewDeadline) is RetryPeriod plus scheduling delay. Every Update's record carries
// LeaseDuration.

// timings returns the manager's timings as the lock judges renewals: with ExactTimings the
// configured ones, or longer ones client-go has shown; without, the longest the LeaseDuration
// client-go's records carry allows (its seconds are truncated: the LeaseDuration is below one
// more second than they say).
func (l *ResourceLock) timings() timings {
	if !l.cfg.ExactTimings {
		ld := l.cfg.LeaseDuration.Truncate(time.Second) + time.Second // before any record: as if it carried the configured one
		if s := l.leaseSeen.Load(); s > 0 {
			ld = time.Duration(s+1) * time.Second
		}
		return timings{renewDeadline: ld, retryPeriod: ld * 5 / 6, bound: true}
	}
	return timings{
		renewDeadline: max(l.cfg.RenewDeadline, time.Duration(l.renewSeen.Load())),
		retryPeriod:   max(l.cfg.RetryPeriod, time.Duration(l.retrySeen.Load())),
	}
}

// checkLeaseDuration records the LeaseDuration an Update's record carries and, with
// ExactTimings, refuses another than configured: the manager was given other timings.
func (l *ResourceLock) checkLeaseDuration(ler resourcelock.LeaderElectionRecord) error {
	l.leaseSeen.Store(int64(ler.LeaseDurationSeconds))
	if !l.cfg.ExactTimings || ler.LeaseDurationSeconds == int(l.cfg.LeaseDuration/time.Second) {
		return nil
	}
	return l.mismatched(fmt.Errorf("%w: the manager's LeaseDuration is %ds, ResourceLockConfig.LeaseDuration %v: give both the same LeaseDuration, RenewDeadline and RetryPeriod (crmanager.Options does)",
		ErrTimingsMismatch, ler.LeaseDurationSeconds, l.cfg.LeaseDuration))
}

// noteRound learns from a renewal round's context (see above); it does nothing outside
// client-go's renewal loop, where the context is the caller's. It reports a RenewDeadline or
// RetryPeriod longer than configured (ReadyzCheck fails from then on).
func (l *ResourceLock) noteRound(ctx context.Context) {
	dl, ok := ctx.Deadline()
	if !ok || !l.renewing.Load() || !l.cfg.ExactTimings {
		return
	}
	if left := time.Until(dl); int64(left) > l.renewSeen.Load() {
		l.renewSeen.Store(int64(left)) // one caller at a time: client-go's loop
	}
	if last := l.lastOK.Load(); last != nil {
		// The first round follows the acquisition at once (a gap near zero); the longest of the
		// recent gaps is RetryPeriod as client-go waits it, pauses of this process included.
		roundStart := dl.Add(-l.timings().renewDeadline)
		if gap := roundStart.Sub(*last); gap > 0 {
			l.noteGap(gap)
		}
	}
	t := l.timings()
	switch {
	case t.renewDeadline > l.cfg.RenewDeadline+l.cfg.RetryPeriod/2:
		_ = l.mismatched(fmt.Errorf("%w: the manager's RenewDeadline is at least %v, ResourceLockConfig.RenewDeadline %v: set them equal (renewals now assume the longer)",
			ErrTimingsMismatch, t.renewDeadline.Round(time.Millisecond), l.cfg.RenewDeadline))
	case t.retryPeriod > l.cfg.RetryPeriod*3/2+200*time.Millisecond:
		_ = l.mismatched(fmt.Errorf("%w: the manager's RetryPeriod is about %v, ResourceLockConfig.RetryPeriod %v: set them equal (renewals now assume the longer)",
			ErrTimingsMismatch, t.retryPeriod.Round(time.Millisecond), l.cfg.RetryPeriod))
	}
}

// gapWindow is how many recent gaps between renewal rounds bound RetryPeriod.
const gapWindow = 8

// noteGap records one gap between a renewal and the next round's start, and sets retrySeen to
// the longest of the recent ones.
func (l *ResourceLock) noteGap(gap time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.gaps = append(l.gaps, gap)
	if len(l.gaps) > gapWindow {
		l.gaps = l.gaps[1:]
	}
	longest := time.Duration(0)
	for _, g := range l.gaps {
		longest = max(longest, g)
	}
	l.retrySeen.Store(int64(longest))
}

// mismatched records err for ReadyzCheck, logs it the first time, and returns it.
func (l *ResourceLock) mismatched(err error) error {
	l.mu.Lock()
	first := l.mismatch == nil
	l.mismatch = err
	l.mu.Unlock()
	if first {
		l.e.log().Info(err.Error())
	}
	return err
}
