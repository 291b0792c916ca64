package controllers

import (
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// A table of decide against every row of DESIGN.md's term-lifecycle table, without an API
// server. The envtest tests then prove the wiring (gather and apply), not the rules.

const (
	tok     = 100 // the published term's token
	lockDly = 15  // lockDelaySeconds
)

// scene builds an input: holder a-0 (uid-a-0) published Held with token tok, its key in etcd.
type scene struct{ in input }

func newScene() *scene {
	spec := &lockv1.DistributedLockSpec{
		Candidates:           lockv1.Candidates{},
		LeaseDurationSeconds: 10, LockDelaySeconds: new(int32(lockDly)), Strategy: lockv1.StrategyOldestReady,
	}
	st := &lockv1.DistributedLockStatus{
		Phase: lockv1.PhaseHeld, Holder: "a-0", HolderUID: "uid-a-0", FencingToken: tok, MaxFencingToken: tok,
		TermLeaseSeconds: 10, ControllerEpoch: 5,
		History: []lockv1.Term{{Holder: "a-0", HolderUID: "uid-a-0", Token: tok, Reason: lockv1.ReasonGranted}},
	}
	a0, a1 := testPod("a-0", created(1)), testPod("a-1", created(2))
	s := &scene{in: input{
		spec: spec, status: st, epoch: 5, rev: tok + 10,
		g: grant{holderUID: "uid-a-0", token: tok, rec: record{Name: "a-0", Phase: lockv1.PhaseHeld, Strategy: lockv1.StrategyOldestReady, LeaseSeconds: 10,
			Containers: []containerMark{{Name: "app", ID: "containerd://app-0"}}}},
		pods:     []corev1.Pod{*a0, *a1},
		selector: labels.SelectorFromSet(labels.Set{"app": "a"}),
	}}
	s.in.holder.pod = &s.in.pods[0]
	return s
}

// unprovenRestartReleasing: a-0's container restarted while a sidecar runs (no proof that the
// old process is gone), and the controller recorded it on the key and in status: Releasing,
// reason HolderRestarted, waited for waited.
func unprovenRestartReleasing(waited time.Duration) *scene {
	return newScene().releasing(waited).restarted(sidecar(running("proxy"))).do(func(in *input) {
		in.status.History[0].Reason, in.g.rec.Reason = lockv1.ReasonHolderRestarted, lockv1.ReasonHolderRestarted
	})
}

// handoffGrantUnpublished: a-0 released its term (tok), a turn ended it and granted a-1
// (token tok+5), and its status write was lost: status still says Held a-0 tok with the
// release, etcd holds a-1's grant, which records the ended term when ends is set (as every
// grant of an end does since review 20e).
func handoffGrantUnpublished(ends bool) *scene {
	return newScene().holderRelease("uid-a-0", tok).do(func(in *input) {
		in.g = grant{holderUID: "uid-a-1", token: tok + 5, rec: record{Name: "a-1", Phase: lockv1.PhaseHeld, Strategy: lockv1.StrategyOldestReady, LeaseSeconds: 10,
			Containers: []containerMark{{Name: "app", ID: "containerd://a1-app"}}}}
		if ends {
			in.g.rec.Ends = &endedTerm{Token: tok, Reason: lockv1.ReasonHolderReleased}
		}
		in.rev = tok + 6
	})
}

func (s *scene) holder(opts ...podOpt) *scene {
	for _, o := range opts {
		o(s.in.holder.pod)
	}
	return s
}
func (s *scene) gone() *scene {
	s.in.holder.pod, s.in.holder.gone = nil, true
	s.in.pods = s.in.pods[1:]
	return s
}
func (s *scene) releasing(waited time.Duration) *scene {
	s.in.status.Phase = lockv1.PhaseReleasing
	s.in.status.History[0].Reason = lockv1.ReasonHolderNotReady
	s.in.g.rec.Phase, s.in.g.rec.Reason = lockv1.PhaseReleasing, lockv1.ReasonHolderNotReady
	s.in.clocks.releasing = waited
	return s
}
func (s *scene) noKey() *scene { s.in.g = grant{}; return s }

// restarted reports the holder's container app running again as the kubelet does after a
// crash: another containerID, restartCount+1, the recorded container's exit in lastState, the
// pod Running and Ready.
func (s *scene) restarted(opts ...podOpt) *scene {
	return s.holder(append([]podOpt{containers(restartedAs("app", "containerd://app-1", 1)), lastEnded(137, "Error", "containerd://app-0")}, opts...)...)
}

// startingTerm makes the published term the restart fast path's grant (its record names the
// term it ended), acknowledged on this replica since (0: not seen here).
func startingTerm(since time.Duration) func(*input) {
	return func(in *input) {
		in.g.rec.Ends = &endedTerm{Token: tok - 5, Reason: lockv1.ReasonHolderRestarted}
		in.clocks.restartGrant = since
	}
}

func (s *scene) holderRelease(uid string, token int64) *scene {
	s.in.release.holderUID, s.in.release.holderToken = types.UID(uid), token
	return s
}
func (s *scene) request(token int64) *scene {
	s.in.release.request, s.in.release.requestRaw, s.in.release.reason = token, strconv.FormatInt(token, 10), "drain"
	return s
}
func (s *scene) do(f func(*input)) *scene { f(&s.in); return s }

// cachedGrant puts in etcd an unpublished grant to a-1 decided on the cached lock (firstGrant)
// at resourceVersion 7 of lock uid-lock, and reads the lock uncached as that very object:
// no status ever written. Options then change what the uncached read shows.
func (s *scene) cachedGrant() *scene {
	s.noHolderPublished()
	s.in.status.ControllerEpoch, s.in.status.MaxFencingToken, s.in.status.History = 0, 0, nil
	s.in.uid, s.in.resourceVersion, s.in.fresh = "uid-lock", "7", true
	s.in.g = grant{holderUID: "uid-a-1", token: tok + 5, rec: record{Name: "a-1", Phase: lockv1.PhaseHeld, Lock: "uid-lock", CachedAt: "7"}}
	return s
}
func (s *scene) onlyCandidate() *scene { s.in.pods = s.in.pods[:1]; return s }
func (s *scene) noHolderPublished() *scene {
	s.in.status.Phase, s.in.status.Holder, s.in.status.HolderUID, s.in.status.FencingToken = lockv1.PhasePending, "", "", 0
	s.in.g, s.in.holder = grant{}, evidence{}
	return s
}

func TestDecide(t *testing.T) {
	wait := time.Duration(lockDly) * time.Second
	type want struct {
		verb    action
		reason  string
		next    string // pod name granted, "" none
		restart bool
		requeue time.Duration // checked when non-zero
	}
	for _, tc := range []struct {
		row   string
		scene *scene
		want  want
	}{
		// No holder published.
		{"no holder, an eligible candidate: grant the oldest", newScene().noHolderPublished(), want{verb: actGrant, reason: lockv1.ReasonGranted, next: "a-0"}},
		{"no holder, none eligible: wait", newScene().noHolderPublished().do(func(in *input) {
			for i := range in.pods {
				notReady()(&in.pods[i])
			}
		}), want{verb: actWait}},
		{"no holder, suspended", newScene().noHolderPublished().do(func(in *input) { in.spec.Suspend = true }), want{verb: actSuspend}},
		{"no holder, lock deleted: drop the finalizer", newScene().noHolderPublished().do(func(in *input) { in.deleting = true }), want{verb: actDropFinalizer}},
		// Holder eligible: nothing.
		{"holder eligible: nothing", newScene(), want{verb: actWait}},
		// A status naming another holder than etcd's grant of its token: corrupt, republished.
		{"status names another holder of the token (hand edit): republish, end nothing", newScene().do(func(in *input) {
			in.status.Holder, in.status.HolderUID = "a-2", "uid-a-2"
		}), want{verb: actRepublish}},
		{"status names no holder for the token etcd holds: republish", newScene().do(func(in *input) {
			in.status.Holder, in.status.HolderUID = "", ""
		}), want{verb: actRepublish}},
		{"status names the holder by another name: republish", newScene().do(func(in *input) { in.status.Holder = "someone" }), want{verb: actRepublish}},
		// After a republish the term is Releasing (StatusCorrupt): only the full delay ends it.
		{"republished term, holder attested stopped: still the full delay", newScene().releasing(time.Second).holder(phase(corev1.PodSucceeded), containers(terminated("app", 0))).do(func(in *input) {
			in.status.History[0].Reason, in.g.rec.Reason = lockv1.ReasonStatusCorrupt, lockv1.ReasonStatusCorrupt
		}), want{verb: actWait}},
		{"republished term, holder eligible again: no return to Held", newScene().releasing(time.Second).do(func(in *input) {
			in.status.History[0].Reason, in.g.rec.Reason = lockv1.ReasonStatusCorrupt, lockv1.ReasonStatusCorrupt
			in.clocks.eligibleAgain, in.clocks.mayReturn = time.Minute, true
		}), want{verb: actWait}},
		{"republished term, the full delay waited: end, grant next", newScene().releasing(wait).do(func(in *input) {
			in.status.History[0].Reason, in.g.rec.Reason = lockv1.ReasonStatusCorrupt, lockv1.ReasonStatusCorrupt
		}), want{verb: actEnd, reason: lockv1.ReasonStatusCorrupt, next: "a-1"}},
		// Attested termination: end at once, grant the next.
		{"attested: Succeeded, all terminated", newScene().holder(deleting(), phase(corev1.PodSucceeded), containers(terminated("app", 0))), want{verb: actEnd, reason: lockv1.ReasonHolderTerminated, next: "a-1"}},
		{"attested: Failed, all terminated", newScene().holder(phase(corev1.PodFailed), containers(terminated("app", 1))), want{verb: actEnd, reason: lockv1.ReasonHolderTerminated, next: "a-1"}},
		{"attested: node out of service", newScene().do(func(in *input) { in.holder.node = taintedNode(OutOfServiceTaint) }), want{verb: actEnd, reason: lockv1.ReasonHolderTerminated, next: "a-1"}},
		{"attested: remembered from a pod event, object gone", newScene().gone().do(func(in *input) { in.holder.remembered = true }), want{verb: actEnd, reason: lockv1.ReasonHolderTerminated, next: "a-1"}},
		{"attested while Releasing: end at once", newScene().releasing(time.Second).holder(phase(corev1.PodSucceeded), containers(terminated("app", 0))), want{verb: actEnd, reason: lockv1.ReasonHolderTerminated, next: "a-1"}},
		// Not attested: a live or restarting process.
		{"crash awaiting restart: Releasing", newScene().holder(notReady(), containers(terminated("app", 2))), want{verb: actRelease, reason: lockv1.ReasonHolderNotReady}},
		{"running sidecar during deletion: Releasing", newScene().holder(deleting(), notReady(), containers(terminated("app", 0)), sidecar(running("side"))), want{verb: actRelease, reason: lockv1.ReasonHolderTerminating}},
		{"PodGC's Failed with containers running: Releasing", newScene().holder(phase(corev1.PodFailed), notReady()), want{verb: actRelease, reason: lockv1.ReasonHolderNotReady}},
		// Every other end goes through Releasing.
		{"pod gone (uncached GET)", newScene().gone(), want{verb: actRelease, reason: lockv1.ReasonHolderGone}},
		{"NotReady", newScene().holder(notReady()), want{verb: actRelease, reason: lockv1.ReasonHolderNotReady}},
		{"terminating", newScene().holder(deleting()), want{verb: actRelease, reason: lockv1.ReasonHolderTerminating}},
		{"selector no longer matches", newScene().holder(labelled("app", "b")), want{verb: actRelease, reason: lockv1.ReasonSelectorChanged}},
		{"suspend", newScene().do(func(in *input) { in.spec.Suspend = true }), want{verb: actRelease, reason: lockv1.ReasonSuspended}},
		{"strategy changed", newScene().do(func(in *input) { in.spec.Strategy = lockv1.StrategyFirstReady }), want{verb: actRelease, reason: lockv1.ReasonStrategyChanged}},
		{"lock deleted", newScene().do(func(in *input) { in.deleting = true }), want{verb: actRelease, reason: lockv1.ReasonDeleted}},
		{"Preferred: preferred pod eligible for the lock delay: preempt", newScene().do(func(in *input) {
			in.spec.Strategy, in.spec.PreferredHolder = lockv1.StrategyPreferred, "a-1"
			in.g.rec.Strategy, in.clocks.preferred = lockv1.StrategyPreferred, wait
		}), want{verb: actRelease, reason: lockv1.ReasonPreempted}},
		{"Preferred: preferred pod eligible for less: wait the rest", newScene().do(func(in *input) {
			in.spec.Strategy, in.spec.PreferredHolder = lockv1.StrategyPreferred, "a-1"
			in.g.rec.Strategy, in.clocks.preferred = lockv1.StrategyPreferred, wait-time.Second
		}), want{verb: actWait, requeue: time.Second}},
		{"API server not answering about the holder: keep, ask again", newScene().do(func(in *input) { in.holder = evidence{}; in.pods = in.pods[1:] }), want{verb: actWait, requeue: time.Second}},
		// Releasing: the delay, counted from the acknowledgement (or first observation).
		{"Releasing, delay not over: wait the rest", newScene().releasing(wait - 2*time.Second).holder(notReady()), want{verb: actWait, requeue: 2 * time.Second}},
		{"Releasing, delay over: end, grant the next", newScene().releasing(wait).holder(notReady()), want{verb: actEnd, reason: lockv1.ReasonHolderNotReady, next: "a-1"}},
		{"Releasing, delay over, only the holder: end, nobody next", newScene().releasing(wait).holder(notReady()).onlyCandidate(), want{verb: actEnd, reason: lockv1.ReasonHolderNotReady}},
		{"Releasing a deleted lock, delay over: end, nobody next", newScene().releasing(wait).do(func(in *input) { in.deleting = true }), want{verb: actEnd, reason: lockv1.ReasonHolderNotReady}},
		{"Releasing, termLeaseSeconds above the lock delay: waits for it", newScene().releasing(wait).holder(notReady()).do(func(in *input) { in.status.TermLeaseSeconds = lockDly + 5 }), want{verb: actWait, requeue: 5 * time.Second}},
		// Holder eligible again while Releasing.
		{"eligible again for max(L/3, 2 s): back to Held", newScene().releasing(time.Second).do(func(in *input) { in.clocks.eligibleAgain, in.clocks.mayReturn = 4*time.Second, true }), want{verb: actKeep, reason: lockv1.ReasonGranted}},
		{"eligible again, not long enough: wait", newScene().releasing(time.Second).do(func(in *input) { in.clocks.eligibleAgain, in.clocks.mayReturn = time.Second, true }), want{verb: actWait, requeue: 10*time.Second/3 - time.Second}},
		{"eligible again but bounced twice: moves on after the delay", newScene().releasing(wait).do(func(in *input) { in.clocks.eligibleAgain, in.clocks.mayReturn = 4*time.Second, false }), want{verb: actEnd, reason: lockv1.ReasonHolderNotReady, next: "a-1"}},
		// etcd and status disagree about the phase.
		{"status Releasing, etcd Held (a late return): Releasing again, wait restarts", newScene().releasing(wait).do(func(in *input) { in.g.rec.Phase = lockv1.PhaseHeld }).holder(notReady()), want{verb: actRelease, reason: lockv1.ReasonHolderNotReady, restart: true}},
		{"status Releasing, etcd Held, holder eligible: Releasing again too", newScene().releasing(wait).do(func(in *input) { in.g.rec.Phase = lockv1.PhaseHeld }), want{verb: actRelease, reason: lockv1.ReasonHolderNotReady, restart: true}},
		{"status Held, etcd Releasing: publish Releasing", newScene().do(func(in *input) {
			in.g.rec.Phase, in.g.rec.Reason = lockv1.PhaseReleasing, lockv1.ReasonPreempted
		}), want{verb: actPublishReleasing, reason: lockv1.ReasonPreempted}},
		// The key vanished.
		{"key vanished, holder eligible: a new term for it", newScene().noKey(), want{verb: actRegrant, reason: lockv1.ReasonRegranted, next: "a-0"}},
		{"key vanished, holder NotReady: Releasing", newScene().noKey().holder(notReady()), want{verb: actRelease, reason: lockv1.ReasonKeyVanished}},
		{"key vanished, holder attested: end at once", newScene().noKey().holder(phase(corev1.PodSucceeded), containers(terminated("app", 0))), want{verb: actEnd, reason: lockv1.ReasonHolderTerminated, next: "a-1"}},
		// Unpublished grants.
		{"unpublished grant, no holder published: adopt", newScene().noHolderPublished().do(func(in *input) {
			in.g = grant{holderUID: "uid-a-1", token: tok + 5, rec: record{Name: "a-1", Phase: lockv1.PhaseHeld}}
		}), want{verb: actAdopt}},
		{"unpublished grant after Releasing: adopt", newScene().releasing(time.Second).do(func(in *input) {
			in.g = grant{holderUID: "uid-a-1", token: tok + 5, rec: record{Name: "a-1", Phase: lockv1.PhaseHeld}}
		}), want{verb: actAdopt}},
		{"unpublished grant, another holder Held and not attested: discard", newScene().do(func(in *input) {
			in.g = grant{holderUID: "uid-a-1", token: tok + 5, rec: record{Name: "a-1", Phase: lockv1.PhaseHeld}}
		}), want{verb: actDiscard}},
		{"unpublished grant, the Held holder attested: adopt", newScene().holder(phase(corev1.PodSucceeded), containers(terminated("app", 0))).do(func(in *input) {
			in.g = grant{holderUID: "uid-a-1", token: tok + 5, rec: record{Name: "a-1", Phase: lockv1.PhaseHeld}}
		}), want{verb: actAdopt}},
		{"unpublished regrant of the same holder: adopt", newScene().do(func(in *input) { in.g.token = tok + 5 }), want{verb: actAdopt}},
		// Unpublished grants decided on the cached lock (firstGrant, cachedGrantStands).
		{"cache-decided grant, the lock read uncached is the copy decided on: adopt", newScene().cachedGrant(), want{verb: actAdopt}},
		{"cache-decided grant, the lock read from the cache: discard (asks for the uncached read)", newScene().cachedGrant().do(func(in *input) { in.fresh = false }), want{verb: actDiscard}},
		{"cache-decided grant, the lock was created again (another UID): discard", newScene().cachedGrant().do(func(in *input) { in.uid = "uid-lock-2" }), want{verb: actDiscard}},
		{"cache-decided grant, the lock was written since (another resourceVersion): discard", newScene().cachedGrant().do(func(in *input) { in.resourceVersion = "9" }), want{verb: actDiscard}},
		{"cache-decided grant, a status was written since: discard", newScene().cachedGrant().do(func(in *input) { in.status.ControllerEpoch = 5 }), want{verb: actDiscard}},
		{"cache-decided grant, another holder Releasing (its lock delay runs): discard, never adopt", newScene().releasing(time.Second).do(func(in *input) {
			in.uid, in.resourceVersion, in.fresh = "uid-lock", "7", true
			in.g = grant{holderUID: "uid-a-1", token: tok + 5, rec: record{Name: "a-1", Phase: lockv1.PhaseHeld, Lock: "uid-lock", CachedAt: "7"}}
		}), want{verb: actDiscard}},
		{"cache-decided grant, the lock is being deleted: discard", newScene().cachedGrant().do(func(in *input) { in.deleting = true }), want{verb: actDiscard}},
		{"cache-decided grant, the lock is suspended: discard", newScene().cachedGrant().do(func(in *input) { in.spec.Suspend = true }), want{verb: actDiscard}},
		{"cache-decided grant, its holder no longer selected: discard", newScene().cachedGrant().do(func(in *input) { in.pods = in.pods[:1] }), want{verb: actDiscard}},
		{"cache-decided grant, its holder not eligible: discard", newScene().cachedGrant().do(func(in *input) { notReady()(&in.pods[1]) }), want{verb: actDiscard}},
		// Token regression and the documented restore.
		{"etcd token below max, not published: regress", newScene().do(func(in *input) { in.g.token = tok - 10 }), want{verb: actRegress}},
		{"etcd revision below max: regress", newScene().noHolderPublished().do(func(in *input) { in.rev = tok - 1 }), want{verb: actRegress}},
		// The holder's own release (release.go): proof for the term it names, like attestation.
		{"holder release of the term, Held: end at once, grant the next", newScene().holderRelease("uid-a-0", tok), want{verb: actEnd, reason: lockv1.ReasonHolderReleased, next: "a-1"}},
		{"holder release of the term, Releasing: end at once, no more waiting", newScene().releasing(time.Second).holder(notReady()).holderRelease("uid-a-0", tok), want{verb: actEnd, reason: lockv1.ReasonHolderReleased, next: "a-1"}},
		{"holder release, only the holder is a candidate: end, nobody next", newScene().onlyCandidate().holderRelease("uid-a-0", tok), want{verb: actEnd, reason: lockv1.ReasonHolderReleased}},
		{"holder release on a deleted lock: end, nobody next", newScene().holderRelease("uid-a-0", tok).do(func(in *input) { in.deleting = true }), want{verb: actEnd, reason: lockv1.ReasonHolderReleased}},
		{"holder release, key vanished (our release's reply lost): end at once", newScene().noKey().holderRelease("uid-a-0", tok), want{verb: actEnd, reason: lockv1.ReasonHolderReleased, next: "a-1"}},
		{"holder release for an older token: ignored", newScene().holderRelease("uid-a-0", tok-1), want{verb: actWait}},
		{"holder release naming another pod: ignored", newScene().holderRelease("uid-a-1", tok), want{verb: actWait}},
		{"holder release for term N after N+1 started for the same pod: ignored", newScene().holderRelease("uid-a-0", tok).do(func(in *input) {
			in.status.FencingToken, in.status.MaxFencingToken, in.g.token, in.status.History[0].Token = tok+5, tok+5, tok+5, tok+5
		}), want{verb: actWait}},
		{"holder release naming status that etcd contradicts (its key names another pod): not taken; the status is republished from etcd", newScene().holderRelease("uid-a-0", tok).do(func(in *input) { in.g.holderUID = "uid-x" }), want{verb: actRepublish}},
		{"holder release of the published term, an unpublished grant in etcd: adopt it", newScene().holderRelease("uid-a-0", tok).do(func(in *input) {
			in.g = grant{holderUID: "uid-a-1", token: tok + 5, rec: record{Name: "a-1", Phase: lockv1.PhaseHeld}}
		}), want{verb: actAdopt}},
		{"holder release and an operator request: the release ends it at once", newScene().request(tok).holderRelease("uid-a-0", tok), want{verb: actEnd, reason: lockv1.ReasonHolderReleased, next: "a-1"}},
		// An operator's request (release.go): Releasing and the full delay, never faster.
		{"operator request for the term, Held: Releasing", newScene().request(tok), want{verb: actRelease, reason: lockv1.ReasonOperatorRelease}},
		{"operator request, holder also NotReady: the operator's reason", newScene().request(tok).holder(notReady()), want{verb: actRelease, reason: lockv1.ReasonOperatorRelease}},
		{"operator request for another token: ignored", newScene().request(tok - 1), want{verb: actWait}},
		{"operator request while Releasing: the wait is not shortened", newScene().releasing(wait - 3*time.Second).holder(notReady()).request(tok), want{verb: actWait, requeue: 3 * time.Second}},
		{"operator request while Releasing, holder eligible again: no return to Held", newScene().releasing(time.Second).request(tok).do(func(in *input) { in.clocks.eligibleAgain, in.clocks.mayReturn = 4*time.Second, true }), want{verb: actWait, requeue: wait - time.Second}},
		{"operator release, delay over: end, grant the next", newScene().releasing(wait).request(tok).do(func(in *input) { in.status.History[0].Reason = lockv1.ReasonOperatorRelease }), want{verb: actEnd, reason: lockv1.ReasonOperatorRelease, next: "a-1"}},
		{"operator request, status Releasing, etcd Held: Releasing again, wait restarts", newScene().releasing(wait).request(tok).do(func(in *input) { in.g.rec.Phase = lockv1.PhaseHeld }), want{verb: actRelease, reason: lockv1.ReasonOperatorRelease, restart: true}},
		{"operator request, no holder: grant as usual", newScene().noHolderPublished().request(tok), want{verb: actGrant, reason: lockv1.ReasonGranted, next: "a-0"}},
		// A restart of the holder's container (restart.go): never the same token again.
		{"restarted, one container, nothing else ends the term: a new term for the same pod at once", newScene().restarted(), want{verb: actEnd, reason: lockv1.ReasonHolderRestarted, next: "a-0"}},
		// A holder release after a restart (review 20c): the release names no process, so it
		// proves nothing once a restart came between the grant and it; the restart rule decides.
		{"restarted with proof, then a holder release of the old token: the fast path, never another pod", newScene().restarted().holderRelease("uid-a-0", tok), want{verb: actEnd, reason: lockv1.ReasonHolderRestarted, next: "a-0"}},
		{"restarted with proof, not Ready yet, then a holder release of the old token: the fast path", newScene().restarted(notReady()).holderRelease("uid-a-0", tok), want{verb: actEnd, reason: lockv1.ReasonHolderRestarted, next: "a-0"}},
		{"a crash's Releasing, restarted with proof, a holder release: the fast path", newScene().releasing(time.Second).restarted().holderRelease("uid-a-0", tok), want{verb: actEnd, reason: lockv1.ReasonHolderRestarted, next: "a-0"}},
		{"restarted without proof (a sidecar runs), key vanished, a holder release: Releasing", newScene().restarted(sidecar(running("proxy"))).holderRelease("uid-a-0", tok).noKey(), want{verb: actRelease, reason: lockv1.ReasonKeyVanished}},
		{"operator's Releasing, restarted with proof, a holder release: the full delay", newScene().releasing(time.Second).restarted().request(tok).do(func(in *input) {
			in.status.History[0].Reason, in.g.rec.Reason = lockv1.ReasonOperatorRelease, lockv1.ReasonOperatorRelease
		}).holderRelease("uid-a-0", tok), want{verb: actWait, requeue: wait - time.Second}},
		{"key vanished, the holder restarted in its life: Releasing (no record to judge the restart by)", newScene().noKey().restarted(), want{verb: actRelease, reason: lockv1.ReasonKeyVanished}},
		{"key vanished, the holder restarted in its life, its release: Releasing", newScene().noKey().restarted().holderRelease("uid-a-0", tok), want{verb: actRelease, reason: lockv1.ReasonKeyVanished}},
		{"Releasing, key vanished, the holder restarted in its life, eligible: the full delay", newScene().releasing(time.Second).noKey().restarted(), want{verb: actWait, requeue: wait - time.Second}},
		{"a record without containers (an older controller's), the holder restarted in its life, its release: not taken", newScene().restarted().do(func(in *input) { in.g.rec.Containers = nil }).holderRelease("uid-a-0", tok), want{verb: actWait}},
		// A gone holder's release (review 20d): judged by its deletion, never by the release.
		{"unproven restart's Releasing, holder release, then the pod force-deleted: still the full delay", unprovenRestartReleasing(time.Second).holderRelease("uid-a-0", tok).gone(), want{verb: actWait, requeue: wait - time.Second}},
		{"unproven restart's Releasing, holder release, pod gone, the key vanished too: still the full delay", unprovenRestartReleasing(time.Second).holderRelease("uid-a-0", tok).gone().noKey(), want{verb: actWait, requeue: wait - time.Second}},
		{"Held, holder release, pod gone before a turn read it: Releasing (no restart can be ruled out)", newScene().holderRelease("uid-a-0", tok).gone(), want{verb: actRelease, reason: lockv1.ReasonHolderGone}},
		{"holder release, pod gone after the kubelet's terminal update (remembered): at once", newScene().holderRelease("uid-a-0", tok).gone().do(func(in *input) { in.holder.remembered = true }), want{verb: actEnd, reason: lockv1.ReasonHolderTerminated, next: "a-1"}},
		{"planned handoff, pod deleting, release on SIGTERM: at once", newScene().holder(deleting(), notReady()).holderRelease("uid-a-0", tok), want{verb: actEnd, reason: lockv1.ReasonHolderReleased, next: "a-1"}},
		{"the fast path's new term (the pod restarted in its life), its own release: at once", newScene().restarted().do(func(in *input) {
			in.g.rec.Containers = []containerMark{{Name: "app", ID: "containerd://app-1", Restarts: 1}}
		}).holderRelease("uid-a-0", tok), want{verb: actEnd, reason: lockv1.ReasonHolderReleased, next: "a-1"}},
		{"proven restart, release, pod deleting: Releasing, not at once", newScene().restarted(deleting()).holderRelease("uid-a-0", tok), want{verb: actRelease, reason: lockv1.ReasonHolderTerminating}},
		{"key vanished, the holder restarted in its life, only candidate, Releasing over: ends (granted anew next turn)", newScene().releasing(wait).noKey().restarted().onlyCandidate(), want{verb: actEnd, reason: lockv1.ReasonHolderNotReady}},
		// A handoff whose status write was lost (review 20e): the grant records the term it
		// ended, and is adopted even when the old holder's evidence is gone by then.
		{"handoff by release, status write lost, a-0's pod gone since, nothing remembered: adopt", handoffGrantUnpublished(true).gone(), want{verb: actAdopt}},
		{"handoff by release, status write lost, a-0 deleting, restarted once before the grant: adopt", handoffGrantUnpublished(true).restarted(deleting(), notReady()), want{verb: actAdopt}},
		{"handoff by release, status write lost, a-0 stepped down and runs, restarted once before the grant: adopt", handoffGrantUnpublished(true).restarted(), want{verb: actAdopt}},
		{"an older controller's grant without the ended term, a-0 gone: judged again, discard", handoffGrantUnpublished(false).gone(), want{verb: actDiscard}},
		{"a grant recording the end of an older token, a-0 gone: judged again, discard", handoffGrantUnpublished(true).gone().do(func(in *input) { in.g.rec.Ends.Token = tok - 1 }), want{verb: actDiscard}},
		{"holder release, the holder pod could not be read: wait for it", newScene().holderRelease("uid-a-0", tok).do(func(in *input) { in.holder.pod = nil }), want{verb: actWait, requeue: time.Second}},
		{"restarted, seen by containerID only: the same", newScene().holder(containers(restartedAs("app", "containerd://app-1", 0)), lastEnded(137, "Error", "containerd://app-0")), want{verb: actEnd, reason: lockv1.ReasonHolderRestarted, next: "a-0"}},
		{"restarted, seen by restartCount only: the same", newScene().holder(containers(restartedAs("app", "", 1)), lastEnded(137, "Error", "containerd://app-0")), want{verb: actEnd, reason: lockv1.ReasonHolderRestarted, next: "a-0"}},
		{"restarted, a native sidecar: Releasing, no proof", newScene().restarted(sidecar(running("side"))), want{verb: actRelease, reason: lockv1.ReasonHolderRestarted}},
		{"restarted, two regular containers: Releasing, no proof", newScene().restarted(twoContainers()), want{verb: actRelease, reason: lockv1.ReasonHolderRestarted}},
		{"restarted, shareProcessNamespace: Releasing, no proof", newScene().restarted(sharedPIDs()), want{verb: actRelease, reason: lockv1.ReasonHolderRestarted}},
		{"restarted, hostPID: Releasing, no proof", newScene().restarted(hostPID()), want{verb: actRelease, reason: lockv1.ReasonHolderRestarted}},
		{"restarted, privileged: Releasing, no proof", newScene().restarted(privilegedApp()), want{verb: actRelease, reason: lockv1.ReasonHolderRestarted}},
		{"restarted, an ephemeral container running: Releasing, no proof", newScene().restarted(debugContainer(running("debug"))), want{verb: actRelease, reason: lockv1.ReasonHolderRestarted}},
		{"restarted, an ephemeral container terminated: proof", newScene().restarted(debugContainer(terminated("debug", 0))), want{verb: actEnd, reason: lockv1.ReasonHolderRestarted, next: "a-0"}},
		{"restarted with proof, not Ready yet (the kubelet's first probe ran before the process listened): the new term at once", newScene().restarted(notReady()), want{verb: actEnd, reason: lockv1.ReasonHolderRestarted, next: "a-0"}},
		{"restarted without proof (a sidecar), not Ready yet: Releasing as NotReady", newScene().restarted(notReady(), sidecar(running("side"))), want{verb: actRelease, reason: lockv1.ReasonHolderNotReady}},
		{"restarted with proof, the new container not running (back-off): Releasing as NotReady", newScene().restarted(notReady()).holder(func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
		}), want{verb: actRelease, reason: lockv1.ReasonHolderNotReady}},
		{"restarted with proof, pod being deleted: Releasing as terminating", newScene().restarted(notReady(), deleting()), want{verb: actRelease, reason: lockv1.ReasonHolderTerminating}},
		{"the fast path's term, NotReady within its lease of the grant: wait, ask again when it runs out", newScene().holder(notReady()).do(startingTerm(4 * time.Second)), want{verb: actWait, requeue: 6 * time.Second}},
		{"the fast path's term, NotReady a lease after the grant: Releasing", newScene().holder(notReady()).do(startingTerm(10 * time.Second)), want{verb: actRelease, reason: lockv1.ReasonHolderNotReady}},
		{"the fast path's term, NotReady, grant not seen by this replica: Releasing", newScene().holder(notReady()).do(startingTerm(0)), want{verb: actRelease, reason: lockv1.ReasonHolderNotReady}},
		{"the fast path's term, its container not running: Releasing", newScene().holder(notReady(), containers(terminated("app", 2))).do(startingTerm(time.Second)), want{verb: actRelease, reason: lockv1.ReasonHolderNotReady}},
		{"a plain term, NotReady: Releasing (no excuse)", newScene().holder(notReady()).do(func(in *input) { in.clocks.restartGrant = time.Second }), want{verb: actRelease, reason: lockv1.ReasonHolderNotReady}},
		{"restarted, operator request: the operator's Releasing", newScene().restarted().request(tok), want{verb: actRelease, reason: lockv1.ReasonOperatorRelease}},
		{"restarted, preferred pod due to preempt: Releasing, no fast path", newScene().restarted().do(func(in *input) {
			in.spec.Strategy, in.spec.PreferredHolder = lockv1.StrategyPreferred, "a-1"
			in.g.rec.Strategy, in.clocks.preferred = lockv1.StrategyPreferred, wait
		}), want{verb: actRelease, reason: lockv1.ReasonPreempted}},
		{"restarted, lock suspended: Releasing for the suspend", newScene().restarted().do(func(in *input) { in.spec.Suspend = true }), want{verb: actRelease, reason: lockv1.ReasonSuspended}},
		{"restarted, grant recorded without containers (older controller): no restart seen", newScene().restarted().do(func(in *input) { in.g.rec.Containers = nil }), want{verb: actWait}},
		{"crash's Releasing, restarted and Ready, proof: a new term for the same pod at once", newScene().releasing(time.Second).restarted(), want{verb: actEnd, reason: lockv1.ReasonHolderRestarted, next: "a-0"}},
		{"crash's Releasing, restarted, etcd still Held: the same fast path", newScene().releasing(time.Second).restarted().do(func(in *input) { in.g.rec.Phase = lockv1.PhaseHeld }), want{verb: actEnd, reason: lockv1.ReasonHolderRestarted, next: "a-0"}},
		{"crash's Releasing, restarted, no proof, eligible long enough: no return to Held", newScene().releasing(time.Second).restarted(sidecar(running("side"))).do(func(in *input) {
			in.clocks.eligibleAgain, in.clocks.mayReturn = time.Minute, true
		}), want{verb: actWait, requeue: wait - time.Second}},
		{"crash's Releasing, restarted, no proof, delay over: the next pod", newScene().releasing(wait).restarted(sidecar(running("side"))), want{verb: actEnd, reason: lockv1.ReasonHolderNotReady, next: "a-1"}},
		{"crash's Releasing, restarted with proof, not Ready yet: the new term at once", newScene().releasing(time.Second).restarted(notReady()), want{verb: actEnd, reason: lockv1.ReasonHolderRestarted, next: "a-0"}},
		{"crash's Releasing, restarted without proof, not Ready yet: wait", newScene().releasing(time.Second).restarted(notReady(), sidecar(running("side"))), want{verb: actWait, requeue: wait - time.Second}},
		{"operator's Releasing, restarted with proof: the full delay", newScene().releasing(time.Second).restarted().request(tok), want{verb: actWait, requeue: wait - time.Second}},
		{"corrupt status's Releasing, restarted with proof: the full delay", newScene().releasing(time.Second).restarted().do(func(in *input) {
			in.status.History[0].Reason, in.g.rec.Reason = lockv1.ReasonStatusCorrupt, lockv1.ReasonStatusCorrupt
		}), want{verb: actWait, requeue: wait - time.Second}},
		{"a restarted sidecar, one regular container: Releasing, no proof", newScene().holder(sidecar(restartedAs("side", "containerd://side-1", 1))).do(func(in *input) {
			in.g.rec.Containers = append(in.g.rec.Containers, containerMark{Name: "side", ID: "containerd://side-0"})
		}), want{verb: actRelease, reason: lockv1.ReasonHolderRestarted}},
		{"stale grant after a bumped restore: drop it", newScene().do(func(in *input) { in.g.token, in.restoredStale = tok-10, true }), want{verb: actDropStale, reason: lockv1.ReasonKeyVanished}},
	} {
		t.Run(tc.row, func(t *testing.T) {
			d := decide(&tc.scene.in)
			next := ""
			if d.next != nil {
				next = d.next.Name
			}
			if d.verb != tc.want.verb || d.reason != tc.want.reason || next != tc.want.next || d.restart != tc.want.restart {
				t.Errorf("decide = {verb %d reason %q next %q restart %v}, want {verb %d reason %q next %q restart %v}",
					d.verb, d.reason, next, d.restart, tc.want.verb, tc.want.reason, tc.want.next, tc.want.restart)
			}
			if tc.want.requeue != 0 && d.requeue != tc.want.requeue {
				t.Errorf("requeue = %v, want %v", d.requeue, tc.want.requeue)
			}
		})
	}
}

// TestMayReturn: a Releasing lock goes back to Held at most once per lockDelay window, and
// not at all once it bounced twice within 4 x lockDelay.
func TestMayReturn(t *testing.T) {
	now := time.Unix(1000, 0)
	d := 10 * time.Second
	for _, tc := range []struct {
		name    string
		returns []time.Duration // ages
		want    bool
	}{
		{"never returned", nil, true},
		{"returned within the window", []time.Duration{5 * time.Second}, false},
		{"returned once, long ago", []time.Duration{15 * time.Second}, true},
		{"returned twice within 4 x lockDelay", []time.Duration{15 * time.Second, 35 * time.Second}, false},
		{"returned twice, one older than 4 x lockDelay", []time.Duration{15 * time.Second, 45 * time.Second}, true},
	} {
		var at []time.Time
		for _, age := range tc.returns {
			at = append(at, now.Add(-age))
		}
		if got := mayReturn(at, now, d); got != tc.want {
			t.Errorf("%s: mayReturn = %v, want %v", tc.name, got, tc.want)
		}
	}
}
