package leadership

import (
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// The pod-side bound of a global lock (spec.scope Global, issue 21; the rule and its proof:
// docs/global.md, R5). The decision loop and the ResourceLock record a globalRead per
// consistent read of a Global lock (globalReads, global_reads.go) and lead only while now()
// is before globalValidUntil.

// minGlobalMargin is the smallest margin m of the global bound; m is also at least D/50, which
// covers clock-rate drift of up to 1% between the pod and the other cluster's manager
// (docs/global.md, "The model": clock rates).
const minGlobalMargin = 2 * time.Second

// globalRead is one observation of the lock, as the global bound needs it.
type globalRead struct {
	// sent is the pod's clock before the request was sent (for a watch event: when it
	// arrived; it is never used as a send time).
	sent instant
	// received is the pod's clock after the answer arrived. Only a real-time order between
	// two reads can show a round regression: a read sent after another's answer was received
	// (received < sent, one clock) was linearized after it, so it cannot show a lower round on
	// the same object. Two reads in flight at once are linearized in either order, whatever
	// their send times.
	received instant
	// consistent: a consistent read (an uncached GET with resourceVersion unset). A cached
	// read or a watch event may show a state older than its time, so it supplies neither
	// the send time S nor the round r.
	consistent bool
	// lockUID is the lock object's UID: rounds are compared only within one object (a lock
	// deleted and created again starts its rounds over).
	lockUID types.UID
	// round is status.globalRound (0: none yet) and roundToken the token it vouches for.
	round      int64
	roundToken int64
	// heldToken is the token of the term the read shows Held by this pod (0: none).
	heldToken int64
	// delay is the lock delay D that the read's round publishes (the grant's etcd record
	// carries it; the other cluster waits at least this long).
	delay time.Duration
}

// globalRefusal says why the global bound does not let the pod lead; globalOK when it does.
type globalRefusal int

const (
	globalOK globalRefusal = iota
	// globalNoRound: the newest consistent read does not show the term Held by this pod, or
	// no consistent read of that object shows a round vouching for its token.
	globalNoRound
	// globalNoEarlier: no consistent read of the same object shows a round at or below r-2,
	// so no confirmation of the grant is known to be later than any send time.
	globalNoEarlier
	// globalRegressed: a later consistent read of the same object showed a lower round than
	// an earlier one. Rounds only go up by one (the CRD's rule), so the object was restored or
	// replaced under the same UID; nothing it shows is trusted.
	globalRegressed
	// globalBadDelay: the round publishes no lock delay, or one not above the margin.
	globalBadDelay
)

// String names the refusal for logs and test messages.
func (g globalRefusal) String() string {
	switch g {
	case globalOK:
		return "ok"
	case globalNoRound:
		return "no round vouches for the term"
	case globalNoEarlier:
		return "no consistent read shows round r-2 or below"
	case globalRegressed:
		return "round went down"
	case globalBadDelay:
		return "lock delay not above the margin"
	}
	return "unknown"
}

// globalMargin is m for lock delay D: max(2 s, D/50, configured).
func globalMargin(delay, configured time.Duration) time.Duration {
	return max(minGlobalMargin, delay/50, configured)
}

// globalDeadline is the global bound of the term of token: S + D - m, where r is the highest
// round that a consistent read of the lock showed vouching for token while Held by this pod,
// S the send time of the newest consistent read of the same object that showed a round at or
// below r-2, D the lowest delay any consistent read of that object showed with a round
// vouching for token (review finding L2: the Status rule ties D to the token, so every such
// read shows the same D; a read that shows another is no reason to wait less, only more), and
// m globalMargin(D, margin). The
// pod leads only while now() is before it. reads are in the order they were sent (a pod
// sends one read at a time); the bound needs only, per object, the newest read of each of
// the last few rounds, so the caller may drop older ones.
//
// Why r-2: round r was written after a confirmation of the grant sent after round r-1 was
// seen committed; a read that showed r-2 or below was answered before r-1 committed, so that
// confirmation, and the grant it confirmed, came after S. A read that showed r-1 proves
// nothing: round r's write may have been sent long before it and landed late.
func globalDeadline(reads []globalRead, token int64, margin time.Duration) (instant, globalRefusal) {
	uid, r, found := vouchingRound(reads, token)
	if !found {
		return 0, globalNoRound
	}
	delay := lowestDelay(reads, uid, token)
	m := globalMargin(delay, margin)
	if delay <= m {
		return 0, globalBadDelay
	}
	if roundsRegressed(reads, uid) {
		return 0, globalRegressed
	}
	var s instant
	have := false
	for i := range reads {
		o := &reads[i]
		if !o.consistent || o.lockUID != uid {
			continue
		}
		if o.round <= r-2 && (!have || o.sent > s) {
			s, have = o.sent, true
		}
	}
	if !have {
		return 0, globalNoEarlier
	}
	return s.Add(delay - m), globalOK
}

// roundsRegressed reports whether two consistent reads of object uid show its rounds going
// down in real time: one read sent after another's answer was received (by this process's
// clock) shows a lower round. Send order alone is no such order: two reads in flight at once
// may be linearized opposite to it (a read sent earlier showing a higher round than one sent
// later), and their rounds did not go down.
func roundsRegressed(reads []globalRead, uid types.UID) bool {
	for i := range reads {
		a := &reads[i]
		if !a.consistent || a.lockUID != uid {
			continue
		}
		for j := range reads {
			b := &reads[j]
			if b.consistent && b.lockUID == uid && a.received < b.sent && b.round < a.round {
				return true
			}
		}
	}
	return false
}

// vouchingRound finds, among the consistent reads of the object the newest consistent read
// was of, the highest round vouching for token while Held by this pod. It finds none unless
// that newest read shows token Held by this pod: once a read shows the term over, no earlier
// read keeps it. The newest read is newestRead's, by round, not by send order.
func vouchingRound(reads []globalRead, token int64) (types.UID, int64, bool) {
	newest := newestRead(reads)
	if token <= 0 || newest < 0 || reads[newest].heldToken != token {
		return "", 0, false
	}
	uid := reads[newest].lockUID
	var (
		r     int64
		found bool
	)
	for i := range reads {
		o := &reads[i]
		if !o.consistent || o.lockUID != uid || o.round <= 0 || o.roundToken != token || o.heldToken != token {
			continue
		}
		if !found || o.round >= r {
			r, found = o.round, true
		}
	}
	return uid, r, found
}

// newestRead is the index of the newest consistent read, in the order the API server
// linearized them, of the object the last read sent was of; -1 when there is none. Rounds
// only go up on one object, so the read showing the highest round was linearized last,
// whatever the send order: two reads in flight at once may be linearized opposite to it (a
// read sent earlier showing a higher round). Of the reads showing that round, it is the one
// sent last. (A read showing a lower round after another's answer was received is a
// regression, which roundsRegressed refuses.)
func newestRead(reads []globalRead) int {
	last := -1
	for i := range reads {
		if reads[i].consistent {
			last = i
		}
	}
	if last < 0 {
		return -1
	}
	uid := reads[last].lockUID
	newest := -1
	for i := range reads {
		o := &reads[i]
		if !o.consistent || o.lockUID != uid {
			continue
		}
		if n := &reads[max(newest, 0)]; newest < 0 || o.round > n.round || (o.round == n.round && o.sent >= n.sent) {
			newest = i
		}
	}
	return newest
}

// lowestDelay is the lowest delay that a consistent read of object uid showed with a round
// vouching for token (whoever the read showed holding it); vouchingRound found one.
func lowestDelay(reads []globalRead, uid types.UID, token int64) time.Duration {
	var (
		delay time.Duration
		found bool
	)
	for i := range reads {
		o := &reads[i]
		if !o.consistent || o.lockUID != uid || o.round <= 0 || o.roundToken != token {
			continue
		}
		if !found || o.delay < delay {
			delay, found = o.delay, true
		}
	}
	return delay
}

// globalValidUntil is the earlier of the in-cluster bound (S_own + termLeaseSeconds - margin,
// as today) and the global bound; false when the global bound refuses the term.
func globalValidUntil(inCluster instant, reads []globalRead, token int64, margin time.Duration) (instant, globalRefusal) {
	g, why := globalDeadline(reads, token, margin)
	if why != globalOK {
		return 0, why
	}
	return min(inCluster, g), globalOK
}
