package controllers

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/pkg/eligibility"
)

// A turn is gather (input), decide (a pure function of the input), apply (the guarded etcd
// writes, then one status write). decide implements DESIGN.md's term-lifecycle table; each
// row is a case below, and decide_test.go tests every one without an API server.

// input is everything one turn knows: the lock, what etcd holds, the candidates, the
// evidence about the published holder and the durations this replica measured.
type input struct {
	spec     *lockv1.DistributedLockSpec
	deleting bool
	// uid and resourceVersion identify the lock object as read; fresh says it was read
	// uncached (or is the answer of this turn's own write), not from the cache.
	uid             types.UID
	resourceVersion string
	fresh           bool
	// status is the published status.
	status *lockv1.DistributedLockStatus
	// epoch is this replica's controller epoch (its election token).
	epoch int64
	// g is the lock key as read linearizably at the start of the turn; rev the revision.
	g   grant
	rev int64
	// restoredStale: etcd holds a grant older than the published term, etcd's revision is
	// above every published token and its history up to them is compacted away: the
	// leftover of the documented restore with --bump-revision --mark-compacted.
	restoredStale bool
	// pods are the candidates the selector matches; selector is nil when it is invalid.
	pods     []corev1.Pod
	selector labels.Selector
	holder   evidence
	clocks   clocks
	// release is what the lock's release annotations ask (release.go).
	release releases
	// retired: the turn is of a slot at or above spec.slots (slots.go), judged with
	// spec.suspend set: its term ends for SlotRemoved and nothing is granted.
	retired bool
	// others are the pods another slot's published term names (slots.go): a pod holds at
	// most one slot of a lock.
	others map[types.UID]int32
	// openSlot: another slot of the lock has no term or is Releasing (slots.go): the
	// preferred pod gets that slot, and Preferred preempts no other for it.
	openSlot bool
	// full: the lock's other slots have spec.slots terms already (a removed slot still
	// ending): a new pod is granted no slot (slots.go).
	full bool
	// unlistedSlot: a slot not in status.slots whose view's maxFencingToken is the removed
	// slots' highest token (slots.go).
	unlistedSlot bool
}

// evidence is what is known about the published holder.
type evidence struct {
	// pod is the holder pod when it exists with the published UID (cache, or uncached GET).
	pod *corev1.Pod
	// gone: the API server said NotFound, or the name now has another UID.
	gone bool
	// node is the holder's node, when known.
	node *corev1.Node
	// remembered: a pod event attested the holder's termination in this term.
	remembered bool
}

// clocks are durations this replica measured on its own monotonic clock.
type clocks struct {
	// releasing: how long the published Releasing term has been waited, counted from the
	// acknowledgement of its status write or from this replica's first observation of it.
	releasing time.Duration
	// eligibleAgain: how long the Releasing holder has been continuously eligible again.
	eligibleAgain time.Duration
	// mayReturn: a return to Held is allowed (at most once per lockDelay window, not after
	// two within 4 x lockDelay).
	mayReturn bool
	// preferred: how long the preferred pod has been continuously eligible.
	preferred time.Duration
	// restartGrant: how long ago this replica saw the published term's grant acknowledged,
	// when that grant was the restart fast path's (0: it was not, or not by this replica).
	restartGrant time.Duration
}

// verb is what a turn does.
type action int

