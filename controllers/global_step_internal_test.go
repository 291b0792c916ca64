package controllers

import (
	"testing"
	"time"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// The decision rows of one Global lock turn (decideGlobal). This cluster is east (UID
// "uid-east"), the lock object "obj", L = 6 s (P0 2 s, G 6 s), D = 12 s; the turn runs at
// 100 s on this process's clock.

var (
	east = lease.ClusterID{Name: "east", UID: "uid-east"}
	west = lease.ClusterID{Name: "west", UID: "uid-west"}
)

func baseGlobal() globalInput {
	return globalInput{
		now: ts(100), owner: true, apiOK: true, cluster: east, uid: "obj", contender: true,
		ownDelay: 12 * time.Second, period: 2 * time.Second, leaseTTL: 6 * time.Second,
		view:      lease.GlobalView{Rev: 40, ReceivedAt: ts(99.9)},
		pub:       publishedTerm{phase: lockv1.PhasePending, heldReason: ReasonGlobalWaiting},
		candidate: &candidateRef{name: "p1", uid: "pod-1"},
		mem:       globalObject{uid: "obj", seen: true, seenRound: 4, seenAt: ts(99.8)},
	}
}

func grantRec(c lease.ClusterID, object, holderUID string, delay int32) lease.GlobalRecord {
	return lease.GlobalRecord{Kind: lease.RecordGrant, Cluster: c, Object: object, Holder: "p", HolderUID: holderUID, DelaySeconds: delay}
}

func waitRec(c lease.ClusterID, object string, delay int32) lease.GlobalRecord {
	return lease.GlobalRecord{Kind: lease.RecordWaiting, Cluster: c, Object: object, DelaySeconds: delay}
}

// withTomb: K absent at revision 40, T last written at mod with rec.
func withTomb(in *globalInput, mod int64, rec lease.GlobalRecord) {
	in.view.TCreate, in.view.TMod, in.view.Tomb = 3, mod, rec
}

// ownHeld: K is this object's grant, token gTok (900 is above the view's revision: it is
// only a token here), published here with round 4 and one ack at 99 s.
func ownHeld(in *globalInput) {
	in.view = lease.GlobalView{Rev: 950, ReceivedAt: ts(99.9), Held: true, Token: gTok, Lease: 77, Grant: grantRec(east, "obj", "pod-1", 12),
		TCreate: 3, TMod: gTok, Tomb: grantRec(east, "obj", "pod-1", 12)}
	in.pub = publishedTerm{phase: lockv1.PhaseHeld, cluster: "east", holder: "p", holderUID: "pod-1", token: gTok, round: 4, roundToken: gTok, delay: 12, heldReason: lockv1.ReasonHolderPublished}
	m := &in.mem
	m.roundToken, m.roundsForToken, m.roundWritten, m.roundSent = gTok, 3, true, ts(99)
	m.acked, m.ackSent, m.ackAt = true, ts(99), ts(99.05)
	m.renewed, m.renewSent = true, ts(99.1)
	m.confirm = confirmation{sent: ts(98.9), done: true, held: true, token: gTok}
}

func TestDecideGlobal(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(in *globalInput)
		want   globalVerb
		check  func(t *testing.T, s globalStep)
	}{
		// The election.
		{"an invalid election does nothing (R4'(a))", func(in *globalInput) { in.owner = false }, gIdle, nil},
		{"an invalid election does nothing, even for its own grant", func(in *globalInput) { ownHeld(in); in.owner = false }, gIdle, nil},

		// K absent, T never written: R6'.
		{"first grant: T never written (R6')", nil, gGrant, func(t *testing.T, s globalStep) {
			if s.basis != lease.GrantFirst || s.rev != 0 || s.delay != 12 {
				t.Errorf("grant %v rev %d delay %d; want first, 0, 12", s.basis, s.rev, s.delay)
			}
		}},
		{"no eligible candidate: publish NoHolder, no grant", func(in *globalInput) { in.candidate = nil }, gPublishFree, wantReason(lockv1.ReasonNoHolder)},
		{"no candidate, already published: nothing", func(in *globalInput) { in.candidate, in.pub.heldReason = nil, lockv1.ReasonNoHolder }, gIdle, nil},
		{"the API server did not answer this turn: no grant (R4'(b))", func(in *globalInput) { in.apiOK = false }, gIdle, nil},
		{"a younger lock of the same global name: DuplicateGlobalName, no grant (F2)", func(in *globalInput) { in.contender = false }, gPublishFree, wantReason(ReasonDuplicateGlobalName)},
		{"suspended: Suspended, no grant", func(in *globalInput) { in.suspend = true }, gPublishFree, func(t *testing.T, s globalStep) {
			wantReason(lockv1.ReasonSuspended)(t, s)
		}},
		{"deleted with no term: let it go", func(in *globalInput) { in.deleting = true }, gDropFinalizer, nil},

		// spec.clusterPreference: liveness only, it holds a less preferred cluster back.
		{"preferred second, free for 1 s: hold back the first grant one round period", func(in *globalInput) {
			in.preference, in.mem.freeAt = []string{"west", "east"}, ts(99)
		}, gIdle, func(t *testing.T, s globalStep) {
			if s.after != time.Second {
				t.Errorf("after %v; want 1s (99 s + 1 x 2 s - 100 s)", s.after)
			}
		}},
		{"preferred second, free for 3 s: grant", func(in *globalInput) {
			in.preference, in.mem.freeAt = []string{"west", "east"}, ts(97)
		}, gGrant, nil},
		{"preferred first: grant at once", func(in *globalInput) {
			in.preference, in.mem.freeAt = []string{"east", "west"}, ts(99.9)
		}, gGrant, nil},
		{"not listed: after every listed cluster", func(in *globalInput) {
			in.preference, in.mem.freeAt = []string{"west", "north"}, ts(97)
		}, gIdle, func(t *testing.T, s globalStep) {
			if s.after != time.Second {
				t.Errorf("after %v; want 1s (97 s + 2 x 2 s - 100 s)", s.after)
			}
		}},
		{"preferred second: the waiting record waits too", func(in *globalInput) {
			withTomb(in, 30, grantRec(west, "w-obj", "w-pod", 12))
			in.preference, in.mem.freeAt = []string{"west", "east"}, ts(99.5)
		}, gIdle, nil},
		{"preferred second, its own wait standing: no further hold-back", func(in *globalInput) {
			withTomb(in, 41, waitRec(east, "obj", 12))
			in.view.Rev = 45
			in.preference, in.mem.freeAt = []string{"west", "east"}, ts(99.5)
			in.mem.tomb = tombstoneWrite{sent: true, basis: 40, basisAt: ts(80), answered: true, held: true, rev: 41}
		}, gGrant, nil},

		// K absent, T written: R7 and R8.
		{"another cluster's grant gone: write the waiting record, carrying the larger delay (R7.1, R7.2)", func(in *globalInput) {
			withTomb(in, 30, grantRec(west, "w-obj", "w-pod", 20))
		}, gWaitRecord, func(t *testing.T, s globalStep) {
			if s.rev != 40 || s.delay != 20 {
				t.Errorf("wait from %d carrying %d; want 40 and 20", s.rev, s.delay)
			}
		}},
		{"another cluster's grant seen gone 0.1 s ago: hold the waiting record back (its succession may follow)", func(in *globalInput) {
			withTomb(in, 30, grantRec(west, "w-obj", "w-pod", 20))
			in.mem.freeAt = ts(99.9)
		}, gIdle, func(t *testing.T, s globalStep) {
			if s.after != successionGrace-100*time.Millisecond {
				t.Errorf("after %v; want %v", s.after, successionGrace-100*time.Millisecond)
			}
		}},
		{"another cluster's grant seen gone 0.5 s ago: write the waiting record", func(in *globalInput) {
			withTomb(in, 30, grantRec(west, "w-obj", "w-pod", 20))
			in.mem.freeAt = ts(99.5)
		}, gWaitRecord, nil},
		{"this cluster's own grant seen gone just now: no succession hold-back", func(in *globalInput) {
			withTomb(in, 30, grantRec(east, "old-obj", "pod-9", 20))
			in.mem.freeAt = ts(99.9)
		}, gWaitRecord, nil},
		{"the own waiting record stands, the wait has not run out: publish waiting", func(in *globalInput) {
			withTomb(in, 41, waitRec(east, "obj", 12))
			in.view.Rev = 45
			in.pub.heldReason = lockv1.ReasonNoHolder
			in.mem.tomb = tombstoneWrite{sent: true, basis: 40, basisAt: ts(95), answered: true, held: true, rev: 41}
		}, gPublishFree, wantReason(ReasonGlobalWaiting)},
		{"the own waiting record stands, published: wait out the rest from the basis's reception", func(in *globalInput) {
			withTomb(in, 41, waitRec(east, "obj", 12))
			in.view.Rev = 45
			in.mem.tomb = tombstoneWrite{sent: true, basis: 40, basisAt: ts(95), answered: true, held: true, rev: 41}
		}, gIdle, func(t *testing.T, s globalStep) {
			if s.after != 7*time.Second {
				t.Errorf("after %v; want 7s (95 s + 12 s - 100 s)", s.after)
			}
		}},
		{"the wait ran out with T still at the own record: take over (R7.3)", func(in *globalInput) {
			withTomb(in, 41, waitRec(east, "obj", 20))
			in.view.Rev = 45
			in.mem.tomb = tombstoneWrite{sent: true, basis: 40, basisAt: ts(80), answered: true, held: true, rev: 41}
		}, gGrant, func(t *testing.T, s globalStep) {
			if s.basis != lease.GrantTakeover || s.rev != 41 || s.delay != 12 {
				t.Errorf("grant %v rev %d delay %d; want takeover, 41, own 12", s.basis, s.rev, s.delay)
			}
		}},
		{"the wait ran out but T changed since the own record: no grant, a new wait", func(in *globalInput) {
			withTomb(in, 44, waitRec(west, "w-obj", 12))
			in.view.Rev = 45
			in.mem.tomb = tombstoneWrite{sent: true, basis: 40, basisAt: ts(80), answered: true, held: true, rev: 41}
			in.mem.rivalMod, in.mem.rivalSince = 44, ts(99)
		}, gIdle, func(t *testing.T, s globalStep) {
			if s.why != "R7: yield" {
				t.Errorf("why %q; want a yield to the other cluster's wait", s.why)
			}
		}},
		{"the own waiting record's outcome is unknown: observe again", func(in *globalInput) {
			withTomb(in, 30, grantRec(west, "w-obj", "w-pod", 12))
			in.mem.tomb = tombstoneWrite{sent: true, basis: 40, basisAt: ts(95), ambiguous: true}
		}, gObserve, nil},
		{"another cluster waits: yield for twice the wait", func(in *globalInput) {
			withTomb(in, 38, waitRec(west, "w-obj", 12))
			in.mem.rivalMod, in.mem.rivalSince = 38, ts(90)
		}, gIdle, func(t *testing.T, s globalStep) {
			if s.why != "R7: yield" || s.after != 14*time.Second {
				t.Errorf("%s after %v; want a yield for 14s (90 s + 2 x 12 s - 100 s)", s.why, s.after)
			}
		}},
		{"another cluster's wait stood twice the wait: write the own record", func(in *globalInput) {
			withTomb(in, 38, waitRec(west, "w-obj", 12))
			in.mem.rivalMod, in.mem.rivalSince = 38, ts(70)
		}, gWaitRecord, nil},
		{"R8: this process deleted its own token and T still holds it: succession, no wait", func(in *globalInput) {
			withTomb(in, 50, grantRec(east, "obj", "pod-0", 30))
			in.mem.deletedToken = 50
		}, gGrant, func(t *testing.T, s globalStep) {
			if s.basis != lease.GrantSuccession || s.rev != 50 || s.delay != 30 {
				t.Errorf("grant %v rev %d delay %d; want succession, 50, carried 30", s.basis, s.rev, s.delay)
			}
		}},
		{"no R8 after a lease expiry: this process never deleted it (F1)", func(in *globalInput) {
			withTomb(in, 50, grantRec(east, "obj", "pod-0", 12))
		}, gWaitRecord, nil},
		{"no R8 when T's record is another object's of this cluster (F2)", func(in *globalInput) {
			withTomb(in, 50, grantRec(east, "obj-2", "pod-0", 12))
			in.mem.deletedToken = 50
		}, gWaitRecord, nil},
		{"no R8 when T's record is another cluster's under this name (F3)", func(in *globalInput) {
			withTomb(in, 50, grantRec(lease.ClusterID{Name: "east", UID: "uid-copy"}, "obj", "pod-0", 12))
			in.mem.deletedToken = 50
		}, gWaitRecord, nil},
		{"no R8 once T moved on from the own delete", func(in *globalInput) {
			withTomb(in, 52, grantRec(east, "obj", "pod-0", 12))
			in.mem.deletedToken = 50
		}, gWaitRecord, nil},
		{"no R8 without an API server that answered (R4')", func(in *globalInput) {
			withTomb(in, 50, grantRec(east, "obj", "pod-0", 12))
			in.mem.deletedToken, in.apiOK = 50, false
		}, gIdle, nil},

		// K held by someone else.
		{"held by the other cluster: publish it held there", func(in *globalInput) {
			in.view.Held, in.view.Token, in.view.Grant = true, 60, grantRec(west, "w-obj", "w-pod", 12)
		}, gPublishElsewhere, wantReason(ReasonHeldElsewhere)},
		{"held by the other cluster, published: nothing until the watch wakes it (or G)", func(in *globalInput) {
			in.view.Held, in.view.Token, in.view.Grant = true, 60, grantRec(west, "w-obj", "w-pod", 12)
			in.pub = publishedTerm{phase: lockv1.PhaseHeld, cluster: "west", token: 60, heldReason: ReasonHeldElsewhere}
		}, gIdle, nil},
		{"a grant under this cluster's name but another UID is not this cluster's (F3)", func(in *globalInput) {
			in.view.Held, in.view.Token, in.view.Grant = true, 60, grantRec(lease.ClusterID{Name: "east", UID: "uid-copy"}, "obj", "pod-1", 12)
		}, gPublishElsewhere, nil},
		{"a grant of another lock object of this cluster is not this object's (F2)", func(in *globalInput) {
			in.view.Held, in.view.Token, in.view.Grant = true, 60, grantRec(east, "obj-2", "pod-1", 12)
			in.contender = false
		}, gPublishElsewhere, wantReason(ReasonDuplicateGlobalName)},
		{"held elsewhere while this lock is deleted: let it go", func(in *globalInput) {
			in.view.Held, in.view.Token, in.view.Grant = true, 60, grantRec(west, "w-obj", "w-pod", 12)
			in.deleting = true
		}, gDropFinalizer, nil},

		// K is this object's grant: rounds, keepalives, the end of the term.
		{"a new grant not yet published, its own transaction sent after the round was seen: round (R2)", func(in *globalInput) {
			ownHeld(in)
			in.pub = publishedTerm{phase: lockv1.PhasePending, round: 4}
			in.mem.confirm = confirmation{sent: ts(99.85), done: true, held: true, token: gTok}
			in.mem.roundToken, in.mem.roundsForToken, in.mem.acked, in.mem.renewed, in.mem.roundWritten = gTok, 0, false, false, false
		}, gWriteRound, func(t *testing.T, s globalStep) {
			if s.releasing {
				t.Error("the round publishes Releasing")
			}
		}},
		{"a grant adopted (another process's, or an ambiguous one): confirm first", func(in *globalInput) {
			ownHeld(in)
			in.pub = publishedTerm{phase: lockv1.PhasePending, round: 4}
			in.mem = globalObject{uid: "obj", seen: true, seenRound: 4, seenAt: ts(99.8)}
		}, gConfirm, nil},
		{"R3: the second round of a token follows at once", func(in *globalInput) {
			ownHeld(in)
			in.mem.roundsForToken, in.mem.renewSent = 1, ts(99.5)
		}, gConfirm, nil},
		{"a round acknowledged since the last keepalive: renew (R4)", func(in *globalInput) {
			ownHeld(in)
			in.mem.renewSent = ts(98)
		}, gRenew, nil},
		{"no keepalive while the API server does not answer (R4(b))", func(in *globalInput) {
			ownHeld(in)
			in.mem.renewSent, in.apiOK = ts(98), false
		}, gIdle, nil},
		{"renewed, the next round not due: nothing until P0 after the last round's send", func(in *globalInput) { ownHeld(in) }, gIdle, func(t *testing.T, s globalStep) {
			if s.after != time.Second {
				t.Errorf("after %v; want 1s (99 s + 2 s - 100 s)", s.after)
			}
		}},
		{"the round is due and the confirmation older than the round seen: confirm (R1)", func(in *globalInput) {
			ownHeld(in)
			in.now = ts(101.5)
			in.mem.roundSent = ts(99.4)
		}, gConfirm, nil},
		{"due, confirmed after the round was seen: write it", func(in *globalInput) {
			ownHeld(in)
			in.now = ts(101.5)
			in.mem.roundSent, in.mem.confirm.sent = ts(99.4), ts(101.4)
		}, gWriteRound, nil},
		{"the confirmation failed: no round, observe", func(in *globalInput) {
			ownHeld(in)
			in.now = ts(101.5)
			in.mem.roundSent, in.mem.confirm = ts(99.4), confirmation{sent: ts(101.4), done: true, held: false, token: gTok}
		}, gObserve, nil},
		{"the holder pod is gone: a Releasing round at once", func(in *globalInput) {
			ownHeld(in)
			in.holderEnd, in.mem.confirm.sent = lockv1.ReasonHolderGone, ts(99.9)
		}, gWriteRound, func(t *testing.T, s globalStep) {
			if !s.releasing || s.reason != lockv1.ReasonHolderGone {
				t.Errorf("releasing %v reason %q; want Releasing HolderGone", s.releasing, s.reason)
			}
		}},
		{"suspended while held: Releasing", func(in *globalInput) {
			ownHeld(in)
			in.suspend, in.mem.confirm.sent = true, ts(99.9)
		}, gWriteRound, func(t *testing.T, s globalStep) {
			if !s.releasing || s.reason != lockv1.ReasonSuspended {
				t.Errorf("releasing %v reason %q; want Releasing Suspended", s.releasing, s.reason)
			}
		}},
		{"deleted while held: Releasing, never let go at once", func(in *globalInput) {
			ownHeld(in)
			in.deleting, in.mem.confirm.sent = true, ts(99.9)
		}, gWriteRound, func(t *testing.T, s globalStep) {
			if !s.releasing || s.reason != lockv1.ReasonDeleted {
				t.Errorf("releasing %v reason %q; want Releasing Deleted", s.releasing, s.reason)
			}
		}},
		{"Releasing acknowledged 5 s ago: rounds go on, the delete waits", func(in *globalInput) {
			ownHeld(in)
			in.pub.phase, in.pub.heldReason = lockv1.PhaseReleasing, lockv1.ReasonHolderGone
			in.mem.releasingToken, in.mem.releasingAt, in.mem.releasingReason = gTok, ts(95), lockv1.ReasonHolderGone
		}, gIdle, nil},
		{"Releasing acknowledged D ago: delete", func(in *globalInput) {
			ownHeld(in)
			in.pub.phase, in.pub.heldReason = lockv1.PhaseReleasing, lockv1.ReasonHolderGone
			in.mem.releasingToken, in.mem.releasingAt = gTok, ts(88)
		}, gDelete, nil},
		{"Releasing acknowledged D ago, a local candidate: delete, then R8 at once", func(in *globalInput) {
			ownHeld(in)
			in.pub.phase, in.pub.heldReason = lockv1.PhaseReleasing, lockv1.ReasonHolderGone
			in.mem.releasingToken, in.mem.releasingAt = gTok, ts(88)
			in.candidate = &candidateRef{name: "p2", uid: "pod-2"}
		}, gDelete, func(t *testing.T, s globalStep) {
			if s.basis != lease.GrantSuccession || s.rev != gTok || s.delay != 12 {
				t.Errorf("then %v rev %d delay %d; want succession comparing T at %d, delay 12", s.basis, s.rev, s.delay, gTok)
			}
		}},
		{"Releasing acknowledged D ago, no candidate: delete only", func(in *globalInput) {
			ownHeld(in)
			in.pub.phase = lockv1.PhaseReleasing
			in.mem.releasingToken, in.mem.releasingAt = gTok, ts(88)
			in.candidate = nil
		}, gDelete, func(t *testing.T, s globalStep) {
			if s.rev != 0 {
				t.Errorf("then a grant comparing %d; want none", s.rev)
			}
		}},
		{"Releasing acknowledged D ago, suspended: delete only", func(in *globalInput) {
			ownHeld(in)
			in.pub.phase, in.suspend = lockv1.PhaseReleasing, true
			in.mem.releasingToken, in.mem.releasingAt = gTok, ts(88)
			in.candidate = &candidateRef{name: "p2", uid: "pod-2"}
		}, gDelete, func(t *testing.T, s globalStep) {
			if s.rev != 0 {
				t.Errorf("then a grant comparing %d; want none", s.rev)
			}
		}},
		{"Releasing acknowledged D ago, T moved on (another record since the grant): delete only", func(in *globalInput) {
			ownHeld(in)
			in.pub.phase = lockv1.PhaseReleasing
			in.view.TMod, in.view.Tomb = gTok+3, waitRec(west, "w-obj", 12)
			in.mem.releasingToken, in.mem.releasingAt = gTok, ts(88)
			in.candidate = &candidateRef{name: "p2", uid: "pod-2"}
		}, gDelete, func(t *testing.T, s globalStep) {
			if s.rev != 0 {
				t.Errorf("then a grant comparing %d; want none", s.rev)
			}
		}},
		{"the delete waits the larger of the published delay and K's", func(in *globalInput) {
			ownHeld(in)
			in.pub.phase, in.pub.delay = lockv1.PhaseReleasing, 30
			in.mem.releasingToken, in.mem.releasingAt = gTok, ts(80)
		}, gIdle, nil},
		{"Releasing published without a reason: still Releasing, never back to Held", func(in *globalInput) {
			ownHeld(in)
			in.pub.phase, in.pub.heldReason = lockv1.PhaseReleasing, ""
			in.mem = globalObject{uid: "obj", seen: true, seenRound: 4, seenAt: ts(99.8), confirm: confirmation{sent: ts(99.9), done: true, held: true, token: gTok}}
		}, gWriteRound, func(t *testing.T, s globalStep) {
			if !s.releasing || s.reason == "" {
				t.Errorf("releasing %v reason %q; want Releasing with a reason", s.releasing, s.reason)
			}
		}},
		{"Releasing published by an earlier process: the delay starts with this one's first acknowledged round", func(in *globalInput) {
			ownHeld(in)
			in.pub.phase, in.pub.heldReason = lockv1.PhaseReleasing, lockv1.ReasonHolderGone
			in.mem = globalObject{uid: "obj", seen: true, seenRound: 4, seenAt: ts(99.8), confirm: confirmation{sent: ts(99.9), done: true, held: true, token: gTok}}
		}, gWriteRound, func(t *testing.T, s globalStep) {
			if !s.releasing {
				t.Error("the round does not keep Releasing")
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := baseGlobal()
			if tt.mutate != nil {
				tt.mutate(&in)
			}
			got := decideGlobal(in)
			if got.verb != tt.want {
				t.Fatalf("decideGlobal = %v (%s); want %v", got.verb, got.why, tt.want)
			}
			if tt.check != nil {
				tt.check(t, got)
			}
		})
	}
}

func wantReason(r string) func(t *testing.T, s globalStep) {
	return func(t *testing.T, s globalStep) {
		t.Helper()
		if s.reason != r {
			t.Errorf("reason %q; want %q", s.reason, r)
		}
	}
}
