package controllers

import (
	"cmp"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/pkg/clock"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// One turn of a Global lock (docs/global.md) as a pure function: decideGlobal takes what the
// turn read (the lock uncached, K and T in one etcd read, the local candidates) and what this
// process remembers, and returns the next step. The turn (global_turn.go) performs the step,
// reads again what the step changed, and asks again, a few steps per turn. Rounds, keepalives
// and takeovers are decided by mayWriteRound, mayRenewGrant and decideTakeover.

// globalInput is what one step of a Global lock's turn decides on.
type globalInput struct {
	now clock.Instant
	// owner: this replica's election is valid now. apiOK: this turn's uncached read of the
	// lock was answered (R4'(b); R4(b)).
	owner, apiOK bool
	// cluster is this manager's registered identity, uid the lock object's UID.
	cluster lease.ClusterID
	uid     types.UID
	// contender: the lock is the oldest object in this cluster with its globalName (F2).
	contender bool
	// preference is spec.clusterPreference.
	preference []string
	// deleting, suspend: the lock is being deleted, spec.suspend is set.
	deleting, suspend bool
	// ownDelay is the lock's effective delay D; period is P0 = L/3; leaseTTL is G = L.
	ownDelay, period, leaseTTL time.Duration
	// view is the newest read of K and T, received after every etcd write this process
	// made for the name.
	view lease.GlobalView
	// pub is the status as read (or as this process's last write of it returned).
	pub publishedTerm
	// candidate: an eligible local candidate, by strategy (nil: none); never the holder of
	// K when K is this object's (its term is the one ending).
	candidate *candidateRef
	// holderEnd: for a grant of this object's, why its holder's term must end ("" none).
	holderEnd string
	// mem is this process's memory of the object.
	mem globalObject
}

// candidateRef names a local candidate pod.
type candidateRef struct {
	name string
	uid  types.UID
}

// publishedTerm is what the lock's status shows of the global term.
type publishedTerm struct {
	phase      lockv1.Phase
	cluster    string
	holder     string
	holderUID  types.UID // status.globalHolderUID
	token      int64     // status.fencingToken
	round      int64     // status.globalRound
	roundToken int64     // status.globalToken
	delay      int32     // status.globalLockDelaySeconds
	maxToken   int64     // status.maxFencingToken
	heldReason string    // the Held condition's reason
}

// globalVerb is what a step does.
type globalVerb int

const (
	// gIdle: nothing now; run the turn again after step.after (0: on the next event).
	gIdle globalVerb = iota
	// gPublishElsewhere: publish the term another cluster (or another lock object of this
	// cluster) holds: phase Held, no holder here, globalCluster and fencingToken of K.
	gPublishElsewhere
	// gPublishFree: publish that no term is known (Pending, or Suspended) with step.reason.
	gPublishFree
	// gConfirm: send a linearizable confirmation of K's token (R1).
	gConfirm
	// gWriteRound: write the next round for K's token, phase Releasing when step.releasing.
	gWriteRound
	// gRenew: send one keepalive of K's lease (R4).
	gRenew
	// gDelete: delete K by its token (the term ended: the delay passed since Releasing);
	// with step.basis GrantSuccession, grant the candidate by R8 once the delete is
	// acknowledged, comparing T still at step.rev (the deleted token).
	gDelete
	// gGrant: grant the candidate by step.basis, comparing step.rev, carrying step.delay.
	gGrant
	// gWaitRecord: write this manager's waiting record to T, comparing step.rev (R7.2).
	gWaitRecord
	// gObserve: the evidence is not enough (a failed confirmation, a void wait): read again
	// after step.after.
	gObserve
	// gDropFinalizer: the lock is being deleted and holds no term: let it go.
	gDropFinalizer
)

// String names the verb for logs and test messages.
func (v globalVerb) String() string {
	return [...]string{"idle", "publish held elsewhere", "publish free", "confirm", "write round", "renew", "delete", "grant", "write waiting record", "observe", "drop finalizer"}[v]
}

// globalStep is decideGlobal's answer.
type globalStep struct {
	verb globalVerb
	// basis, rev, delay: gGrant's basis and compared revision (w, the own last token, or 0),
	// and the delay its record carries (R6); gWaitRecord's basis revision and carried delay.
	basis lease.GrantBasis
	rev   int64
	delay int32
	// releasing (gWriteRound): the round publishes phase Releasing for reason.
	releasing bool
	reason    string
	// msg (gPublishFree): the Held condition's message ("": the reason's usual one).
	msg string
	// after: when to run again (gIdle, gObserve).
	after time.Duration
	// why explains the step (logs, tests).
	why string
}

// globalObserveSoon is how soon a turn whose evidence failed reads again.
const globalObserveSoon = 100 * time.Millisecond

// decideGlobal decides the next step of a Global lock's turn.
func decideGlobal(in globalInput) globalStep {
	v := in.view
	switch {
	case !in.owner:
		return globalStep{verb: gIdle, why: "the election is not valid: nothing (R4'(a))"}
	case v.Held && ownsGrant(in):
		if why := tokenRegression(in); why != "" {
			return regressionStep(in, why)
		}
		return decideGlobalHolder(in)
	case v.Held:
		return decideGlobalElsewhere(in)
	}
	return decideGlobalFree(in)
}

// ownsGrant: K's record names this cluster's registered identity (its UID, not only its
// name: F3) and this lock object (F2).
func ownsGrant(in globalInput) bool {
	g := in.view.Grant
	return g.Kind == lease.RecordGrant && g.Cluster.UID == in.cluster.UID && g.Object == string(in.uid)
}

// decideGlobalElsewhere: K is another cluster's grant, or another lock object's of this
// cluster. This object publishes that term and grants nothing.
func decideGlobalElsewhere(in globalInput) globalStep {
	v, p := in.view, in.pub
	want := heldElsewhereReason(in)
	switch {
	case in.deleting:
		return globalStep{verb: gDropFinalizer, why: "deleted, and the term is not this object's"}
	case p.phase != lockv1.PhaseHeld || p.cluster != v.Grant.Cluster.Name || p.holderUID != "" || p.holder != "" || p.token != v.Token || p.heldReason != want:
		return globalStep{verb: gPublishElsewhere, reason: want, why: fmt.Sprintf("held by cluster %s with token %d", v.Grant.Cluster.Name, v.Token)}
	}
	// The watch of the global keys wakes the lock when K changes; the requeue covers a
	// watch that missed it.
	return globalStep{verb: gIdle, after: in.leaseTTL, why: "held elsewhere"}
}

func heldElsewhereReason(in globalInput) string {
	if !in.contender {
		return ReasonDuplicateGlobalName
	}
	return ReasonHeldElsewhere
}

// decideGlobalHolder: K is this object's grant. Rounds at cadence P0 (R1-R3), keepalives
// after acknowledged rounds (R4), and the end of the term: Releasing, the delay D from the
// acknowledgement of that write on this process's clock, then the guarded delete.
func decideGlobalHolder(in globalInput) globalStep {
	v, p, m := in.view, in.pub, in.mem
	t := v.Token
	heldHere := p.holderUID == types.UID(v.Grant.HolderUID) && p.token == t && p.roundToken == t && p.cluster == in.cluster.Name &&
		(p.phase == lockv1.PhaseHeld || p.phase == lockv1.PhaseReleasing)
	reason := in.holderEnd
	switch {
	case in.deleting:
		reason = lockv1.ReasonDeleted
	case in.suspend:
		reason = lockv1.ReasonSuspended
	case reason == "" && heldHere && p.phase == lockv1.PhaseReleasing:
		// A term this process (or an earlier one) started ending: it never returns to Held.
		reason = cmp.Or(p.heldReason, lockv1.ReasonNoHolder)
	case reason == "" && m.releasingToken == t:
		reason = m.releasingReason // once Releasing, the term ends: it never returns to Held
	}
	ending := reason != ""
	endDelay := termEndDelay(in)
	if m.releasingToken == t && m.releasingAt != 0 {
		if left := endDelay - in.now.Sub(m.releasingAt); left <= 0 {
			s := globalStep{verb: gDelete, why: fmt.Sprintf("the delay %v passed since Releasing was acknowledged", endDelay)}
			if mayGrantHere(in) && v.TMod == t && v.Tomb.Kind == lease.RecordGrant && v.Tomb.Cluster.UID == in.cluster.UID && v.Tomb.Object == string(in.uid) {
				// R8 right after the acknowledged delete, before another cluster's waiting
				// record can land in T (the grant compares T still at t).
				s.basis, s.rev, s.delay = lease.GrantSuccession, t, max(seconds32(in.ownDelay), v.Tomb.DelaySeconds)
				s.why += "; then R8 to " + in.candidate.name
			}
			return s
		}
	}
	renew := mayRenewGrant(renewInput{
		now: in.now, owner: in.owner, apiReachable: in.apiOK,
		acked: m.acked && m.roundToken == t, ackSent: m.ackSent, ackAt: m.ackAt,
		renewed: m.renewed && m.roundToken == t, renewSent: m.renewSent, period: in.period,
	})
	if renew == renewNow {
		return globalStep{verb: gRenew, why: "a round was acknowledged since the last keepalive"}
	}
	phaseDue := ending && (!heldHere || p.phase != lockv1.PhaseReleasing)
	nextDue := m.roundSent.Add(in.period)
	due := !heldHere || phaseDue || m.roundToken != t || m.roundsForToken < 2 || !m.roundWritten || in.now >= nextDue
	if !due {
		after := nextDue.Sub(in.now)
		if m.releasingToken == t && m.releasingAt != 0 {
			after = min(after, endDelay-in.now.Sub(m.releasingAt))
		}
		return globalStep{verb: gIdle, after: max(after, time.Millisecond), why: "the next round is not due"}
	}
	switch mayWriteRound(roundInput{seen: m.seen, seenRound: m.seenRound, seenAt: m.seenAt, confirm: m.confirm, next: p.round + 1, token: t}) {
	case roundWrite:
		return globalStep{verb: gWriteRound, releasing: ending, reason: reason, why: fmt.Sprintf("round %d for token %d", p.round+1, t)}
	case roundConfirm:
		return globalStep{verb: gConfirm, why: "no confirmation sent since the last round was seen"}
	case roundLost:
		return globalStep{verb: gObserve, after: globalObserveSoon, why: "the confirmation failed: the grant is gone or the election lost"}
	}
	return globalStep{verb: gObserve, after: globalObserveSoon, why: "no evidence of the round before the next"}
}

// termEndDelay is how long a term of this object's waits, from the acknowledgement of its
// Releasing write, before its K is deleted: the largest of the lock's delay, the delay K's
// record carries and the delay the status publishes for the token (what its pods use, R5).
func termEndDelay(in globalInput) time.Duration {
	d := max(in.ownDelay, seconds(in.view.Grant.DelaySeconds))
	if in.pub.roundToken == in.view.Token {
		d = max(d, seconds(in.pub.delay))
	}
	return d
}

// decideGlobalFree: K is absent. Grants (R4': only with a valid election and an API server
// that answered this turn) go to a local candidate by R8, R6' or R7, in that order.
func decideGlobalFree(in globalInput) globalStep {
	v, p, m := in.view, in.pub, in.mem
	if in.deleting {
		return decideGlobalDeletedFree(in)
	}
	if why := tokenRegression(in); why != "" {
		return regressionStep(in, why)
	}
	mayGrant := mayGrantHere(in)
	own := seconds32(in.ownDelay)
	if mayGrant && m.deletedToken != 0 && v.TCreate != 0 && v.TMod == m.deletedToken && v.Tomb.Kind == lease.RecordGrant &&
		v.Tomb.Cluster.UID == in.cluster.UID && v.Tomb.Object == string(in.uid) {
		return globalStep{verb: gGrant, basis: lease.GrantSuccession, rev: v.TMod, delay: max(own, v.Tomb.DelaySeconds),
			why: fmt.Sprintf("R8: this process deleted its own token %d and T still holds it", m.deletedToken)}
	}
	if mayGrant && v.TCreate == 0 {
		if left := preferenceLeft(in); left > 0 {
			return globalStep{verb: gIdle, after: left, why: "clusterPreference: a more preferred cluster may take the first grant"}
		}
		if left := unwrittenTombLeft(in); left > 0 {
			return globalStep{verb: gIdle, after: left, why: "T was never written, but this lock published a term: the shared etcd was replaced, so the first grant waits the lock delay"}
		}
		return globalStep{verb: gGrant, basis: lease.GrantFirst, delay: own, why: "R6': T was never written"}
	}
	reason, wantPhase := freeReason(in)
	if p.phase != wantPhase || p.cluster != "" || p.holderUID != "" || p.holder != "" || p.token != 0 || p.heldReason != reason {
		if !mayGrant || reason != ReasonGlobalWaiting {
			return globalStep{verb: gPublishFree, reason: reason, why: "no term is held"}
		}
	}
	if !mayGrant {
		return globalStep{verb: gIdle, why: "nothing to grant: " + reason}
	}
	tk := decideTakeover(takeoverFrom(in))
	switch tk.verb {
	case takeTombstone:
		if left := preferenceLeft(in); left > 0 && !ownWaitCurrent(in) {
			return globalStep{verb: gIdle, after: left, why: "clusterPreference: a more preferred cluster may start its wait first"}
		}
		if left := successionLeft(in); left > 0 && !ownWaitCurrent(in) {
			return globalStep{verb: gIdle, after: left, why: "another cluster's grant was just deleted: its own succession (R8) may follow"}
		}
		return globalStep{verb: gWaitRecord, rev: tk.basis, delay: max(own, v.Tomb.DelaySeconds), why: fmt.Sprintf("R7.2: wait from revision %d", tk.basis)}
	case takeGrant:
		return globalStep{verb: gGrant, basis: lease.GrantTakeover, rev: tk.tombRev, delay: own, why: fmt.Sprintf("R7.3: the wait passed; T still at %d", tk.tombRev)}
	case takeWait, takeYield:
		if p.heldReason != ReasonGlobalWaiting || p.phase != wantPhase || p.cluster != "" || p.token != 0 {
			return globalStep{verb: gPublishFree, reason: ReasonGlobalWaiting, why: "waiting for the grant"}
		}
		return globalStep{verb: gIdle, after: tk.wait, why: "R7: " + tk.verb.String()}
	}
	return globalStep{verb: gObserve, after: globalObserveSoon, why: "R7: " + tk.verb.String()}
}

// tokenRegression says why the shared etcd is behind what the lock's status published (it was
// replaced, or restored from an older backup: DESIGN.md's token-regression rule), or "". With
// K absent, any grant's token is above the read's revision and nothing more: a revision below
// status.maxFencingToken (or the published fencingToken) may give a token at or below one
// already published. With K this object's grant, a token at or below the maximum that is not
// the published one is a regressed grant: no round vouches for it.
func tokenRegression(in globalInput) string {
	v, p := in.view, in.pub
	top := max(p.maxToken, p.token)
	switch {
	case !v.Held && v.Rev < top:
		return fmt.Sprintf("the shared etcd is at revision %d, below the published token %d (maxFencingToken %d, fencingToken %d): "+
			"a grant now would have a lower token", v.Rev, top, p.maxToken, p.token)
	case v.Held && v.Token != p.token && v.Token <= top:
		return fmt.Sprintf("the shared etcd grants token %d, at or below the published token %d (maxFencingToken %d, fencingToken %d)",
			v.Token, top, p.maxToken, p.token)
	}
	return ""
}

// regressionStep: grant nothing, write no waiting record and no round; publish Held=False
// TokenRegression once (no holder here: a pod stops leading on its next read), then wait
// for the operator (etcdutl snapshot restore --bump-revision), reading again every G.
func regressionStep(in globalInput, why string) globalStep {
	p := in.pub
	_, phase := freeReason(in)
	if p.heldReason != lockv1.ReasonTokenRegression || p.phase != phase || p.cluster != "" || p.holderUID != "" || p.holder != "" || p.token != 0 {
		return globalStep{verb: gPublishFree, reason: lockv1.ReasonTokenRegression, msg: why + "; granting nothing until the shared etcd is restored with --bump-revision", why: why}
	}
	return globalStep{verb: gIdle, reason: lockv1.ReasonTokenRegression, after: in.leaseTTL, why: why}
}

// decideGlobalDeletedFree: the lock is being deleted and K is absent. A pod of this object's
// last term may still lead by R5 up to S + D - m after a read that preceded K's last
// confirmation, so the lock goes (and a lock created again under its name, with another
// globalName or as scope Cluster, may be granted at once) only when no such pod can be valid:
// the object never published a round (no pod of it was ever valid: rounds are never removed);
// or this process deleted its own token after the delay from the acknowledged Releasing, and
// the object's rounds vouch for no later token; or the delay (the largest of the lock's, T's carried one and the
// one published) has passed on this process's clock since its first reception of a read
// showing K absent (freeAt: a new process counts from its own first such read, as R7 does).
func decideGlobalDeletedFree(in globalInput) globalStep {
	v, p, m := in.view, in.pub, in.mem
	switch {
	case p.round == 0:
		return globalStep{verb: gDropFinalizer, why: "deleted, and no round was ever published for this object"}
	case m.deletedToken != 0 && p.roundToken <= m.deletedToken:
		// T may already hold another cluster's waiting record, written as soon as K went:
		// what matters is that no round of this object vouches for a later token than the
		// one this process deleted (only this process grants for the object while its
		// election stands, and newGrant forgets deletedToken).
		return globalStep{verb: gDropFinalizer, why: fmt.Sprintf("deleted, and this process deleted its own token %d after the delay", m.deletedToken)}
	case m.freeAt == 0:
		return globalStep{verb: gObserve, after: globalObserveSoon, why: "deleted: no reception of K absent recorded yet"}
	}
	d := max(in.ownDelay, seconds(p.delay))
	if v.TCreate != 0 {
		d = max(d, seconds(v.Tomb.DelaySeconds))
	}
	if left := d - in.now.Sub(m.freeAt); left > 0 {
		return globalStep{verb: gIdle, after: left, why: fmt.Sprintf("deleted, K absent: the lock goes %v after K was first seen gone (a pod of its last term may lead until then)", d)}
	}
	return globalStep{verb: gDropFinalizer, why: fmt.Sprintf("deleted, and %v passed since K was first seen gone", d)}
}

// preferenceLeft is how much longer this cluster holds back from a free grant because of
// spec.clusterPreference (liveness only: waiting longer before a first grant or a waiting
// record never makes a grant sooner). A cluster at place i of the list (from 0), or after
// it when unlisted, holds back i round periods from when this process first saw the grant
// free (freeAt): a more preferred cluster with a candidate starts its wait first, and this
// one then yields to its waiting record (R7.4). Without a list, or first in it: nothing.
func preferenceLeft(in globalInput) time.Duration {
	if len(in.preference) == 0 || in.mem.freeAt == 0 {
		return 0
	}
	rank := len(in.preference)
	for i, c := range in.preference {
		if c == in.cluster.Name {
			rank = i
			break
		}
	}
	return time.Duration(rank)*in.period - in.now.Sub(in.mem.freeAt)
}

// unwrittenTombLeft is how much longer a first grant (R6': T never written) waits because
// this lock's status shows it once had a term (a round, or a token): T is never deleted, so
// the shared etcd was replaced or restored without T, and a pod of that term, of this
// cluster or (published here) of another, may lead up to S + D - m. The grant then waits the
// larger of this lock's delay and the published one from when this process first saw the
// grant free, as a takeover would (review rev-fix). 0: the lock never showed a term.
func unwrittenTombLeft(in globalInput) time.Duration {
	p := in.pub
	if p.round == 0 && p.token == 0 && p.maxToken == 0 {
		return 0
	}
	if in.mem.freeAt == 0 {
		return globalObserveSoon
	}
	d := max(in.ownDelay, time.Duration(p.delay)*time.Second)
	return d - in.now.Sub(in.mem.freeAt)
}

// ownWaitCurrent: this process's waiting record was sent in the current free period (its
// basis is at or after the revision T stood at when the grant was first seen free); a
// record of an earlier free period must not switch the hold-backs off (review rev-fix).
func ownWaitCurrent(in globalInput) bool {
	return in.mem.tomb.sent && in.mem.tomb.basis >= in.mem.freeMod
}

// successionGrace is how long a cluster holds back its waiting record after it first saw
// free a grant that T records as another cluster's: that cluster may be handing the term to
// one of its own pods (R8: its delete and its successor's grant are two transactions, and a
// waiting record between them makes the succession fail and costs a lock delay). Liveness
// only: the wait then counts from a newer observation, so a takeover after a lapsed grant
// comes at most this much later.
const successionGrace = 250 * time.Millisecond

// successionLeft is how much longer this cluster holds back its waiting record so (0: none).
func successionLeft(in globalInput) time.Duration {
	t := in.view.Tomb
	if in.mem.freeAt == 0 || t.Kind != lease.RecordGrant || t.Cluster.UID == in.cluster.UID {
		return 0
	}
	return successionGrace - in.now.Sub(in.mem.freeAt)
}

// mayGrantHere: this cluster may make a grant of the lock now (R4': the election is valid,
// checked first, and the API server answered this turn), to its candidate.
func mayGrantHere(in globalInput) bool {
	return in.apiOK && in.contender && !in.suspend && !in.deleting && in.candidate != nil
}

// freeReason is the Held condition's reason, and the phase, of a lock with no term.
func freeReason(in globalInput) (string, lockv1.Phase) {
	switch {
	case in.suspend:
		return lockv1.ReasonSuspended, lockv1.PhaseSuspended
	case !in.contender:
		return ReasonDuplicateGlobalName, lockv1.PhasePending
	case in.candidate == nil:
		return lockv1.ReasonNoHolder, lockv1.PhasePending
	}
	return ReasonGlobalWaiting, lockv1.PhasePending
}

// takeoverFrom builds decideTakeover's input from the turn's: the newest read shows K absent
// at view.Rev, received at view.ReceivedAt (L5), and it was received after the answer of any
// waiting record this process wrote.
func takeoverFrom(in globalInput) takeoverInput {
	v := in.view
	ti := takeoverInput{
		now: in.now, ownDelay: in.ownDelay,
		gone: true, goneRev: v.Rev, goneAt: v.ReceivedAt,
		tomb: in.mem.tomb,
	}
	if v.TCreate != 0 {
		ti.goneDelay = seconds(v.Tomb.DelaySeconds)
		ti.tombMod = v.TMod
	}
	if v.TCreate != 0 && v.Tomb.Kind == lease.RecordWaiting && v.Tomb.Cluster.UID != in.cluster.UID {
		ti.rival = true
		ti.rivalSince = in.now
		if in.mem.rivalMod == v.TMod {
			ti.rivalSince = in.mem.rivalSince
		}
	}
	return ti
}

func seconds(s int32) time.Duration { return time.Duration(s) * time.Second }

func seconds32(d time.Duration) int32 { return int32((d + time.Second - 1) / time.Second) }
