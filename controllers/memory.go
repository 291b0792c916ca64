package controllers

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// attestationTTL bounds how long a remembered attestation counts: it only has to bridge the
// moments between a pod event and the reconcile that reads it.
const attestationTTL = 10 * time.Minute

// memory holds what this replica observed itself, measured on its own monotonic clock.
// Nothing here comes from another machine's timestamps, and nothing survives a restart: a
// new replica starts every wait afresh from its own first observation, which only lengthens
// waits. It holds one entry per lock (by lock key), so it is bounded by the number of locks.
type memory struct {
	mu    sync.Mutex
	now   func() time.Time
	locks map[string]*lockMemory
}

// lockMemory is one lock's observations.
type lockMemory struct {
	// uid is the lock object's UID: a lock deleted and created again under the same name
	// starts afresh.
	uid types.UID
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
	// attested: a pod event showed the published holder (attestedPod, in the term with
	// attestedToken) stopped for good, at attestedAt. Only irrevocable states are recorded
	// (a terminal phase or a deletion, with every container terminated), and a later event
	// that shows any container of that pod running drops it.
	attestedPod   types.UID
	attestedToken int64
	attestedAt    time.Time
	// warnedRequest: the release-request annotation value last reported as ignored
	// (release.go), so that it is reported once.
	warnedRequest string
	// written: the resourceVersion of this replica's last write of the lock, whose watch
	// event needs no reconcile.
	written string
	// confirmed is the resourceVersion an uncached read returned after written: a cached
	// copy at it shows this replica's last write (behindOwnWrite).
	confirmed string
	// restartToken and restartAt: the term (by token) the restart fast path granted, and when
	// this replica saw its status write acknowledged (restart.go, restartExcuses).
	restartToken int64
	restartAt    time.Time
}

func newMemory() *memory {
	return &memory{now: time.Now, locks: map[string]*lockMemory{}}
}

// with runs f on the memory of the lock key (object uid) under the lock.
func (m *memory) with(key string, uid types.UID, f func(lm *lockMemory, now time.Time)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	lm := m.locks[key]
	if lm == nil || lm.uid != uid {
		lm = &lockMemory{uid: uid}
		m.locks[key] = lm
	}
	f(lm, m.now())
}

// forget drops a deleted lock.
func (m *memory) forget(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.locks, key)
}

// size is the number of locks remembered.
func (m *memory) size() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.locks)
}

// releasingFor returns how long the term with token has been Releasing as this replica
// knows it, starting the clock now if this is the first observation.
func (m *memory) releasingFor(key string, uid types.UID, token int64) (d time.Duration) {
	m.with(key, uid, func(lm *lockMemory, now time.Time) {
		if lm.releasingToken != token || lm.releasingSince.IsZero() {
			lm.releasingToken, lm.releasingSince, lm.eligibleSince = token, now, time.Time{}
		}
		d = now.Sub(lm.releasingSince)
	})
	return d
}

// notReleasing clears the Releasing clock: the lock was seen in another phase.
func (m *memory) notReleasing(key string, uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if lm := m.locks[key]; lm != nil && lm.uid == uid {
		lm.releasingToken, lm.releasingSince, lm.eligibleSince = 0, time.Time{}, time.Time{}
	}
}

// releasingAcknowledged starts the wait for the term with token at the acknowledgement of
// the status write that published Releasing.
func (m *memory) releasingAcknowledged(key string, uid types.UID, token int64) {
	m.with(key, uid, func(lm *lockMemory, now time.Time) {
		lm.releasingToken, lm.releasingSince, lm.eligibleSince = token, now, time.Time{}
	})
}

