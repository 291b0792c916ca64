package controllers

import (
	"time"

	"github.com/lockwarden/lockwarden/pkg/clock"
)

// Taking over a global lock whose grant is gone (docs/global.md, "The takeover"). A global
// lock has two etcd keys: the grant key, whose CreateRevision is the token, and the global
// tombstone key, which every global grant's transaction puts (a record of the grant: cluster,
// token, lock delay) and every waiting cluster puts (a record of the wait, carrying the
// largest lock delay of the grant it replaces). A manager that wants the grant:
//
//  1. receives a read or watch event showing the grant key absent at etcd revision v, and
//     the tombstone's record as of v; the wait D is the larger of its own lock delay and the
//     record's, counted on its clock from that reception;
//  2. writes its own waiting record to the tombstone, comparing that the grant key is absent
//     and that the tombstone's ModRevision is at most v (no grant and no wait since v);
//  3. after D, grants with a transaction comparing the grant key absent and the tombstone's
//     ModRevision equal to its own record's revision w (nothing since).
//
// A newer observation (a watch re-established, a resync) that still shows the grant key
// absent and the tombstone at w leaves the wait standing: it still counts from the reception
// of the observation the record compared against. Writing a new record for every newer
// observation would restart the wait each time, and a manager whose watch resets more often
// than D would never grant.
//
// So no grant committed between v and the new grant: every earlier grant's key was gone at v,
// every confirmation of it was answered before this manager received the observation, and
// every pod that any such confirmation kept valid has stopped by that reception plus D - m.

// takeoverInput is what a manager knows about a global lock that another grant may have left.
type takeoverInput struct {
	now clock.Instant
	// ownDelay is this cluster's lock delay for the lock (spec.lockDelaySeconds).
	ownDelay time.Duration
	// gone: the newest observation showed the grant key absent at etcd revision goneRev;
	// goneAt is when this process received it; goneDelay the lock delay the tombstone's
	// record as of goneRev carries (0: no record).
	gone      bool
	goneRev   int64
	goneAt    clock.Instant
	goneDelay time.Duration
	// rival: the tombstone as of goneRev is another cluster's waiting record; rivalSince is
	// when this process first saw that record (same ModRevision).
	rival      bool
	rivalSince clock.Instant
	// tomb is this process's waiting record, if it sent one.
	tomb tombstoneWrite
	// newer: an observation received after the tombstone write's reply shows the grant key
	// present (keyPresent) or the tombstone at ModRevision tombMod (0: not seen since). When
	// that observation is the newest one (goneRev above tomb.basis), tombMod is the
	// tombstone's ModRevision as of goneRev.
	keyPresent bool
	tombMod    int64
}

// tombstoneWrite is the outcome of one waiting-record transaction.
type tombstoneWrite struct {
	// sent: the transaction was sent; basis is the goneRev its compare used, and basisAt
	// the goneAt of that observation: when this process received it (its clock). While
	// goneRev is basis the wait counts from goneAt; once a newer observation has replaced
	// goneRev and goneAt and shows this record standing, it counts from basisAt.
	sent    bool
	basis   int64
	basisAt clock.Instant
	// answered: its reply arrived; held: its compares held; rev is its revision (w), above
	// basis whenever it held (the record committed after the observation it compared).
	// ambiguous: it ended without a reply (a timeout, a lost connection): it may have
	// committed or not, and this process does not know w.
	answered, held, ambiguous bool
	rev                       int64
}

// takeoverVerb is what decideTakeover decides.
type takeoverVerb int

const (
	// takeIdle: no observation shows the grant gone (or a newer one shows it back): nothing
	// to take over.
	takeIdle takeoverVerb = iota
	// takeTombstone: write the waiting record, comparing the grant key absent and the
	// tombstone's ModRevision <= basis.
	takeTombstone
	// takeWait: the wait has not run out; ask again after wait.
	takeWait
	// takeGrant: grant now, comparing the grant key absent and the tombstone's ModRevision
	// == tombRev.
	takeGrant
	// takePending: the waiting record's reply is due.
	takePending
	// takeRestart: the wait is void (the waiting record was refused, its outcome is unknown,
	// the tombstone changed since, or the reply says it held at a revision not above its
	// basis, which no etcd reply can: bad input): observe again; a new observation starts a
	// new wait.
	takeRestart
	// takeYield: another cluster is waiting: let it grant; take over only if its record
	// stands unchanged for twice the wait (that manager is gone).
	takeYield
)

// String names the verb for logs and test messages.
func (v takeoverVerb) String() string {
	return [...]string{"idle", "tombstone", "wait", "grant", "pending", "restart", "yield"}[v]
}

// takeover is decideTakeover's outcome with the values its transaction compares.
type takeover struct {
	verb takeoverVerb
	// basis (takeTombstone) and tombRev (takeGrant) are the revisions to compare.
	basis, tombRev int64
	// wait is how long is left (takeWait, takeYield).
	wait time.Duration
}

// decideTakeover decides the next step of taking over a global grant that is gone. The wait
// counts from the reception of the observation the waiting record compared against (goneAt,
// or tomb.basisAt once a newer observation came), not from the record's acknowledgement: the record's compare (nothing since
// that revision) makes a late-landing record harmless, and an earlier start can only be later
// in real time than every confirmation of the gone grant. A newer observation that shows the
// own record still standing keeps that start.
func decideTakeover(in takeoverInput) takeover {
	wait := max(in.ownDelay, in.goneDelay)
	start := in.goneAt
	switch {
	case !in.gone || in.keyPresent:
		return takeover{verb: takeIdle}
	case ownRecordStands(in):
		start = in.tomb.basisAt
	case !in.tomb.sent || in.tomb.basis != in.goneRev:
		if in.rival {
			if left := 2*wait - in.now.Sub(in.rivalSince); left > 0 {
				return takeover{verb: takeYield, wait: left}
			}
		}
		return takeover{verb: takeTombstone, basis: in.goneRev}
	case in.tomb.ambiguous || (in.tomb.answered && (!in.tomb.held || in.tomb.rev <= in.tomb.basis)):
		return takeover{verb: takeRestart}
	case !in.tomb.answered:
		return takeover{verb: takePending}
	case in.tombMod != 0 && in.tombMod != in.tomb.rev:
		return takeover{verb: takeRestart}
	}
	if left := wait - in.now.Sub(start); left > 0 {
		return takeover{verb: takeWait, wait: left}
	}
	return takeover{verb: takeGrant, tombRev: in.tomb.rev}
}

// ownRecordStands: the newest observation is newer than the one this process's waiting record
// compared against, and shows that record still in the tombstone (nothing granted or waited
// since it), so the wait that record started still stands.
func ownRecordStands(in takeoverInput) bool {
	t := in.tomb
	return t.sent && t.answered && t.held && !t.ambiguous && t.rev > t.basis &&
		in.goneRev > t.basis && in.goneRev >= t.rev && in.tombMod == t.rev && !in.rival
}
