package leadership

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// ErrGlobalRefused is wrapped by the error ReadyzCheck reports, and ResourceLock.Update
// returns, while a Global lock's grant to this pod is refused for good by the global bound
// (docs/global.md R5): the lock's rounds went down (a restored store: nothing that object
// shows is trusted again by this process), or its round publishes no lock delay above the
// margin. Waiting for the rounds that vouch for a new grant is not a refusal.
var ErrGlobalRefused = errors.New("leadership: the global bound refuses the term")

// globalKeep is how many reads globalReads keeps. Reads that repeat the previous one's round
// are merged, so the kept reads span at least globalKeep-1 round steps; the bound needs three
// (rounds r, r-1 and the newest read at or below r-2).
const globalKeep = 16

// globalReads is the record of one Global lock's consistent reads that the global bound is
// computed from: only consistent reads ever enter it (a cached read or a watch event never
// supplies S or r), of the current lock object only, in send order, bounded. Dropping a read
// never lengthens the bound: it can only remove a round r or a send time S, or (as the
// newest) say nothing the next read does not.
type globalReads struct {
	reads []globalRead
	// regressed is the object whose rounds went down: every term on it is refused from then
	// on, by this process (a pod started after it judges the object afresh).
	regressed types.UID
}

// add records o, a consistent read; reads are added in the order their answers arrived. A
// read of another object than the kept ones replaces them (rounds are compared only within
// one object, C5); a read that shows a lower round than one whose answer arrived before it
// was sent, or the other way round (roundsRegressed: a real-time order), marks the object
// regressed. Reads are kept in send order; two reads in flight at once may show their rounds
// out of that order, which is no regression. A read that shows what the previous one
// showed (round, token, holder) replaces it: only the newest read of a round counts as S. The
// lowest delay shown for a token survives every merge and drop (finding L2).
func (g *globalReads) add(o globalRead) {
	if !o.consistent {
		return
	}
	if len(g.reads) > 0 && g.reads[0].lockUID != o.lockUID {
		g.reads = g.reads[:0]
	}
	i := len(g.reads)
	for i > 0 && g.reads[i-1].sent > o.sent {
		i--
	}
	g.reads = slices.Insert(g.reads, i, o)
	if roundsRegressed(g.reads, o.lockUID) {
		g.regressed = o.lockUID
	}
	g.reads = mergeRepeats(g.reads)
	for len(g.reads) > globalKeep {
		g.reads = dropOldest(g.reads)
	}
}

// clear forgets every read (the lock was not found): the next object starts afresh.
func (g *globalReads) clear() { g.reads = g.reads[:0] }

// validUntil is globalValidUntil over the kept reads, refused with globalRegressed on an object
// whose rounds went down at any time.
func (g *globalReads) validUntil(uid types.UID, inCluster instant, token int64, margin time.Duration) (instant, globalRefusal) {
	if g.regressed != "" && g.regressed == uid {
		return 0, globalRegressed
	}
	return globalValidUntil(inCluster, g.reads, token, margin)
}

// roundAhead reports whether round, seen on object uid by a watch event, is above every
// round the kept consistent reads of uid showed: a consistent read now would show a step the
// bound has not used yet (finding L3).
func (g *globalReads) roundAhead(uid types.UID, round int64) bool {
	if round <= 0 {
		return false
	}
	for i := range g.reads {
		if g.reads[i].lockUID == uid && g.reads[i].round >= round {
			return false
		}
	}
	return true
}

// mergeRepeats replaces each read that shows what the one before it showed by the newer one,
// keeping the lower delay and the earlier reception (a read of that round was received then:
// evidence roundsRegressed may still need; the send time, S, is the newer one's).
func mergeRepeats(reads []globalRead) []globalRead {
	out := reads[:0]
	for _, o := range reads {
		if n := len(out); n > 0 {
			p := &out[n-1]
			if p.round == o.round && p.roundToken == o.roundToken && p.heldToken == o.heldToken {
				o.delay = min(o.delay, p.delay)
				o.received = min(o.received, p.received)
				*p = o
				continue
			}
		}
		out = append(out, o)
	}
	return out
}

// dropOldest drops the oldest read, handing its delay on to the kept reads of the same token
// when it is lower.
func dropOldest(reads []globalRead) []globalRead {
	old := reads[0]
	reads = slices.Delete(reads, 0, 1)
	if old.round <= 0 {
		return reads
	}
	for i := range reads {
		if reads[i].round > 0 && reads[i].roundToken == old.roundToken {
			reads[i].delay = min(reads[i].delay, old.delay)
		}
	}
	return reads
}

// globalRefusalErr is the error a refusal of the global bound gives readiness: nil while the
// pod only waits for rounds (no round vouches for its token yet, or none two rounds back).
func globalRefusalErr(why globalRefusal, token int64) error {
	switch why {
	case globalRegressed, globalBadDelay:
		return fmt.Errorf("%w: term %d: %s", ErrGlobalRefused, token, why)
	}
	return nil
}