// holderEligibleFor returns how long the Releasing holder has been continuously eligible,
// or 0 (and resets) when it is not.
func (m *memory) holderEligibleFor(key string, uid types.UID, isEligible bool) (d time.Duration) {
	m.with(key, uid, func(lm *lockMemory, now time.Time) {
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
func (m *memory) mayReturn(key string, uid types.UID, lockDelay time.Duration) (ok bool) {
	m.with(key, uid, func(lm *lockMemory, now time.Time) {
		ok = mayReturn(lm.returns, now, lockDelay)
	})
	return ok
}

// mayReturn is the rule of memory.mayReturn over the times of earlier returns.
func mayReturn(returns []time.Time, now time.Time, lockDelay time.Duration) bool {
	recent := 0
	for _, t := range returns {
		age := now.Sub(t)
		if age < lockDelay {
			return false
		}
		if age < 4*lockDelay {
			recent++
		}
	}
	return recent < 2
}

// returned records a return to Held and clears the Releasing clock.
func (m *memory) returned(key string, uid types.UID) {
	m.with(key, uid, func(lm *lockMemory, now time.Time) {
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

// restartGranted records that the restart fast path's grant of token was acknowledged now.
func (m *memory) restartGranted(key string, uid types.UID, token int64) {
	m.with(key, uid, func(lm *lockMemory, now time.Time) {
		lm.restartToken, lm.restartAt = token, now
	})
}

// restartGrantFor returns how long ago the restart fast path's grant of token was
// acknowledged on this replica, or 0 when this replica did not see it.
func (m *memory) restartGrantFor(key string, uid types.UID, token int64) (d time.Duration) {
	m.with(key, uid, func(lm *lockMemory, now time.Time) {
		if lm.restartToken == token {
			d = max(now.Sub(lm.restartAt), time.Nanosecond)
		}
	})
	return d
}

// termEnded clears what belonged to the term that ended.
func (m *memory) termEnded(key string, uid types.UID) {
	m.with(key, uid, func(lm *lockMemory, now time.Time) {
		lm.releasingToken, lm.releasingSince, lm.eligibleSince = 0, time.Time{}, time.Time{}
		lm.returns = nil
		lm.attestedPod, lm.attestedToken, lm.attestedAt = "", 0, time.Time{}
		lm.unheldSince = now
	})
}

// granted returns how long the lock was without a holder, if this replica ended the last
// term, and clears it.
func (m *memory) granted(key string, uid types.UID) (d time.Duration, ok bool) {
	m.with(key, uid, func(lm *lockMemory, now time.Time) {
		if !lm.unheldSince.IsZero() {
			d, ok = now.Sub(lm.unheldSince), true
			lm.unheldSince = time.Time{}
		}
	})
	return d, ok
}

// preferredEligibleFor returns how long the preferred pod (by UID) has been continuously
// eligible, or 0 (and resets) when it is not.
func (m *memory) preferredEligibleFor(key string, uid, podUID types.UID, isEligible bool) (d time.Duration) {
	m.with(key, uid, func(lm *lockMemory, now time.Time) {
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
func (m *memory) countWriteDue(key string, uid types.UID, debounce time.Duration) (ok bool, wait time.Duration) {
	m.with(key, uid, func(lm *lockMemory, now time.Time) {
		age := now.Sub(lm.countWritten)
		ok = lm.countWritten.IsZero() || age >= debounce
		if !ok {
			wait = debounce - age
		}
	})
	return ok, wait
}

// countWrittenNow records a write of eligibleCandidates.
func (m *memory) countWrittenNow(key string, uid types.UID) {
	m.with(key, uid, func(lm *lockMemory, now time.Time) { lm.countWritten = now })
}

// attest remembers that a pod event showed the published holder pod of the lock (in the
// term with token) stopped for good. The caller checks the event with attestedTerminated.
func (m *memory) attest(key string, uid, pod types.UID, token int64) {
	m.with(key, uid, func(lm *lockMemory, now time.Time) {
		lm.attestedPod, lm.attestedToken, lm.attestedAt = pod, token, now
	})
}

// unattest drops a remembered attestation of pod: an event showed one of its containers
// running.
func (m *memory) unattest(key string, uid, pod types.UID) {
	m.with(key, uid, func(lm *lockMemory, _ time.Time) {
		if lm.attestedPod == pod {
			lm.attestedPod, lm.attestedToken, lm.attestedAt = "", 0, time.Time{}
		}
	})
}

// wasAttested reports whether the termination of pod, the holder of the lock's term with
// token, was remembered within attestationTTL.
func (m *memory) wasAttested(key string, uid, pod types.UID, token int64) (ok bool) {
	m.with(key, uid, func(lm *lockMemory, now time.Time) {
		ok = pod != "" && lm.attestedPod == pod && lm.attestedToken == token && now.Sub(lm.attestedAt) < attestationTTL
	})
	return ok
}

// wrote records the resourceVersion of this replica's write of the lock.
func (m *memory) wrote(key string, uid types.UID, rv string) {
	m.with(key, uid, func(lm *lockMemory, _ time.Time) { lm.written, lm.confirmed = rv, "" })
}

// behindOwnWrite reports whether this replica wrote the lock and rv is not that write's
// resourceVersion: a cached copy that may not show that write yet (or a later write by
// someone else; resourceVersions are not ordered).
func (m *memory) behindOwnWrite(key string, uid types.UID, rv string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	lm := m.locks[key]
	return lm != nil && lm.uid == uid && lm.written != "" && lm.written != rv && lm.confirmed != rv
}

// confirm records that an uncached read after this replica's last write returned rv
// (review 22e: after another's write every reconcile read the lock uncached again).
func (m *memory) confirm(key string, uid types.UID, rv string) {
	m.with(key, uid, func(lm *lockMemory, _ time.Time) { lm.confirmed = rv })
}

// ownWrite reports whether rv is the resourceVersion of this replica's last write of the
// lock: its watch event shows nothing the writer did not know.
func (m *memory) ownWrite(key string, uid types.UID, rv string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	lm := m.locks[key]
	return lm != nil && lm.uid == uid && rv != "" && lm.written == rv
}