const (
	// actWait: no etcd write; publish what changed (conditions, count), ask again after requeue.
	actWait action = iota
	// grant the lock to next (no published holder).
	actGrant
	// actRegrant: the key vanished while the holder stayed eligible; a new term for it.
	actRegrant
	// actRelease: record Releasing in etcd, publish it, start the lock delay at its
	// acknowledgement. With restart, etcd said Held while status said Releasing: the wait
	// starts again.
	actRelease
	// actPublishReleasing: etcd recorded Releasing that status does not show yet.
	actPublishReleasing
	// actKeep: a Releasing holder eligible again gets a new term at once (a new token: a
	// return never keeps the token).
	actKeep
	// actEnd the term (delete the key, guarded) and grant next at once, if any.
	actEnd
	// actAdopt: publish a grant etcd has and status does not.
	actAdopt
	// actRepublish: the status names another holder than etcd's grant of the published
	// token (a hand edit): publish the holder etcd has, end no term.
	actRepublish
	// actDiscard: delete an unpublished grant that may not replace the published Held holder
	// yet, then decide again (the published term's key is gone).
	actDiscard
	// actDropStale: delete the stale grant of a bumped restore, then decide again.
	actDropStale
	// actRegress: token regression; grant nothing.
	actRegress
	// actSuspend: no holder, spec.suspend: phase Suspended.
	actSuspend
	// actDropFinalizer: a deleted lock without a term: let it go.
	actDropFinalizer
)

// decision is the outcome of decide.
type decision struct {
	verb   action
	reason string
	// next is the pod to grant (grantNext, regrant, end).
	next *corev1.Pod
	// restart: release starts the wait again (etcd said Held while status said Releasing).
	restart bool
	// requeue asks for another turn within this duration (0: none).
	requeue time.Duration
	// why explains a regression.
	why string
}

// decide runs the term-lifecycle table on in.
func decide(in *input) decision {
	st, g := in.status, in.g
	switch {
	case g.present() && g.token <= st.MaxFencingToken && g.token != st.FencingToken && (in.restoredStale || in.unlistedSlot):
		// in.unlistedSlot: a grant of a slot listed again at or below a removed slot's
		// token: no pod leads by it, and publishing it would lower the slot's tokens
		// (review 22)
		return decision{verb: actDropStale, reason: lockv1.ReasonKeyVanished}
	case g.present() && g.token <= st.MaxFencingToken && g.token != st.FencingToken:
		return decision{verb: actRegress, requeue: regressionRecheck, why: fmt.Sprintf("etcd holds token %d, at or below status.maxFencingToken %d and not the published token %d",
			g.token, st.MaxFencingToken, st.FencingToken)}
	case !g.present() && in.rev < st.MaxFencingToken:
		return decision{verb: actRegress, requeue: regressionRecheck, why: fmt.Sprintf("etcd is at revision %d, below status.maxFencingToken %d", in.rev, st.MaxFencingToken)}
	case g.present() && g.token > st.MaxFencingToken:
		return decideUnpublished(in)
	case g.present() && g.token == st.FencingToken && (g.holderUID != st.HolderUID || (g.rec.Name != "" && g.rec.Name != st.Holder)):
		// The token is the key's CreateRevision: the status of that token can name only the
		// pod etcd granted it to. A status naming another is corrupt (a hand edit), never a
		// term to end.
		return decision{verb: actRepublish, why: fmt.Sprintf("status named %s (uid %s) as the holder of token %d, which etcd granted to %s (uid %s)",
			orNone(st.Holder), orNone(string(st.HolderUID)), g.token, orNone(g.rec.Name), g.holderUID)}
	case st.HolderUID == "":
		return decideNoHolder(in)
	case st.Phase == lockv1.PhaseReleasing:
		return decideReleasing(in)
	}
	return decideHeld(in)
}

