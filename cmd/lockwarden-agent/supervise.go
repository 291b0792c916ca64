package main

import (
	"fmt"
	"time"
)

// recheck is how often a supervisor that has not started its child yet checks whether the
// term has enough validity left to start it.
const recheck = 50 * time.Millisecond

// step is what the supervisor does next.
type step int

const (
	// stepWait: not running, and not enough validity left to start: look again later.
	stepWait step = iota
	// stepStart: start the child.
	stepStart
	// stepKeep: the child keeps running; look again when only grace is left.
	stepKeep
	// stepStop: stop the child (SIGTERM now, SIGKILL after the grace).
	stepStop
)

// String names the step.
func (s step) String() string {
	switch s {
	case stepWait:
		return "wait"
	case stepStart:
		return "start"
	case stepKeep:
		return "keep"
	case stepStop:
		return "stop"
	}
	return fmt.Sprintf("step(%d)", int(s))
}

// decide is the supervisor's rule, from the validity left in the term (ValidUntil - now; zero
// or negative when the pod does not lead) and whether the child runs. A running child keeps
// running while more than grace is left, so it gets SIGTERM at ValidUntil - grace and SIGKILL
// by ValidUntil; a child starts only with more than twice grace left, so a start is always
// followed by at least grace of running before its stop (and it starts once per token: the
// supervisor abandons a token whose child it stopped). It returns when to look again (for
// stepKeep and stepWait).
func decide(running bool, left, grace time.Duration) (step, time.Duration) {
	if running {
		if left > grace {
			return stepKeep, left - grace
		}
		return stepStop, 0
	}
	if left > 2*grace {
		return stepStart, 0
	}
	return stepWait, recheck
}

// refuseTerm is why a term that starts with left of validity cannot run the child, or nil.
// Reads confirm a term every termLeaseSeconds/3 and extend it to termLeaseSeconds - margin
// (at least 3/4 of the lease) after their send time, so a term starts with about L - margin
// of validity and is confirmed again when at least (L - margin) - L/3 is left. A grace of half
// the starting validity or more would have the child signalled between two confirmations of
// a healthy term; such a term is refused instead, and readiness fails while it stands.
func refuseTerm(left, grace time.Duration) error {
	if left <= 2*grace {
		return fmt.Errorf("term refused: its validity %v is not more than twice --grace %v: lower --grace or raise spec.leaseDurationSeconds",
			left.Round(time.Millisecond), grace)
	}
	return nil
}

// killTime is when SIGKILL goes out for a stop that starts at now: after the grace, and
// killLead before the last ValidUntil known (the zero Time: none known) at the latest.
func killTime(now, validUntil time.Time, grace time.Duration) time.Time {
	at := now.Add(grace)
	if !validUntil.IsZero() {
		if latest := validUntil.Add(-killLead); latest.Before(at) {
			at = latest
		}
	}
	return at
}
