package controllers

import (
	"testing"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// TestReviewFixDecideGlobal: review rev-fix of the fixes after the earlier reviews (the
// deleted lock's wait, token regression, successionLeft). Each row states its suspicion; a
// row that fails shows the defect.
func TestReviewFixDecideGlobal(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(in *globalInput)
		// refuse: verbs the step must not be.
		refuse []globalVerb
		want   globalVerb // checked when refuse is empty
	}{
		// Suspicion (fix 2, token regression): the check compares only the read's revision
		// with the published token. A replacement shared etcd whose revision already passed
		// the published token (other prefixes' writes on it, or a restore with
		// --bump-revision of a snapshot taken before T was written) shows K absent and T
		// never written, so R6' grants at once, while this cluster's published term (round
		// 4 for token 900) may still have a valid pod up to S + D - m: two pods of one lock
		// valid at once. The status proves a grant was made (rounds are never removed), so
		// "T never written" is false evidence here.
		{"replaced etcd at revision 5000 above the published token 900, T never written, this cluster's term published: no R6' grant at once", func(in *globalInput) {
			in.pub = publishedTerm{phase: lockv1.PhaseHeld, cluster: "east", holder: "p", holderUID: "pod-1", token: gTok, round: 4, roundToken: gTok, delay: 12,
				maxToken: gTok, heldReason: lockv1.ReasonHolderPublished}
			in.candidate = &candidateRef{name: "p2", uid: "pod-2"}
			in.view = lease.GlobalView{Rev: 5000, ReceivedAt: ts(99.9)}
			in.mem.freeAt = ts(99.9)
		}, []globalVerb{gGrant}, 0},
		// The same across clusters: this cluster publishes west's term (token 900); on the
		// replacement etcd (revision 5000, T never written) east grants by R6' at once while
		// west's pod may lead up to S + D - m: pods of two clusters valid at once.
		{"replaced etcd at revision 5000, T never written, west's term 900 published here: no R6' grant at once", func(in *globalInput) {
			in.pub = publishedTerm{phase: lockv1.PhaseHeld, cluster: "west", token: gTok, maxToken: gTok, heldReason: ReasonHeldElsewhere}
			in.view = lease.GlobalView{Rev: 5000, ReceivedAt: ts(99.9)}
			in.mem.freeAt = ts(99.9)
		}, []globalVerb{gGrant}, 0},

		// Question (a): a later token of this object that the deleted-token shortcut does not
		// cover. This process deleted 900 after the delay, then its R8 grant's answer was
		// lost but it committed (token 1000, this object's), and it confirmed and published
		// a round for 1000 before the grant lapsed: the shortcut must not drop the finalizer.
		{"deleted, own token 900 deleted, then a later grant 1000 of this object with a round published, lapsed: wait", func(in *globalInput) {
			lapsedOwn(in)
			in.deleting, in.mem.deletedToken = true, gTok
			in.view.TMod, in.view.Tomb = 1000, grantRec(east, "obj", "pod-2", 12)
			in.pub.roundToken, in.pub.token, in.pub.round = 1000, 1000, 6
		}, nil, gIdle},
		// ... and with no round for 1000 no pod of it was ever valid: the drop is sound.
		{"deleted, own token 900 deleted, a later lapsed grant 1000 that no round vouches for: drop", func(in *globalInput) {
			lapsedOwn(in)
			in.deleting, in.mem.deletedToken = true, gTok
			in.view.TMod, in.view.Tomb = 1000, grantRec(east, "obj", "pod-2", 12)
		}, nil, gDropFinalizer},

		// Question (b), liveness: successionLeft (and preferenceLeft) hold back only while
		// "!in.mem.tomb.sent". mem.tomb is reset only by this process's own grant, so a
		// waiting record from an earlier free period (east waited, west overrode it by
		// R7.4 and granted) disables the hold-back when west's term later ends by R8: east
		// writes its waiting record at once, between west's delete and its successor's
		// grant, and west's succession fails (a lock delay lost).
		{"west's grant just deleted (T at its grant 55), east's stale waiting record of an earlier free period: hold back 250 ms", func(in *globalInput) {
			withTomb(in, 55, grantRec(west, "wobj", "wpod", 12))
			in.view.Rev = 60
			in.mem.freeMod, in.mem.freeAt = 55, ts(99.9)
			in.mem.tomb = tombstoneWrite{sent: true, basis: 30, basisAt: ts(50), answered: true, held: true, rev: 31}
		}, nil, gIdle},
		// The common case: east's waiting record lost the race to west's (its compare failed:
		// answered, not held), west waited and granted 55, and now deletes it for its R8.
		{"west's grant just deleted, east's waiting record of the earlier free period lost the race to west's: hold back 250 ms", func(in *globalInput) {
			withTomb(in, 55, grantRec(west, "wobj", "wpod", 12))
			in.view.Rev = 60
			in.mem.freeMod, in.mem.freeAt = 55, ts(99.9)
			in.mem.tomb = tombstoneWrite{sent: true, basis: 30, basisAt: ts(50), answered: true}
		}, nil, gIdle},
		// The same for clusterPreference: east's waiting record (rev 31) was followed by its
		// own grant 55 whose answer was lost (no newGrant, so mem.tomb stays), which lapsed.
		{"clusterPreference [west east], east's stale waiting record of an earlier free period: hold back one period", func(in *globalInput) {
			withTomb(in, 55, grantRec(east, "obj", "pod-9", 12))
			in.view.Rev = 60
			in.preference = []string{"west", "east"}
			in.mem.freeMod, in.mem.freeAt = 55, ts(99.9)
			in.mem.tomb = tombstoneWrite{sent: true, basis: 30, basisAt: ts(50), answered: true, held: true, rev: 31}
		}, nil, gIdle},
		// (b), safety: the hold-back never makes a grant sooner. This process's own waiting
		// record stands and its wait has passed: it grants, hold-back or not.
		{"own waiting record stands, wait passed: grant (the hold-back does not apply)", func(in *globalInput) {
			withTomb(in, 41, waitRec(east, "obj", 12))
			in.view.Rev = 45
			in.mem.freeMod, in.mem.freeAt = 41, ts(99.9)
			in.mem.tomb = tombstoneWrite{sent: true, basis: 40, basisAt: ts(80), answered: true, held: true, rev: 41}
		}, nil, gGrant},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := baseGlobal()
			tt.mutate(&in)
			s := decideGlobal(in)
			if len(tt.refuse) == 0 {
				if s.verb != tt.want {
					t.Fatalf("decideGlobal = %v (%s); want %v", s.verb, s.why, tt.want)
				}
				return
			}
			for _, v := range tt.refuse {
				if s.verb == v {
					t.Fatalf("decideGlobal = %v (%s); a pod of the published term may still be valid", s.verb, s.why)
				}
			}
		})
	}
}
