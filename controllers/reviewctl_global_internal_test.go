package controllers

import (
	"testing"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// Review rev-ctl of the wired Global lock controller (ac41631): rows against decideGlobal.
// The base is TestDecideGlobal's (east, object "obj", L = 6 s, D = 12 s, now 100 s).

// lapsedOwn: this object's term (token gTok, pod-1) is still published Held here, with
// round 4 vouching for it, but K is gone (its lease expired or was revoked: this process did
// not delete it) and T still holds the grant's record. The read showing K absent arrived at
// 99.9 s, the first such read (freeAt).
func lapsedOwn(in *globalInput) {
	ownHeld(in)
	rec := grantRec(east, "obj", "pod-1", 12)
	in.view = lease.GlobalView{Rev: 950, ReceivedAt: ts(99.9), TCreate: 3, TMod: gTok, Tomb: rec}
	in.mem.freeMod, in.mem.freeAt = gTok, ts(99.9)
}

func TestReviewCtlDecideGlobal(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(in *globalInput)
		check  func(t *testing.T, s globalStep)
	}{
		// Suspicion: the finalizer of a deleted lock is dropped while a pod of its term may
		// still be valid by R5 (S + D - m after a read that preceded K's last confirmation).
		// DESIGN.md's lifecycle: "key vanished ... otherwise Releasing as above" and "for a
		// deleted lock, delete the key and drop the finalizer" only after the delay. Once
		// the object is gone, a lock of the same name created again with another
		// spec.globalName (the only way to change it: it is immutable) or as scope Cluster
		// is granted at once (R6', or the in-cluster engine), while the old holder pod still
		// leads: F6 through delete and re-create.
		{"deleted, own K lapsed just now, the term still published Held here: no finalizer drop before D", func(in *globalInput) {
			lapsedOwn(in)
			in.deleting = true
		}, func(t *testing.T, s globalStep) {
			if s.verb == gDropFinalizer {
				t.Errorf("decideGlobal = %v (%s): the lock may go while pod-1 is valid up to D - m after its last reads (D = 12 s, K seen gone 0.1 s ago)", s.verb, s.why)
			}
		}},
		{"deleted, Releasing acknowledged 5 s ago, then K lapsed: no finalizer drop before the delay from the acknowledgement", func(in *globalInput) {
			lapsedOwn(in)
			in.deleting = true
			in.pub.phase, in.pub.heldReason = lockv1.PhaseReleasing, lockv1.ReasonDeleted
			in.mem.releasingToken, in.mem.releasingAt, in.mem.releasingReason = gTok, ts(95), lockv1.ReasonDeleted
		}, func(t *testing.T, s globalStep) {
			if s.verb == gDropFinalizer {
				t.Errorf("decideGlobal = %v (%s): Releasing was acknowledged at 95 s, the delay ends at 107 s; a pod that read Held before it is valid until then", s.verb, s.why)
			}
		}},
		// Pin: after this process's own acknowledged delete (which came D after Releasing),
		// the deleted lock goes at once.
		{"deleted, this process deleted its own K after the delay: drop the finalizer", func(in *globalInput) {
			lapsedOwn(in)
			in.deleting = true
			in.mem.deletedToken = gTok
		}, func(t *testing.T, s globalStep) {
			if s.verb != gDropFinalizer {
				t.Errorf("decideGlobal = %v (%s); want drop finalizer", s.verb, s.why)
			}
		}},

		// Suspicion: a token going down after the shared etcd was replaced or restored
		// (docs/global.md: "the token-regression rules of DESIGN.md apply"; DESIGN.md: etcd
		// showing a token at or below status.maxFencingToken that is not the published one:
		// grant nothing, report TokenRegression). The status publishes token 900, the shared
		// etcd's current revision is 40: any grant now has a token near 41, below 900.
		{"status shows token 900, the shared etcd is at revision 40 with T never written: no first grant (token would go down)", func(in *globalInput) {
			in.pub = publishedTerm{phase: lockv1.PhaseHeld, cluster: "west", token: 900, heldReason: ReasonHeldElsewhere}
		}, func(t *testing.T, s globalStep) {
			if s.verb == gGrant {
				t.Errorf("decideGlobal = %v %v (%s): the grant's token is a revision above 40, below the published token 900", s.verb, s.basis, s.why)
			}
		}},
		{"status shows this cluster's term with token 900, the shared etcd is at revision 40, T at 30: no wait towards a takeover (token would go down)", func(in *globalInput) {
			withTomb(in, 30, grantRec(west, "w-obj", "w-pod", 12))
			in.pub = publishedTerm{phase: lockv1.PhaseHeld, cluster: "east", holder: "p", holderUID: "pod-1", token: 900, round: 4, roundToken: 900, delay: 12, heldReason: lockv1.ReasonHolderPublished}
		}, func(t *testing.T, s globalStep) {
			if s.verb == gGrant || s.verb == gWaitRecord {
				t.Errorf("decideGlobal = %v (%s): a takeover under a regressed etcd grants a token below 900", s.verb, s.why)
			}
		}},

		// Pins: the delay of the end of a term and of a wait comes from etcd's records, never
		// only from the spec (a user lowering lockDelaySeconds mid-term: spec is mutable).
		{"spec lowered to 12 s mid-term, K carries 30 s, a new grant not yet published: the delete waits 30 s", func(in *globalInput) {
			ownHeld(in)
			in.view.Grant.DelaySeconds = 30
			in.pub.roundToken, in.pub.delay = 0, 0
			in.pub.phase, in.pub.heldReason = lockv1.PhaseReleasing, lockv1.ReasonHolderGone
			in.mem.releasingToken, in.mem.releasingAt = gTok, ts(80) // 20 s ago
		}, func(t *testing.T, s globalStep) {
			if s.verb == gDelete {
				t.Errorf("decideGlobal = %v (%s): 20 s after Releasing, K carries 30 s", s.verb, s.why)
			}
		}},
		{"spec lowered to 12 s, T's waiting record carries 30 s: the takeover waits 30 s from the basis", func(in *globalInput) {
			withTomb(in, 41, waitRec(east, "obj", 30))
			in.view.Rev = 45
			in.mem.tomb = tombstoneWrite{sent: true, basis: 40, basisAt: ts(80), answered: true, held: true, rev: 41}
		}, func(t *testing.T, s globalStep) {
			if s.verb == gGrant {
				t.Errorf("decideGlobal = %v (%s): 20 s after the basis, the carried delay is 30 s", s.verb, s.why)
			}
		}},
		{"a held-elsewhere term of this cluster's name but another cluster UID never publishes a holder here", func(in *globalInput) {
			in.view.Held, in.view.Token, in.view.Grant = true, 960, grantRec(lease.ClusterID{Name: "east", UID: "uid-copy"}, "obj", "pod-1", 12)
			in.pub = publishedTerm{phase: lockv1.PhaseHeld, cluster: "east", holder: "p", holderUID: "pod-1", token: 960, round: 4, roundToken: 960, delay: 12, heldReason: lockv1.ReasonHolderPublished}
		}, func(t *testing.T, s globalStep) {
			if s.verb != gPublishElsewhere {
				t.Errorf("decideGlobal = %v (%s); want publish held elsewhere (clearing globalHolderUID)", s.verb, s.why)
			}
		}},
		// Pin: an ambiguous waiting record (reply lost) is no basis for a grant even once the
		// delay passed and T shows a waiting record of this cluster.
		{"own waiting record ambiguous, later seen standing in T after the delay: a new wait, no grant", func(in *globalInput) {
			withTomb(in, 41, waitRec(east, "obj", 12))
			in.view.Rev = 45
			in.mem.tomb = tombstoneWrite{sent: true, basis: 40, basisAt: ts(80), ambiguous: true}
		}, func(t *testing.T, s globalStep) {
			if s.verb == gGrant {
				t.Errorf("decideGlobal = %v (%s): the record's outcome was unknown, its w never known", s.verb, s.why)
			}
		}},
		// Pin: a round write whose acknowledgement was lost leaves the memory at the round
		// before; a read showing that round at 99.8 s needs a confirmation after it.
		{"round due, the last round seen at 99.8 s, the confirmation sent at 99.5 s: confirm, never write", func(in *globalInput) {
			ownHeld(in)
			in.now = ts(101.5)
			in.mem.roundSent, in.mem.confirm.sent, in.mem.seenAt = ts(99.4), ts(99.5), ts(99.8)
		}, func(t *testing.T, s globalStep) {
			if s.verb != gConfirm {
				t.Errorf("decideGlobal = %v (%s); want confirm", s.verb, s.why)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := baseGlobal()
			tt.mutate(&in)
			tt.check(t, decideGlobal(in))
		})
	}
}