// decideUnpublished handles a grant that etcd has and status does not: a grant whose status
// write was lost or whose outcome was ambiguous. It is published as recorded, unless status
// still shows another holder Held whose end is not attested: that term must go through
// Releasing and the delay first, so the unpublished grant (which no pod leads by) is deleted.
// A grant decided on the cache is published only if the lock is still what that decision
// saw (cachedGrantStands); otherwise it is deleted too, and the lock decided again.
func decideUnpublished(in *input) decision {
	st := in.status
	if in.g.rec.Lock != "" && in.g.rec.Lock != in.uid {
		// A grant of another lock object under this name (deleted with skip-etcd-cleanup,
		// created again before a turn found it gone): this object never published it, so no
		// pod leads by it for this lock, and adopting it would publish the old lock's holder
		// and token.
		return decision{verb: actDiscard}
	}
	if in.retired {
		// A grant of a slot at or above spec.slots (decided before spec.slots was lowered,
		// whose status write was lost): a removed slot grants nothing, and no pod leads by
		// an unpublished grant (review 22).
		return decision{verb: actDiscard}
	}
	if in.full && (in.g.holderUID != st.HolderUID || st.Phase != lockv1.PhaseHeld) {
		// The other slots hold spec.slots terms (spec.slots lowered while this grant was in
		// flight): publishing it would be a grant beyond N, as decideNoHolder's (review 22b).
		// The slot's own Held holder's grant (a restart's new term) adds no pod; its
		// Releasing holder's (a regrant or restart) could outlive the old term's delay
		// (review 22e). An end the grant
		// records is published at once, with no grant, as the turn that decided it would
		// have (review 22c: judged again, a proven end could wait the lock delay). Not the
		// restart fast path's end (fastPathGrant: the same pod's new term): its proof is of
		// the old process only, the restarted one may lead the old token until the delay,
		// and only the same pod's new term made the end at once safe; judged again, the term
		// waits its delay out (decideReleasing; review 22g). Another pod's grant records a
		// restart's end only after the Releasing term's delay (endTerm): that end is
		// published (review 22h).
		if endsPublished(in) && !fastPathGrant(in.g) {
			return decision{verb: actEnd, reason: in.g.rec.Ends.Reason}
		}
		return decision{verb: actDiscard}
	}
	if _, held := in.others[in.g.holderUID]; held {
		// A grant of this slot to a pod another slot's term names (decided before that
		// term was published, whose status write was lost): a pod holds at most one slot,
		// and no pod leads by an unpublished grant.
		return decision{verb: actDiscard}
	}
	if in.g.rec.CachedAt != "" && !cachedGrantStands(in) {
		// On a cached read this asks for the uncached one (a discard writes etcd), which
		// decides again.
		return decision{verb: actDiscard}
	}
	if st.HolderUID != "" && st.HolderUID != in.g.holderUID && st.Phase != lockv1.PhaseReleasing && !endsPublished(in) {
		if e := termEnd(in); !e.attested {
			return decision{verb: actDiscard}
		}
	}
	return decision{verb: actAdopt}
}

// endsPublished reports whether the unpublished grant records that it ended the published
// term: the turn that granted it judged that term's end (its release, attestation, or the
// delay) and lost its status write. Publishing the grant is what that write would have
// published; judging the old holder again could find its evidence gone (a pod deleted since,
// whose terminal update this replica never saw; a restart record replaced by the grant's),
// and discarding the grant would cost the lock delay (review 20e). A grant of an older
// controller, without the record, is judged as before.
//
// An end by the holder's release stands only while the release still names the term: the
// holder pod alone may remove it (config/policy), and a process of the pod started after
// its removal may lead the token again (review 20f).
func endsPublished(in *input) bool {
	e := in.g.rec.Ends
	if e == nil || e.Token != in.status.FencingToken || in.status.FencingToken == 0 {
		return false
	}
	return e.Reason != lockv1.ReasonHolderReleased || holderReleased(in)
}

// cachedGrantStands reports whether an unpublished grant decided on the cached lock
// (firstGrant) was decided on the lock as it still is: read uncached, the same object (UID)
// at the same resourceVersion, so with the same spec, no status ever written
// (controllerEpoch 0, no holder), not being deleted, not suspended; and its holder still an
// eligible candidate. The cache may have shown a lock deleted since, created again, edited,
// or with a status it no longer has (a Releasing term whose lock delay runs): adopting a
// grant decided on that would skip the delay, grant a pod the lock no longer selects, or hold
// a suspended or deleted lock. Such a grant was never published, so no pod leads by it and
// deleting it ends nothing.
func cachedGrantStands(in *input) bool {
	g, st := in.g, in.status
	if !in.fresh || g.rec.Lock != in.uid || g.rec.CachedAt != in.resourceVersion ||
		st.ControllerEpoch != 0 || st.HolderUID != "" || in.deleting || in.spec.Suspend {
		return false
	}
	for i := range in.pods {
		if in.pods[i].UID == g.holderUID {
			return eligibility.Eligible(&in.pods[i])
		}
	}
	return false
}

