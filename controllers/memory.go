package controllers

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// memory holds what this replica observed itself, measured on its own monotonic clock.
// Nothing here comes from another machine's timestamps, and nothing survives a restart: a
// new replica starts every wait afresh from its own first observation, which only lengthens
// waits.
type memory struct {
	mu       sync.Mutex
	now      func() time.Time
	locks    map[types.UID]*lockMemory
	attested map[types.UID]time.Time // pod UIDs seen with attested termination
}

// lockMemory is one lock's observations.
type lockMemory struct {
	// releasingToken and releasingSince: the term (by token) whose Releasing this replica saw
	// acknowledged or first observed, and when.
	releasingToken int64
	releasingSince time.Time
	// eligibleSince: while Releasing, when the holder was first seen eligible again
	// (continuously since); zero when it is not.
	eligibleSince time.Time
	// returns: when the lock went back to Held from Releasing.
	returns []time.Time
	// preferredUID and preferredSince: the preferred pod and since when it has been seen
	// continuously eligible.
	preferredUID   types.UID
	preferredSince time.Time
	// countWritten: when status.eligibleCandidates was last written.
	countWritten time.Time
	// unheldSince: when this replica ended the last term (for the time-without-holder metric).
	unheldSince time.Time
}

func newMemory() *memory {
	return &memory{now: time.Now, locks: map[types.UID]*lockMemory{}, attested: map[types.UID]time.Time{}}
}

// with runs f on the lock's memory under the lock.
func (m *memory) with(uid types.UID, f func(lm *lockMemory, now time.Time)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	lm := m.locks[uid]
	if lm == nil {
		lm = &lockMemory{}
		m.locks[uid] = lm
	}
	f(lm, m.now())
}

// forget drops a deleted lock.
func (m *memory) forget(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.locks, uid)
}

// releasingFor returns how long the term with token has been Releasing as this replica
// knows it, starting the clock now if this is the first observation.
func (m *memory) releasingFor(uid types.UID, token int64) (d time.Duration) {
	m.with(uid, func(lm *lockMemory, now time.Time) {
		if lm.releasingToken != token || lm.releasingSince.IsZero() {
			lm.releasingToken, lm.releasingSince, lm.eligibleSince = token, now, time.Time{}
		}
		d = now.Sub(lm.releasingSince)
	})
	return d
}

// releasingAcknowledged starts the wait for the term with token at the acknowledgement of
// the status write that published Releasing.
func (m *memory) releasingAcknowledged(uid types.UID, token int64) {
	m.with(uid, func(lm *lockMemory, now time.Time) {
		lm.releasingToken, lm.releasingSince, lm.eligibleSince = token, now, time.Time{}
	})
}

// holderEligibleFor returns how long the Releasing holder has been continuously eligible,
// or 0 (and resets) when it is not.
func (m *memory) holderEligibleFor(uid types.UID, isEligible bool) (d time.Duration) {
	m.with(uid, func(lm *lockMemory, now time.Time) {
		if !isEligible {
			lm.eligibleSince = time.Time{}
			return
		}
		if lm.eligibleSince.IsZero() {
			lm.eligibleSince = now
		}
		d = now.Sub(lm.eligibleSince)
	})
	return d
}

// mayReturn reports whether a Releasing lock may go back to Held: at most once per
// lockDelay window, and not at all once it bounced twice within 4 x lockDelay.
func (m *memory) mayReturn(uid types.UID, lockDelay time.Duration) (ok bool) {
	m.with(uid, func(lm *lockMemory, now time.Time) {
		recent := 0
		ok = true
		for _, t := range lm.returns {
			age := now.Sub(t)
			if age < lockDelay {
				ok = false
			}
			if age < 4*lockDelay {
				recent++
			}
		}
		if recent >= 2 {
			ok = false
		}
	})
	return ok
}

// returned records a return to Held and clears the Releasing clock.
func (m *memory) returned(uid types.UID) {
	m.with(uid, func(lm *lockMemory, now time.Time) {
		var keep []time.Time
		for _, t := range lm.returns {
			if now.Sub(t) < time.Hour {
				keep = append(keep, t)
			}
		}
		keep = append(keep, now)
		lm.returns = keep
		lm.releasingToken, lm.releasingSince, lm.eligibleSince = 0, time.Time{}, time.Time{}
	})
}

// termEnded clears the Releasing clock after a term ended.
func (m *memory) termEnded(uid types.UID) {
	m.with(uid, func(lm *lockMemory, now time.Time) {
		lm.releasingToken, lm.releasingSince, lm.eligibleSince = 0, time.Time{}, time.Time{}
		lm.returns = nil
		lm.unheldSince = now
	})
}

// granted returns how long the lock was without a holder, if this replica ended the last
// term, and clears it.
func (m *memory) granted(uid types.UID) (d time.Duration, ok bool) {
	m.with(uid, func(lm *lockMemory, now time.Time) {
		if !lm.unheldSince.IsZero() {
			d, ok = now.Sub(lm.unheldSince), true
			lm.unheldSince = time.Time{}
		}
	})
	return d, ok
}

// preferredEligibleFor returns how long the preferred pod (by UID) has been continuously
// eligible, or 0 (and resets) when it is not.
func (m *memory) preferredEligibleFor(lockUID, podUID types.UID, isEligible bool) (d time.Duration) {
	m.with(lockUID, func(lm *lockMemory, now time.Time) {
		if !isEligible || podUID == "" {
			lm.preferredUID, lm.preferredSince = "", time.Time{}
			return
		}
		if lm.preferredUID != podUID {
			lm.preferredUID, lm.preferredSince = podUID, now
		}
		d = now.Sub(lm.preferredSince)
	})
	return d
}

// countWriteDue reports whether eligibleCandidates may be written now (at most once per
// debounce), and if not, how long until it may.
func (m *memory) countWriteDue(uid types.UID, debounce time.Duration) (ok bool, wait time.Duration) {
	m.with(uid, func(lm *lockMemory, now time.Time) {
		age := now.Sub(lm.countWritten)
		ok = lm.countWritten.IsZero() || age >= debounce
		if !ok {
			wait = debounce - age
		}
	})
	return ok, wait
}

// countWrittenNow records a write of eligibleCandidates.
func (m *memory) countWrittenNow(uid types.UID) {
	m.with(uid, func(lm *lockMemory, now time.Time) { lm.countWritten = now })
}

// attest records that a pod's termination was attested (seen in a pod event, even if the
// object is deleted before the lock is reconciled).
func (m *memory) attest(podUID types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	m.attested[podUID] = now
	for uid, t := range m.attested { // bounded: attestations matter for minutes at most
		if now.Sub(t) > time.Hour {
			delete(m.attested, uid)
		}
	}
}

// wasAttested reports whether the pod's termination was attested.
func (m *memory) wasAttested(podUID types.UID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.attested[podUID]
	return ok
}
