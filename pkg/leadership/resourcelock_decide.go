package leadership

import (
	"errors"
	"fmt"
	"time"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

var (
	// ErrNotGranted is wrapped by the error ResourceLock.Update returns when the newest
	// consistent read does not show the lock Held by this pod under a token it may lead.
	ErrNotGranted = errors.New("leadership: the lock is not granted to this pod")
	// ErrTimingsRefused is wrapped by the error ResourceLock.Update returns when the lock's
	// term lease is too short for the manager's timings: a renewal could let client-go go on
	// leading after the term's validity ended.
	ErrTimingsRefused = errors.New("leadership: the lock's term lease is too short for the manager's timings")
	// ErrTimingsMismatch is wrapped by the error ResourceLock.Update returns, and ReadyzCheck
	// reports, when client-go shows other timings than ResourceLockConfig's.
	ErrTimingsMismatch = errors.New("leadership: the manager's leader election timings differ from the lock's")
	// errConfirmedLate: the read confirmed the term, but took so long that less than the
	// manager's belief window is left; the next read may succeed.
	errConfirmedLate = errors.New("leadership: the read confirmed the term too late to renew")
	// errWaitingOut: RunManager waits out a lost term's validity before a new manager leads.
	errWaitingOut = errors.New("leadership: waiting out the validity of the term the previous manager lost")
)

// timings are client-go's renewal timings as the manager runs them, or (bound) the longest
// the manager's LeaseDuration allows.
type timings struct {
	renewDeadline time.Duration
	retryPeriod   time.Duration
	bound         bool
}

// belief is how long client-go may go on leading after a renewal succeeded: its next renewal
// round starts RetryPeriod after this one returned and gives up RenewDeadline after that.
func (t timings) belief() time.Duration { return t.renewDeadline + t.retryPeriod }

// renewal is what one consistent read means for the manager's claim to lead.
type renewal struct {
	token    int64
	deadline instant // the term's validity: the read's send time + lease - margin
	err      error   // why the claim fails; nil when the manager may lead
}

// decideRenewal judges a consistent read of lock sent at sent and answered at done, for a
// pod whose grant is g, under the manager's timings t and margin m(lease). A renewal succeeds
// only when the validity it confirms outlasts everything client-go does with it: from done,
// the manager may believe it leads for t.belief() more, so at least that much validity must be
// left when the read returns.
// No term is confirmed before notBefore (0: no wait).
func decideRenewal(lock *lockv1.DistributedLock, g grant, refused error, margin time.Duration, t timings, sent, done, notBefore instant) renewal {
	if lock == nil {
		return renewal{err: fmt.Errorf("%w: the lock does not exist", ErrNotGranted)}
	}
	st := &lock.Status
	switch g {
	case grantLead:
	case grantReleased, grantResend:
		return renewal{err: fmt.Errorf("%w: this pod released term %d", ErrNotGranted, st.FencingToken)}
	case grantAbandoned:
		return renewal{err: fmt.Errorf("%w: this process abandoned term %d", ErrNotGranted, st.FencingToken)}
	default:
		return renewal{err: fmt.Errorf("%w: %s", ErrNotGranted, describeStatus(st))}
	}
	if refused != nil {
		return renewal{err: refused}
	}
	lease := time.Duration(st.TermLeaseSeconds) * time.Second
	if lease-margin <= t.belief() {
		return renewal{err: fmt.Errorf("%w: termLeaseSeconds %v minus the margin %v leaves %v, not more than %s: %s",
			ErrTimingsRefused, lease, margin, lease-margin, t, remedy(t, margin))}
	}
	if done < notBefore {
		return renewal{err: fmt.Errorf("%w: %v more", errWaitingOut, notBefore.Sub(done).Round(time.Millisecond))}
	}
	deadline := sent.Add(lease - margin)
	if left := deadline.Sub(done); left < t.belief() {
		return renewal{err: fmt.Errorf("%w: %v of validity left, RenewDeadline + RetryPeriod need %v", errConfirmedLate, left.Round(time.Millisecond), t.belief())}
	}
	return renewal{token: st.FencingToken, deadline: deadline}
}

// capRenewal applies the global bound of a Global lock to the renewal r of a read answered at
// done: a refusal refuses it (ErrNotGranted while the pod waits for rounds, ErrGlobalRefused
// for good), and the deadline is the earlier of r's and until, which must still leave
// t.belief() of validity, as decideRenewal requires of its own.
func capRenewal(r renewal, until instant, why globalRefusal, t timings, done instant) renewal {
	if r.err != nil {
		return r
	}
	if why != globalOK {
		if err := globalRefusalErr(why, r.token); err != nil {
			return renewal{err: err}
		}
		return renewal{err: fmt.Errorf("%w: the global bound: %s (term %d)", ErrNotGranted, why, r.token)}
	}
	r.deadline = min(r.deadline, until)
	if left := r.deadline.Sub(done); left < t.belief() {
		return renewal{err: fmt.Errorf("%w: %v of global validity left, RenewDeadline + RetryPeriod need %v", errConfirmedLate, left.Round(time.Millisecond), t.belief())}
	}
	return r
}

// String says what t is, for errors.
func (t timings) String() string {
	if t.bound {
		return fmt.Sprintf("the %v client-go may lead after a renewal under the manager's LeaseDuration below %v (timings unknown: no ExactTimings)",
			t.belief().Round(time.Millisecond), t.renewDeadline)
	}
	return fmt.Sprintf("RenewDeadline %v + RetryPeriod %v", t.renewDeadline.Round(time.Millisecond), t.retryPeriod.Round(time.Millisecond))
}

// remedy says how to make a lease fit the timings t: the lease that would, when the API
// accepts it (at most 3600 s), and shorter timings in any case.
func remedy(t timings, margin time.Duration) string {
	// The margin grows with the lease (L/50 above 100 s): solve L - max(margin, L/50) > belief.
	need := max(t.belief()+margin, t.belief()*50/49) + time.Second
	need = need.Truncate(time.Second)
	shorter := "shorten the manager's RenewDeadline and RetryPeriod (and ResourceLockConfig's)"
	if t.bound {
		shorter = "declare the manager's exact timings (crmanager.Options), or shorten its LeaseDuration"
	}
	if need > lockv1.MaxLeaseDurationSeconds*time.Second {
		return "no lease up to the API's maximum fits: " + shorter
	}
	return fmt.Sprintf("set spec.leaseDurationSeconds to %d or more, or %s", int(need/time.Second), shorter)
}

// describeStatus says who holds the lock, for errors and logs.
func describeStatus(st *lockv1.DistributedLockStatus) string {
	switch {
	case st.Phase == "":
		return "the lock has no status yet"
	case st.Phase == lockv1.PhaseHeld && st.HolderUID == "" && st.GlobalCluster != "":
		return fmt.Sprintf("held by cluster %s (global token %d)", st.GlobalCluster, st.FencingToken)
	case st.Phase == lockv1.PhaseHeld:
		return fmt.Sprintf("held by %s (token %d)", st.Holder, st.FencingToken)
	case st.Holder != "":
		return fmt.Sprintf("phase %s, last holder %s (token %d)", st.Phase, st.Holder, st.FencingToken)
	default:
		return "phase " + string(st.Phase)
	}
}

// isNotGranted reports whether err says the lock is not granted to this pod.
func isNotGranted(err error) bool { return errors.Is(err, ErrNotGranted) }

// isLate reports whether err says the read confirmed the term too late.
func isLate(err error) bool { return errors.Is(err, errConfirmedLate) }