// decideNoHolder grants the lock when a candidate is eligible.
func decideNoHolder(in *input) decision {
	switch {
	case in.deleting:
		return decision{verb: actDropFinalizer}
	case in.spec.Suspend:
		return decision{verb: actSuspend}
	}
	if in.full {
		return decision{verb: actWait}
	}
	if next := eligibility.Choose(in.spec, in.pods, ""); next != nil {
		return decision{verb: actGrant, reason: lockv1.ReasonGranted, next: next}
	}
	return decision{verb: actWait}
}

// decideHeld handles a published Held term.
func decideHeld(in *input) decision {
	e := termEnd(in)
	switch {
	case !in.g.present() && e.attested: // e.g. our own release whose reply was lost
		return endTerm(in, e.reason)
	case !in.g.present() && e.reason == "" && e.pod == nil:
		// The key vanished and the API server could not be asked about the holder: decide
		// once it answers.
		return decision{verb: actWait, requeue: e.recheck}
	case !in.g.present() && e.reason == "" && !mayHaveRestarted(in):
		// The key vanished (controller down past the grant lease, operator action) but the
		// holder is still eligible: a new term for it, with a new token. Not when its
		// container may have restarted: without the key's record no restart can be judged,
		// and one without proof needs Releasing and the full delay (the case below).
		return decision{verb: actRegrant, reason: lockv1.ReasonRegranted, next: e.pod}
	case !in.g.present():
		return decision{verb: actRelease, reason: lockv1.ReasonKeyVanished}
	case in.g.rec.Phase == lockv1.PhaseReleasing:
		return decision{verb: actPublishReleasing, reason: in.g.rec.Reason}
	case e.attested:
		return endTerm(in, e.reason)
	case e.proof:
		return restartTerm(e)
	case e.reason != "":
		return decision{verb: actRelease, reason: e.reason}
	}
	return decision{verb: actWait, requeue: e.recheck}
}

// decideReleasing handles a published Releasing term: back to Held, on to the next, or wait.
func decideReleasing(in *input) decision {
	st, g := in.status, in.g
	ours := g.present() && g.token == st.FencingToken
	// A term republished from a corrupt status: a pod the edit named may have led its token,
	// so neither the holder's release nor its attested stop, nor a return to Held, may cut
	// the full delay short.
	corrupt := releasingReason(st) == lockv1.ReasonStatusCorrupt || (ours && g.rec.Reason == lockv1.ReasonStatusCorrupt)
	// An operator's release never returns to Held, even once its annotation is gone (a
	// GitOps tool re-applying the manifest): the term ends after the full delay.
	byOperator := releasingReason(st) == lockv1.ReasonOperatorRelease || (ours && g.rec.Reason == lockv1.ReasonOperatorRelease)
	e := termEnd(in)
	switch {
	case e.attested && !corrupt:
		return endTerm(in, e.reason)
	case e.proof && ours && !corrupt && !byOperator && !in.full:
		// The crash's Releasing, then the restarted container eligible: a new term for the
		// same pod at once. Never the old token back, never another pod before the delay.
		// Not while the other slots hold spec.slots terms (a shrink): the new term would
		// outlive the old one's delay while a removed slot's term still runs, one beyond
		// spec.slots; the term waits out its delay and ends with no grant below (ending it
		// at once would let another pod in before the delay once the shrink completes;
		// reviews 22c, 22d, 22e).
		return restartTerm(e)
	}
	if ours && g.rec.Phase == lockv1.PhaseHeld {
		// etcd says Held, status says Releasing: a return to Held whose status write was lost
		// or is still in flight (a deposed replica's). Record Releasing again and count the
		// delay from the acknowledgement of a new status write, which that late write can no
		// longer overtake.
		reason := e.reason
		if reason == "" {
			reason = releasingReason(st)
		}
		return decision{verb: actRelease, reason: reason, restart: true}
	}
	wait := releaseWait(in.spec, st)
	var requeue time.Duration
	if !g.present() && e.reason == "" && e.pod != nil && !byOperator && !corrupt && releasingReason(st) != lockv1.ReasonHolderRestarted && !mayHaveRestarted(in) && !in.full {
		// The key vanished while Releasing (the fast path's grant failed after its delete;
		// the controller was down past the grant lease) and the holder is eligible: as for a
		// Held term, a new term for it at once, with a new token. Never for a term whose end
		// forbids a return (an operator's request, a corrupt status, a restart without proof),
		// nor for a holder whose container may have restarted (nothing left to judge it by).
		return decision{verb: actRegrant, reason: lockv1.ReasonRegranted, next: e.pod}
	}
	// A restarted holder (e.reason HolderRestarted) never goes back to Held: a restart never
	// keeps a token. Nor does a term whose record names no containers (granted by a
	// controller before the restart rule, or rewritten by one during an upgrade): a restart of
	// it could not be seen.
	// Neither a regrant above nor a return to Held while the other slots hold spec.slots
	// terms: the Releasing holder's term may have run out its delay, so a new term for it
	// would be one beyond spec.slots (review 22c).
	if e.reason == "" && ours && !byOperator && !corrupt && len(g.rec.Containers) > 0 && !in.full {
		need := returnAfter(st)
		switch {
		case in.clocks.eligibleAgain >= need && in.clocks.mayReturn:
			return decision{verb: actKeep, reason: lockv1.ReasonGranted}
		case in.clocks.eligibleAgain < need:
			requeue = need - in.clocks.eligibleAgain
		}
	}
	if in.clocks.releasing < wait {
		return decision{verb: actWait, requeue: minPositive(requeue, wait-in.clocks.releasing)}
	}
	return endTerm(in, releasingReason(st))
}

// endTerm ends the published term for reason and grants the next eligible candidate, if
// any (not for a deleted or suspended lock).
func endTerm(in *input, reason string) decision {
	d := decision{verb: actEnd, reason: reason}
	if !in.deleting && !in.spec.Suspend && !in.full {
		d.next = eligibility.Choose(in.spec, in.pods, string(in.status.HolderUID))
	}
	return d
}

// restartTerm ends the term of a holder whose container restarted with proof that the old
// process is gone, and grants the same pod a new term (a new token) at once: the old process
// cannot write any more, and the new one may already lead the old token, so no other pod may
// start before the lock delay.
func restartTerm(e ending) decision {
	return decision{verb: actEnd, reason: lockv1.ReasonHolderRestarted, next: e.pod}
}

// releasingReason is why the published Releasing term is ending.
func releasingReason(st *lockv1.DistributedLockStatus) string {
	if open := openTerm(st); open != nil && open.Reason != "" && open.Reason != lockv1.ReasonGranted && open.Reason != lockv1.ReasonRegranted {
		return open.Reason
	}
	return lockv1.ReasonHolderNotReady
}

// releaseWait is max(lockDelaySeconds, termLeaseSeconds).
func releaseWait(spec *lockv1.DistributedLockSpec, st *lockv1.DistributedLockStatus) time.Duration {
	return time.Duration(max(spec.EffectiveLockDelaySeconds(), st.TermLeaseSeconds)) * time.Second
}

// returnAfter is how long a Releasing holder must be continuously eligible to go back to
// Held: max(L/3, 2 s) of the term's lease.
func returnAfter(st *lockv1.DistributedLockStatus) time.Duration {
	return max(time.Duration(st.TermLeaseSeconds)*time.Second/3, 2*time.Second)
}

func minPositive(a, b time.Duration) time.Duration {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	}
	return min(a, b)
}

// orNone is s, or "none" when s is empty.
func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
